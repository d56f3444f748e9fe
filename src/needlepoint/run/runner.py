"""The async pipeline: a solver per sample, judge, store; a bounded number of samples in flight.

It knows a benchmark only through its verbs, a solver only through `Solver.solve` and a model only
through `complete` (requests in flight are the model layer's to bound). A fixed pool of workers
pulls samples from one iterator, so memory holds at most `concurrency` samples at a time whatever
the run's length, and each record reaches disk before its worker takes the next sample (on a slow
file system a long record is written by a writer thread, off the event loop: SLOW_WRITE_S). Too
many internal errors (faults of our own code) stop the run: see `internal_error_limit`.
"""

from __future__ import annotations

import asyncio
import math
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlepoint.contract.base import Benchmark, Parsed
from needlepoint.core import status
from needlepoint.core.conversation import MAIN, Generation, Model, Scrubs
from needlepoint.core.errors import DataError, InternalFault, RequestError
from needlepoint.core.files import json_line
from needlepoint.core.progress import make_progress
from needlepoint.core.records import Record, outcome
from needlepoint.core.redact import scrub
from needlepoint.core.store import RunStore
from needlepoint.solvers.base import DropsCalls, RequestGate, SolveContext, Solver
from needlepoint.solvers.calls import CallLog
from needlepoint.solvers.sent import forget_described, stop_describing

# Records are written on the event loop: on a local disk the copy into the page cache costs less
# than a hop to a thread and back (about 0.15 ms of CPU a long MM-NIAH record, docs/performance.md).
# Once one write of a run has taken SLOW_WRITE_S (a network file system, a disk under load), the
# run's lines of THREAD_WRITE_BYTES or more (a long document's, with the text as sent) go to its one
# writer thread, so that a stalled file system does not hold every request in flight.
SLOW_WRITE_S = 0.005
THREAD_WRITE_BYTES = 64 << 10


@dataclass
class RunOptions:
    """How to drive one run."""

    concurrency: int = 32
    retry_failed: bool = False
    show_progress: bool = True
    progress_every_s: float = 5.0  # without a terminal: one plain progress line this often
    on_record: Callable[[Any, Record], None] | None = None  # called with each stored record
    gate: RequestGate | None = None  # consulted before each model request (usage.Budget); a refusal stops the run
    stopped: str | None = None  # set by `run`: why it stopped taking samples (the gate's sentence)
    internal_limit: int | None = None  # internal errors that stop it (default: internal_error_limit of its samples)


def pending(samples: Sequence[Any], done: Mapping[str, Record], retry_failed: bool) -> list[Any]:
    """The samples still to request: no record yet, or a failed one when retrying failures."""
    out = []
    for s in samples:
        rec = done.get(s.id)
        if rec is None or (retry_failed and rec.get("status") in status.RETRYABLE):
            out.append(s)
    return out


async def solve(
    benchmark: Benchmark,
    solver: Solver,
    models: Mapping[str, Model],
    sample: Any,
    base: Generation,
    run_dir: Path | None = None,
    gate: RequestGate | None = None,
    calls: CallLog | None = None,
) -> Record:
    """One sample from solver to record. Never raises for model, input or solver faults: a request
    or tool call that fails is recorded under its `status` kind; an input that cannot be sent (a
    DataError: an unreadable image, a request over the byte budget) is an input error; any other
    exception is a fault of our own code, an internal error with its traceback. Each keeps
    whatever calls had already been made."""
    started = time.time()
    record: Record = {"id": sample.id, "status": status.DONE, "turns": [], "repair_used": False}
    ctx: SolveContext | None = None
    try:
        ctx = SolveContext(benchmark, sample, models, base, run_dir, gate, calls)
        record["turns"] = ctx.turns
        try:
            parsed = await solver.solve(sample, ctx)
        except RequestError as exc:
            parsed = Parsed(error=exc.kind)
        _settle(record, ctx)
        if parsed.error in status.REQUEST_FAILURES:
            record["status"] = parsed.error
            failed = [t for t in ctx.turns if t.get("error")]
            record["error"] = str(
                failed[-1]["error"] if failed else parsed.error
            )  # both set: the turn failed, parsed.error a failure kind
        record["answer"] = parsed.answer
        record["parse_error"] = parsed.error
        record["scores"] = benchmark.judge(sample, parsed)
    except DataError as exc:
        _settle(record, ctx)
        _failed(benchmark, sample, record, status.INPUT_ERROR, _scrubbed(models, str(exc)))
    except Exception as exc:  # a fault of ours must not lose the replies already in
        _settle(record, ctx)
        _failed(benchmark, sample, record, status.INTERNAL_ERROR, _scrubbed(models, f"{exc.__class__.__name__}: {exc}"))
        record["traceback"] = _scrubbed(models, traceback.format_exc())
    record["elapsed_s"] = round(time.time() - started, 4)
    return record


def _settle(record: Record, ctx: SolveContext | None) -> None:
    """Copy what the context gathered (request, repair mark, solver notes) into the record."""
    if ctx is None:
        return
    if ctx.request_summary is not None:
        record["request"] = ctx.request_summary
    record["repair_used"] = ctx.repair_used
    if ctx.notes:
        record["solver"] = ctx.notes


def _scrubbed(models: Mapping[str, Any], message: str) -> str:
    """An exception's message without credentials (each model's own scrub knows its key)."""
    for model in models.values():
        if isinstance(model, Scrubs):
            message = model.scrub(message)
    return scrub(message)


def _failed(benchmark: Benchmark, sample: Any, record: Record, kind: str, message: str) -> None:
    record["status"], record["error"], record["answer"], record["parse_error"] = kind, message, None, kind
    try:
        record["scores"] = benchmark.judge(sample, Parsed(error=kind))
    except Exception:  # the record is kept as it is
        pass


def internal_error_limit(todo: int) -> int:
    """How many internal errors stop a run of `todo` samples (see status.INTERNAL_ERROR_LIMIT)."""
    share = math.ceil(status.INTERNAL_ERROR_SHARE * todo)
    return max(status.INTERNAL_ERROR_MIN, min(status.INTERNAL_ERROR_LIMIT, share))


async def run(
    benchmark: Benchmark,
    samples: Sequence[Any],
    model: Model,
    store: RunStore,
    base: Generation,
    options: RunOptions,
    solver: Solver,
) -> None:
    """Answer every pending sample with `solver` (its calls go to `model`, role "model", and to
    the solver's own models), storing each record as it finishes (`store.records()` reads them).
    The caller owns `store` (and closes it) and the models. Raises InternalFault when too many
    samples end in an internal error. What the run holds of a stored record is its outcome, not
    its turns, so memory does not grow with the documents sent."""
    models: dict[str, Any] = {MAIN: model, **solver.models()}
    forget_described()  # the images as this run finds them
    internal: list[Record] = []
    done = store.records()
    todo = pending(samples, done, options.retry_failed)
    todo_ids = {s.id for s in todo}
    finished = [outcome(done[s.id]) for s in samples if s.id in done and s.id not in todo_ids]
    del done
    progress = make_progress(
        benchmark, len(todo), finished, options.show_progress, options.progress_every_s, list(models.values())
    )
    queue = iter(todo)
    limit = options.internal_limit or internal_error_limit(len(todo))
    loop = asyncio.get_running_loop()
    writer = ThreadPoolExecutor(1, thread_name_prefix="needlepoint-records")  # long records' lines on a slow disk
    calls = CallLog(store.dir, todo_ids, solver.dropped_calls if isinstance(solver, DropsCalls) else ())
    slow_disk = False  # a write took SLOW_WRITE_S: long lines go to the writer thread from then on

    async def worker() -> None:
        nonlocal slow_disk
        for sample in queue:
            if options.gate is not None and options.gate.stop_reason() is not None:
                options.stopped = options.gate.stop_reason()
                break  # the samples not taken stay unrequested: a rerun continues with them
            record = await solve(benchmark, solver, models, sample, base, store.dir, options.gate, calls)
            line = json_line(record) + b"\n"
            if slow_disk and len(line) >= THREAD_WRITE_BYTES:
                await loop.run_in_executor(writer, _keep, store, calls, sample.id, record, line)
            else:
                started = time.perf_counter()
                _keep(store, calls, sample.id, record, line)
                slow_disk = slow_disk or time.perf_counter() - started >= SLOW_WRITE_S
            if options.on_record is not None:
                options.on_record(sample, record)
            finished.append(outcome(record))
            progress.advance(failed=record["status"] in status.FAILED)
            if record["status"] == status.INTERNAL_ERROR:
                internal.append(record)
                if len(internal) >= limit:
                    raise InternalFault(
                        f"{len(internal)} samples hit a fault in needlepoint itself (e.g. {record['id']}: {record['error']}); "
                        f"the run stops: their tracebacks are in {store.records_path}, please report them"
                    )

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
        writer.shutdown(wait=True)  # a record being written when the run was cancelled goes down whole
        stop_describing()
        calls.close()
        progress.close()


def _keep(store: RunStore, calls: CallLog, sample_id: str, record: Record, line: bytes) -> None:
    """Store a record (`line`: its JSON line), then remove the sample's own calls file unless it
    may be requested again (a kill between the two leaves both: nothing is asked twice)."""
    store.append(record, line)
    if record["status"] not in status.RETRYABLE:  # never requested again: its answered calls can go
        calls.forget(sample_id)
