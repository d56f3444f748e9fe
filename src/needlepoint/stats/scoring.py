"""Scoring the bootstrap's blocks of draws (`metrics_batch` of each), on a second core when they
are slow: MC-Bench's AP over tie orders took 2-3 s for 1,000 draws of its 2,000 pairs, the last
thing a run computes before its report (issue 45).

The first block is scored here and timed. When it took SPLIT_S or more, more blocks remain, the
process is alone (no other Python thread) and has a second core, a forked helper scores the
odd-numbered blocks while this process scores the even ones after the first (half the blocks
each). Both make the blocks from the same recipe (the helper from its copy of the iterator, at
the same place), so every block gets the values it gets when one process scores them all. The
helper sends its blocks' values through a pipe; whatever it does not deliver (it failed, or took
far longer than this process's share) this process scores itself from the recipe, so a helper can
cost time, never values."""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from needlepoint.core.forks import enter_child, fork, signals_held
from needlepoint.stats.resampler import Resampler

__all__ = ["SPLIT_S", "scored_blocks"]

SPLIT_S = 0.05  # a first block this slow or slower: the rest is shared with a helper process
PATIENCE = 4.0  # the helper's share may take this many times this process's own share (plus a second)

Blocks = Callable[[], Iterator[np.ndarray]]
Values = dict[str, np.ndarray]


def scored_blocks(resampler: Resampler, blocks: Blocks, split_s: float | None = None) -> Values:
    """metrics_batch of each block `blocks()` yields (rows of draws), the blocks' values joined
    per metric in block order (float64); `split_s`: SPLIT_S unless given."""
    it = blocks()
    first = next(it, None)
    if first is None:
        return {}
    start = time.perf_counter()
    done: dict[int, Values] = {0: resampler.metrics_batch(first)}
    share = time.perf_counter() - start >= (SPLIT_S if split_s is None else split_s) and _can_share()
    helper = None
    try:
        with _one_blas_thread() if share else contextlib.nullcontext():
            helper = _Helper.start(resampler, it) if share else None
            mine_started = time.perf_counter()
            total = 1
            for index, block in enumerate(it, 1):
                total = index + 1
                if helper is None or index % 2 == 0:  # the odd ones are the helper's: half of all, the first included
                    done[index] = resampler.metrics_batch(block)
        if helper is not None:
            done.update(helper.values(PATIENCE * (time.perf_counter() - mine_started) + 1.0))
    finally:
        if helper is not None:
            helper.stop()
    missing = [i for i in range(total) if i not in done]
    if missing:  # the helper's blocks it did not deliver
        for index, block in enumerate(blocks()):
            if index in missing:
                done[index] = resampler.metrics_batch(block)
    parts: dict[str, list[np.ndarray]] = {}
    for index in range(total):
        for name, v in done[index].items():
            parts.setdefault(name, []).append(np.asarray(v, dtype=np.float64))
    return {name: np.concatenate(v) for name, v in parts.items()}


def _can_share() -> bool:
    """Whether a helper process may be forked: fork exists, a second core, no other thread (a
    lock another thread holds would stay held in the child)."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores > 1


def _one_blas_thread() -> contextlib.AbstractContextManager[object]:
    """numpy's BLAS held to one thread in this process and the helper forked meanwhile: two
    processes' BLAS thread pools on two cores wait on each other (the helper then saved nothing:
    1.5 s against 1.4 s for MC-Bench's intervals; with one thread each, 0.95 s)."""
    from threadpoolctl import threadpool_limits

    limits: contextlib.AbstractContextManager[object] = threadpool_limits(limits=1, user_api="blas")
    return limits


class _Helper:
    """A forked process scoring the odd-numbered blocks, sending them through a pipe."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid, self.pipe = pid, pipe

    @classmethod
    def start(cls, resampler: Resampler, it: Iterator[np.ndarray]) -> _Helper | None:
        parent = os.getpid()
        read_end, write_end = os.pipe()

        def helper() -> int:
            os.close(read_end)
            if not enter_child(parent, signal.SIG_DFL):
                return 1
            values = {index: resampler.metrics_batch(block) for index, block in enumerate(it, 1) if index % 2}
            with os.fdopen(write_end, "wb") as out:
                pickle.dump(values, out, protocol=pickle.HIGHEST_PROTOCOL)
            return 0

        try:
            with signals_held():
                pid = fork(helper)
        except OSError:  # no process to be had: this one scores them all
            os.close(read_end)
            os.close(write_end)
            return None
        os.close(write_end)
        return cls(pid, read_end)

    def values(self, patience_s: float) -> dict[int, Values]:
        """The blocks the helper scored, waiting for them at most `patience_s` ({} when it failed
        or ran out of time)."""
        deadline = time.monotonic() + patience_s
        data = bytearray()
        poll = select.poll()  # not select(): no limit on the descriptor's number
        poll.register(self.pipe, select.POLLIN)
        while (left := deadline - time.monotonic()) > 0:
            if not poll.poll(left * 1000):
                break
            piece = os.read(self.pipe, 1 << 20)
            if not piece:  # the helper closed its end: all sent
                return _unpickled(bytes(data))
            data += piece
        return {}

    def stop(self) -> None:
        """End the helper (done or not) and reap it."""
        os.close(self.pipe)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)


def _unpickled(data: bytes) -> dict[int, Values]:
    """What the helper sent: {block index: values}; {} for anything else."""
    try:
        values = pickle.loads(data)
    except Exception:  # a helper that died while writing
        return {}
    return values if isinstance(values, dict) else {}
