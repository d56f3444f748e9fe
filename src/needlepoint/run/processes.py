"""`--processes N`: one run answered by N client processes, for runs whose one event loop is the
bound (many small requests at high concurrency against fast servers: the agentic solver's phrases,
Ref-Adv-s at 64 in flight; docs/performance.md measures it).

The parent forks the workers after the run folder is open and before any event loop or thread of
its own exists (its progress display starts after the fork, `on_start`). Each worker answers a
cost-balanced part of the pending samples (`shard.assign`) and appends its records to a part file
of its own (`RunStore.part_path`); the parent copies each whole line of the part files into the
run's records file, of which it stays the one writer, and hands the record to `on_record`. A
worker killed in the middle of a line tears only its own part file; a command killed before its
copy (or interrupted, or failing to write) leaves the part files, which every reader of the
records counts and the next `RunStore.open` folds in. Once every worker has ended
the parent returns what each said at its end, through a pipe read as it arrives.

A worker stops on SIGTERM like the command itself (the parent sends it on Ctrl-C or its own
SIGTERM; both signals are held while the workers are forked), and on Linux also when the parent
dies (kill -9); a worker that fails ends the others and its sentence is raised in the parent.

This module knows no benchmark and no client: `answer(part, index)` does a worker's work.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlepoint.core.errors import DataError, InternalFault
from needlepoint.core.forks import enter_child, fork, signals_held
from needlepoint.core.records import Record
from needlepoint.core.shard import assign
from needlepoint.core.store import RunStore
from needlepoint.core.tail import Tail

__all__ = ["WorkerEnd", "answer_in_processes", "split"]

POLL_S = 0.1  # how often the parent reads the records file's new lines
_ERROR_BYTES = 8000  # a worker's error message, at most, in UTF-8 bytes


@dataclass
class WorkerEnd:
    """What a worker said at its end: why it stopped taking samples (a budget, None), its clients'
    requests per endpoint (`endpoint_stats` rows), or the error that ended it."""

    stopped: str | None = None
    endpoints: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None  # "DataError", "InternalFault", "OSError" or another exception's name
    errno: int | None = None  # an OSError's (a full disk), raised again as one in the parent
    filename: str | None = None


def split(total: int, count: int, index: int) -> int:
    """Worker `index`'s (0-based) share of a bound `total` over `count` workers: the shares sum to
    `total` where it allows one each, and none is below 1."""
    return max(1, total // count + (index < total % count))


def _parts(todo: Sequence[Any], count: int, cost: Callable[[Any], float]) -> list[list[Any]]:
    owner = assign([(s.id, cost(s)) for s in todo], count)
    parts: list[list[Any]] = [[] for _ in range(count)]
    for s in todo:  # each part in the run's order
        parts[owner[s.id] - 1].append(s)
    return [p for p in parts if p]


def _worker(answer: Callable[[list[Any], int], WorkerEnd], part: list[Any], index: int, out: int, parent: int) -> int:
    """The forked child (`fork`): answer `part`, write its WorkerEnd to `out` as one JSON line;
    its exit code."""
    code = 0
    end = WorkerEnd()
    try:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # not a progress display's wrappers
        handler = signal.getsignal(signal.SIGTERM)
        if getattr(handler, "__module__", None) != "needlepoint.cli":  # the command's handler stops a loop cleanly
            handler = signal.default_int_handler  # elsewhere: stop as on Ctrl-C
        if not enter_child(parent, handler):
            raise KeyboardInterrupt
        end = answer(part, index)
    except KeyboardInterrupt:  # SIGTERM from the parent, or from anyone: the run was stopped
        code = 130
        end.error_kind = "KeyboardInterrupt"
        end.error = "interrupted"
    except OSError as exc:  # a full disk, a folder taken away: the command's own sentence for it
        code = 2
        end.error_kind, end.error, end.errno = "OSError", exc.strerror or str(exc), exc.errno
        end.filename = None if exc.filename is None else str(exc.filename)
    except BaseException as exc:  # every end of a worker is reported: the parent raises it
        code = 2 if isinstance(exc, DataError) else 1
        known = isinstance(exc, (DataError, InternalFault))
        end.error_kind = type(exc).__name__
        text = str(exc) if known else "".join(traceback.format_exception(exc))
        end.error = text.encode("utf-8", "replace")[-_ERROR_BYTES:].decode("utf-8", "ignore")
    os.write(out, json.dumps(end.__dict__, default=str, ensure_ascii=False).encode("utf-8", "replace") + b"\n")
    return code


class _Worker:
    """A forked worker as the parent sees it: its pid, its pipe (read as it arrives, so that a
    long message never blocks the worker's exit) and its part file."""

    def __init__(self, pid: int, pipe: int, part: Path) -> None:
        self.pid = pid
        self.pipe = pipe
        self.tail = Tail(part)
        self.said = b""
        self.end: WorkerEnd | None = None
        os.set_blocking(pipe, False)

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.pipe, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.said += chunk

    def poll(self) -> bool:
        """Whether it has ended (what it said then read)."""
        if self.end is None:
            self._drain()
            try:
                ended, wait_status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped already (an interrupt fell between the wait and this)
                ended, wait_status = self.pid, 0
            if ended:
                self._drain()
                self.end = _end_of(self.said, self.pid, wait_status)
        return self.end is not None


def answer_in_processes(
    count: int,
    todo: Sequence[Any],
    cost: Callable[[Any], float],
    answer: Callable[[list[Any], int], WorkerEnd],
    store: RunStore,
    on_record: Callable[[Record], None],
    on_start: Callable[[], None] = lambda: None,
    tick: Callable[[], None] = lambda: None,
) -> list[WorkerEnd]:
    """Answer `todo` in `count` forked workers (`answer(part, index)` in each, its records diverted
    to `store.part_path(index)`), copying their records into `store` as they come (`on_record` per
    record, `on_start` once the workers run, `tick` about once a second); the workers' ends once
    all have ended. Raises the first worker error (DataError, InternalFault and OSError as
    themselves, anything else as an InternalFault with its traceback), KeyboardInterrupt when
    interrupted or when a worker was; what `on_record` raises stops the workers too."""
    if not hasattr(os, "fork"):
        raise DataError("--processes needs a system with fork (Linux, macOS); pass --processes 1")
    parts = _parts(todo, count, cost)
    workers: list[_Worker] = []
    parent = os.getpid()

    def child(part: list[Any], index: int, read_end: int, write_end: int) -> Callable[[], int]:
        def run() -> int:
            for fd in (read_end, *(w.pipe for w in workers)):  # the other workers' pipes are not its own
                os.close(fd)
            return _worker(_diverted(answer, store), part, index, write_end, parent)

        return run

    try:
        with signals_held():  # a Ctrl-C now waits until every worker is known
            for index, part in enumerate(parts):
                read_end, write_end = os.pipe()
                try:
                    pid = fork(child(part, index, read_end, write_end))
                except OSError:
                    os.close(read_end)
                    raise
                finally:
                    os.close(write_end)
                workers.append(_Worker(pid, read_end, store.part_path(index)))
        on_start()
        last_tick = time.monotonic()
        while not all(w.end is not None for w in workers):
            time.sleep(POLL_S)
            _copy(workers, store, on_record)
            if time.monotonic() - last_tick >= 1.0:
                tick()
                last_tick = time.monotonic()
            for w in workers:
                if w.end is None and w.poll() and w.end is not None and w.end.error is not None:
                    _stop([x for x in workers if x.end is None])  # one worker's fault ends the run
        _copy(workers, store, on_record)
        for w in workers:  # every line copied: the part files are done with
            w.tail.path.unlink(missing_ok=True)
    except BaseException:  # the part files stay: the next open folds in what was not copied
        _stop([w for w in workers if w.end is None])
        _reap(workers)
        raise
    finally:
        for w in workers:
            os.close(w.pipe)
    ends = [w.end for w in workers if w.end is not None]
    errors = [e for e in ends if e.error is not None]
    if errors:
        first = next((e for e in errors if e.error_kind != "KeyboardInterrupt"), errors[0])
        if first.error_kind == "KeyboardInterrupt":  # a worker was stopped (kill -TERM): so is the run
            raise KeyboardInterrupt
        if first.error_kind == "OSError":
            raise OSError(first.errno, first.error, first.filename) if first.errno else OSError(first.error)
        kind = {"DataError": DataError, "InternalFault": InternalFault}.get(first.error_kind or "")
        if kind is not None:
            raise kind(first.error)
        raise InternalFault(
            first.error if first.error_kind == "Killed" else f"a worker process failed ({first.error_kind}): {first.error}"
        )
    return ends


def _diverted(answer: Callable[[list[Any], int], WorkerEnd], store: RunStore) -> Callable[[list[Any], int], WorkerEnd]:
    """`answer` with this process's records going to the worker's part file."""

    def diverted(part: list[Any], index: int) -> WorkerEnd:
        store.divert(store.part_path(index))
        return answer(part, index)

    return diverted


def _copy(workers: list[_Worker], store: RunStore, on_record: Callable[[Record], None]) -> None:
    """Copy the new whole lines of the workers' part files into the records file, then hand on
    their records."""
    for w in workers:
        lines = w.tail.read()
        if lines:
            store.append_lines(b"".join(line + b"\n" for line, _ in lines))
            w.tail.done()
            for _, record in lines:
                if record:
                    on_record(record)


def _end_of(said: bytes, pid: int, wait_status: int) -> WorkerEnd:
    """The WorkerEnd a worker wrote to its pipe; an error when it ended without writing one (a
    kill -9, the out-of-memory killer)."""
    try:
        fields = json.loads(said)
    except ValueError:
        fields = None
    if isinstance(fields, dict):
        return WorkerEnd(**fields)
    how = (
        f"signal {os.WTERMSIG(wait_status)}"
        if os.WIFSIGNALED(wait_status)
        else f"exit code {os.waitstatus_to_exitcode(wait_status)}"
    )
    return WorkerEnd(
        error=f"worker process {pid} ended by {how} before its end; the records it stored are kept: rerun the same command to resume",
        error_kind="Killed",
    )


def _stop(workers: list[_Worker]) -> None:
    for w in workers:
        try:
            os.kill(w.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _reap(workers: list[_Worker]) -> None:
    """Wait for stopped workers, reading their pipes meanwhile; a second interrupt kills them."""
    while True:
        try:
            while not all(w.poll() for w in workers):
                time.sleep(POLL_S / 2)
            return
        except KeyboardInterrupt:
            for w in workers:
                if w.end is None:
                    try:
                        os.kill(w.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
