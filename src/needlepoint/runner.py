"""The async pipeline: prompt, ask, parse, repair once, judge, store; bounded concurrency.

It knows a benchmark only through its verbs and a model only through `complete`. A fixed pool of
workers pulls samples from one iterator, so memory holds at most `concurrency` requests at a time
whatever the run's length, and each record reaches disk before the next sample is taken.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from needlepoint.benchmarks.base import Benchmark, Parsed
from needlepoint.conversation import Generation, Model, Reply
from needlepoint.errors import DataError
from needlepoint.store import RunStore

BACKEND_ERROR = "backend_error"
INPUT_ERROR = "input_error"


@dataclass
class RunOptions:
    """How to drive one run."""

    concurrency: int = 32
    retry_failed: bool = False
    show_progress: bool = True
    on_record: Callable[[Any, dict[str, Any]], None] | None = None  # called with each stored record


def pending(samples: Sequence[Any], done: dict[str, dict[str, Any]], retry_failed: bool) -> list[Any]:
    """The samples still to request: no record yet, or a failed one when retrying failures."""
    out = []
    for s in samples:
        rec = done.get(s.id)
        if rec is None or (retry_failed and rec.get("status") in (BACKEND_ERROR, INPUT_ERROR)):
            out.append(s)
    return out


def _turn(reply: Reply) -> dict[str, Any]:
    return {
        "reply": reply.text,
        "finish_reason": reply.finish_reason,
        "latency_s": round(reply.latency_s, 4),
        "attempts": reply.attempts,
        "usage": reply.usage,
        "request_bytes": reply.request_bytes,
        "error": reply.error,
    }


async def solve(benchmark: Benchmark, model: Model, sample: Any, base: Generation) -> dict[str, Any]:
    """One sample from prompt to record. Never raises for model or input faults: a request that
    fails is a backend error, and an input the benchmark cannot handle (an unreadable image, or a
    parse or judge fault) is an input error that keeps whatever replies had already arrived."""
    started = time.time()
    record: dict[str, Any] = {"id": sample.id, "status": "done", "turns": [], "repair_used": False}
    try:
        conversation = benchmark.prompt(sample)
        generation = benchmark.generation(sample, base)
        record["request"] = conversation.summary()
        reply = await model.complete(conversation, generation)
        record["turns"].append(_turn(reply))
        parsed = Parsed(error=BACKEND_ERROR) if reply.error else benchmark.parse(sample, reply.text)
        if not reply.error and parsed.error:
            repair = benchmark.followup(sample, parsed, reply.finish_reason)
            if repair is not None:
                record["repair_used"] = True
                second = await model.complete(conversation.with_turn(reply.text, repair), generation)
                record["turns"].append(_turn(second))
                parsed = Parsed(error=BACKEND_ERROR) if second.error else benchmark.parse(sample, second.text)
        if parsed.error == BACKEND_ERROR:
            record["status"] = BACKEND_ERROR
            record["error"] = record["turns"][-1]["error"]
        record["answer"] = parsed.answer
        record["parse_error"] = parsed.error
        record.update(benchmark.judge(sample, parsed))
    except DataError as exc:
        _input_error(benchmark, sample, record, str(exc))
    except Exception as exc:  # noqa: BLE001 - a fault after a reply arrived must not lose the reply
        _input_error(benchmark, sample, record, f"{exc.__class__.__name__}: {exc}")
    record["elapsed_s"] = round(time.time() - started, 4)
    return record


def _input_error(benchmark: Benchmark, sample: Any, record: dict[str, Any], message: str) -> None:
    record.update(status=INPUT_ERROR, error=message, answer=None, parse_error=INPUT_ERROR)
    try:
        record.update(benchmark.judge(sample, Parsed(error=INPUT_ERROR)))
    except Exception:  # noqa: BLE001 - the record is kept as it is
        pass


class _Progress:
    """A rich progress bar with rate, ETA and the benchmark's running figure, on stderr."""

    def __init__(self, benchmark: Benchmark, total: int, records: list[dict[str, Any]], enabled: bool) -> None:
        self.benchmark = benchmark
        self.records = records
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
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.bar.add_task(benchmark.name, total=total, rate="", figure=benchmark.running(records))
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
    progress = _Progress(benchmark, len(todo), finished, options.show_progress)
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

    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, min(options.concurrency, len(todo))))]
    try:
        done_tasks, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done_tasks:
            task.result()  # re-raise the first failure (e.g. the disk is full)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        progress.close()
    return {s.id: done[s.id] for s in samples if s.id in done}
