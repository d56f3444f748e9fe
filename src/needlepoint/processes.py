"""`--processes N`: one run answered by N client processes, for runs whose one event loop is the
bound (many small requests at high concurrency against fast servers: the agentic solver's phrases,
Ref-Adv-s at 64 in flight; docs/performance.md measures it).

The parent forks the workers after the run folder is open and before any event loop or thread of
its own exists. Each worker answers a cost-balanced part of the pending samples (`shard.assign`)
and appends its records to the run's one records file: a line goes down in one `write` on an
O_APPEND descriptor, so lines of several processes never interleave, and a resumed run reads one
file as always. The parent follows that file and hands each new record to `on_record` (the
progress display); once every worker has ended it returns what each said at its end. A worker stops on SIGTERM like the command itself (the parent sends it on Ctrl-C or its
own SIGTERM), and on Linux also when the parent dies (kill -9); a worker that fails ends the
others and its sentence is raised in the parent.

This module knows no benchmark and no client: `answer(part, index)` does a worker's work.
"""

from __future__ import annotations

import json
import os
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from needlepoint.errors import DataError, InternalFault
from needlepoint.records import Record
from needlepoint.shard import assign

__all__ = ["WorkerEnd", "answer_in_processes", "split"]

POLL_S = 0.1  # how often the parent reads the records file's new lines
_ERROR_CHARS = 8000  # a worker's error message, at most (the pipe carries it)


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


def _worker(answer: Callable[[list[Any], int], WorkerEnd], part: list[Any], index: int, out: int, parent: int) -> None:
    """The forked child: answer `part`, write its WorkerEnd to `out` as one JSON line, never return."""
    from needlepoint.serve.guard import arm_parent_death_signal

    code = 0
    end = WorkerEnd()
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops the workers
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # outside the CLI: stop as on Ctrl-C
            signal.signal(signal.SIGTERM, signal.default_int_handler)
        arm_parent_death_signal()  # a command killed with -9 takes its workers with it (Linux)
        if os.getppid() != parent:  # it died before that was armed
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
        end.error = (str(exc) if known else "".join(traceback.format_exception(exc)))[-_ERROR_CHARS:]
    try:
        os.write(out, json.dumps(end.__dict__, default=str).encode() + b"\n")
    finally:
        os._exit(code)  # no atexit handler, finaliser or `finally` of the parent's stack runs here


class _Tail:
    """The records appended to a file since `start`, whole lines only."""

    def __init__(self, path: Path, start: int) -> None:
        self.path = path
        self.offset = start
        self.rest = b""

    def read(self) -> list[Record]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *lines, self.rest = (self.rest + data).split(b"\n")
        out: list[Record] = []
        for line in lines:
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue  # the parent only follows the file; the scorer reads it strictly
            if isinstance(rec, dict) and "id" in rec:
                out.append(cast(Record, rec))
        return out


def answer_in_processes(
    count: int,
    todo: Sequence[Any],
    cost: Callable[[Any], float],
    answer: Callable[[list[Any], int], WorkerEnd],
    records_path: Path,
    on_record: Callable[[Record], None],
    tick: Callable[[], None] = lambda: None,
) -> list[WorkerEnd]:
    """Answer `todo` in `count` forked workers (`answer(part, index)` in each), following
    `records_path` meanwhile (`on_record` per new record, `tick` about once a second); the
    workers' ends once all have ended. Raises the first worker error (DataError, InternalFault and
    OSError as themselves, anything else as an InternalFault with its traceback), KeyboardInterrupt
    when interrupted or when a worker was."""
    if not hasattr(os, "fork"):
        raise DataError("--processes needs a system with fork (Linux, macOS); pass --processes 1")
    parts = _parts(todo, count, cost)
    tail = _Tail(records_path, records_path.stat().st_size if records_path.exists() else 0)
    children: dict[int, int] = {}  # pid -> read end of its pipe
    ends: dict[int, WorkerEnd] = {}
    try:
        parent = os.getpid()
        for index, part in enumerate(parts):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_end)
                _worker(answer, part, index, write_end, parent)
            os.close(write_end)
            children[pid] = read_end
        last_tick = time.monotonic()
        while len(ends) < len(children):
            time.sleep(POLL_S)
            for rec in tail.read():
                on_record(rec)
            if time.monotonic() - last_tick >= 1.0:
                tick()
                last_tick = time.monotonic()
            for pid in [p for p in children if p not in ends]:
                ended, wait_status = os.waitpid(pid, os.WNOHANG)
                if ended:
                    ends[pid] = _read_end(children[pid], pid, wait_status)
                    if ends[pid].error is not None:
                        _stop([p for p in children if p not in ends])  # one worker's fault ends the run
        for rec in tail.read():
            on_record(rec)
    except BaseException:
        _stop([p for p in children if p not in ends])
        _reap([p for p in children if p not in ends])
        raise
    finally:
        for fd in children.values():
            os.close(fd)
    errors = [e for e in ends.values() if e.error is not None]
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
    return list(ends.values())


def _read_end(fd: int, pid: int, wait_status: int) -> WorkerEnd:
    """The WorkerEnd a worker wrote to its pipe; an error when it ended without writing one (a
    kill -9, the out-of-memory killer)."""
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    try:
        fields = json.loads(data)
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


def _stop(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _reap(pids: list[int]) -> None:
    """Wait for stopped workers; a second interrupt while waiting kills them."""
    for pid in pids:
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except KeyboardInterrupt:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    break
            except ChildProcessError:
                break
