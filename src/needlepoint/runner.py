"""The async pipeline: prompt, ask, parse, repair once, judge, store; bounded concurrency.

It knows a benchmark only through its verbs and a model only through `complete`. A fixed pool of
workers pulls samples from one iterator, so memory holds at most `concurrency` requests at a time
whatever the run's length, and each record reaches disk before the next sample is taken.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from needlepoint import status
from needlepoint.benchmarks.base import Benchmark, Parsed
from needlepoint.conversation import Generation, Model, Reply
from needlepoint.errors import DataError
from needlepoint.redact import scrub
from needlepoint.store import RunStore


@dataclass
class RunOptions:
    """How to drive one run."""

    concurrency: int = 32
    retry_failed: bool = False
    show_progress: bool = True
    progress_every_s: float = 5.0  # without a terminal: one plain progress line this often
    on_record: Callable[[Any, dict[str, Any]], None] | None = None  # called with each stored record


def pending(samples: Sequence[Any], done: dict[str, dict[str, Any]], retry_failed: bool) -> list[Any]:
    """The samples still to request: no record yet, or a failed one when retrying failures."""
    out = []
    for s in samples:
        rec = done.get(s.id)
        if rec is None or (retry_failed and rec.get("status") in status.RETRYABLE):
            out.append(s)
    return out


def _turn(reply: Reply) -> dict[str, Any]:
    turn: dict[str, Any] = {
        "reply": reply.text,
        "finish_reason": reply.finish_reason,
        "latency_s": round(reply.latency_s, 4),
        "attempts": reply.attempts,
        "usage": reply.usage,
        "request_bytes": reply.request_bytes,
        "error": reply.error,
        "error_kind": reply.error_kind,
        "endpoint": reply.endpoint,
    }
    if reply.reasoning is not None:
        turn["reasoning"] = reply.reasoning
    return turn


def _read(benchmark: Benchmark, sample: Any, reply: Reply) -> Parsed:
    """A reply as the benchmark's answer, or the error that stands in: the request failure's kind,
    or NO_CONTENT when a reasoning model thought but gave no answer (not worth a repair turn)."""
    if reply.error:
        return Parsed(error=reply.error_kind or status.BACKEND_ERROR)
    if not reply.text.strip() and reply.reasoning:
        return Parsed(error=status.NO_CONTENT)
    return benchmark.parse(sample, reply.text)


async def solve(benchmark: Benchmark, model: Model, sample: Any, base: Generation) -> dict[str, Any]:
    """One sample from prompt to record. Never raises for model or input faults: a request that
    fails is recorded under its `status` kind, and an input the benchmark cannot handle (an unreadable image, or a
    parse or judge fault) is an input error that keeps whatever replies had already arrived."""
    started = time.time()
    record: dict[str, Any] = {"id": sample.id, "status": status.DONE, "turns": [], "repair_used": False}
    try:
        conversation = benchmark.prompt(sample)
        generation = benchmark.generation(sample, base)
        record["request"] = conversation.summary()
        reply = await model.complete(conversation, generation)
        record["turns"].append(_turn(reply))
        parsed = _read(benchmark, sample, reply)
        if not reply.error and parsed.error and parsed.error != status.NO_CONTENT:
            repair = benchmark.followup(sample, parsed, reply.finish_reason)
            if repair is not None:
                record["repair_used"] = True
                second = await model.complete(conversation.with_turn(reply.text, repair), generation)
                record["turns"].append(_turn(second))
                parsed = _read(benchmark, sample, second)
        if parsed.error in status.REQUEST_FAILURES:
            record["status"] = parsed.error
            record["error"] = record["turns"][-1]["error"]
        record["answer"] = parsed.answer
        record["parse_error"] = parsed.error
        record.update(benchmark.judge(sample, parsed))
    except DataError as exc:
        _input_error(benchmark, sample, record, _scrubbed(model, str(exc)))
    except Exception as exc:  # noqa: BLE001 - a fault after a reply arrived must not lose the reply
        _input_error(benchmark, sample, record, _scrubbed(model, f"{exc.__class__.__name__}: {exc}"))
    record["elapsed_s"] = round(time.time() - started, 4)
    return record


def _scrubbed(model: Model, message: str) -> str:
    """An exception's message without credentials (the model's own scrub knows its key)."""
    own = getattr(model, "scrub", None)
    return own(message) if callable(own) else scrub(message)


def _input_error(benchmark: Benchmark, sample: Any, record: dict[str, Any], message: str) -> None:
    record.update(status=status.INPUT_ERROR, error=message, answer=None, parse_error=status.INPUT_ERROR)
    try:
        record.update(benchmark.judge(sample, Parsed(error=status.INPUT_ERROR)))
    except Exception:  # noqa: BLE001 - the record is kept as it is
        pass


class _PlainProgress:
    """Progress without a terminal (a log file, CI, nohup): one plain line on stderr every
    `every_s` seconds while samples remain, e.g. `ref_adv_s: 120/1142 done, 3.2/s, about 5 min left`,
    followed by what the run waits for, if anything (the model's `wait_note()`)."""

    def __init__(self, benchmark: Benchmark, total: int, records: list[dict[str, Any]], every_s: float, model: Any = None) -> None:
        self.benchmark = benchmark
        self.total = total
        self.records = records
        self.every_s = every_s
        self.wait_note = getattr(model, "wait_note", None)
        self.n = 0
        self._t0 = time.perf_counter()
        self._last = self._t0

    def line(self) -> str:
        elapsed = time.perf_counter() - self._t0
        rate = self.n / elapsed if elapsed > 0 else 0.0
        left = f", about {_duration((self.total - self.n) / rate)} left" if rate > 0 and self.n < self.total else ""
        figure = self.benchmark.running(self.records)
        note = self.wait_note() if self.wait_note is not None else None
        return (f"{self.benchmark.name}: {self.n}/{self.total} done, {rate:.1f}/s{left}" + (f"  {figure}" if figure else "")
                + (f"  ({note})" if note else ""))  # fmt: skip

    def advance(self) -> None:
        self.n += 1

    def tick(self) -> None:
        """Print a line when `every_s` seconds have passed since the last one (called about once a second)."""
        now = time.perf_counter()
        if now - self._last >= self.every_s:
            self._last = now
            print(self.line(), file=sys.stderr, flush=True)

    def close(self) -> None:
        print(self.line(), file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class _Progress:
    """A rich progress bar with rate, ETA and the benchmark's running figure, on stderr; while
    requests wait (a Retry-After, a backoff) it says so, from the model's `wait_note()`."""

    def __init__(self, benchmark: Benchmark, total: int, records: list[dict[str, Any]], enabled: bool, model: Any = None) -> None:
        self.benchmark = benchmark
        self.records = records
        self.wait_note = getattr(model, "wait_note", None)
        self.bar = None
        self._last = 0.0
        if not enabled or total == 0:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[figure]}"),
            TextColumn("[yellow]{task.fields[note]}"),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.bar.add_task(benchmark.name, total=total, rate="", figure=benchmark.running(records), note="")
        self.bar.start()
        self._t0 = time.perf_counter()
        self._n = 0

    def advance(self) -> None:
        if self.bar is None:
            return
        self._n += 1
        now = time.perf_counter()
        if now - self._last > 0.25:
            self._last = now
            rate = self._n / max(now - self._t0, 1e-9)
            self.bar.update(self.task, advance=0, rate=f"{rate:6.1f}/s", figure=self.benchmark.running(self.records))
        self.bar.advance(self.task)

    def note(self) -> str:
        """What the run is waiting for, or "" (shown at the end of the progress line)."""
        note = self.wait_note() if self.wait_note is not None else None
        return note or ""

    def tick(self) -> None:
        """Refresh the wait note (called about once a second, also while nothing finishes)."""
        if self.bar is not None:
            self.bar.update(self.task, note=self.note())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.task, figure=self.benchmark.running(self.records))
            self.bar.stop()


async def run(
    benchmark: Benchmark,
    samples: Sequence[Any],
    model: Model,
    store: RunStore,
    base: Generation,
    options: RunOptions,
) -> dict[str, dict[str, Any]]:
    """Answer every pending sample, storing each record as it finishes; return all records.
    The caller owns `store` (and closes it)."""
    done = store.records()
    todo = pending(samples, done, options.retry_failed)
    todo_ids = {s.id for s in todo}
    finished = [done[s.id] for s in samples if s.id in done and s.id not in todo_ids]
    plain = options.show_progress and bool(todo) and not sys.stderr.isatty()
    progress: _Progress | _PlainProgress
    if plain:
        progress = _PlainProgress(benchmark, len(todo), finished, options.progress_every_s, model)
    else:
        progress = _Progress(benchmark, len(todo), finished, options.show_progress, model)
    queue = iter(todo)

    async def worker() -> None:
        for sample in queue:
            record = await solve(benchmark, model, sample, base)
            store.append(record)
            if options.on_record is not None:
                options.on_record(sample, record)
            done[sample.id] = record
            finished.append(record)
            progress.advance()

    async def ticker() -> None:
        while True:
            await asyncio.sleep(min(1.0, options.progress_every_s))
            progress.tick()

    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, min(options.concurrency, len(todo))))]
    ticking = asyncio.ensure_future(ticker())
    try:
        done_tasks, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done_tasks:
            task.result()  # re-raise the first failure (e.g. the disk is full)
    finally:
        for task in (*tasks, ticking):
            task.cancel()
        await asyncio.gather(*tasks, ticking, return_exceptions=True)
        progress.close()
    return {s.id: done[s.id] for s in samples if s.id in done}
