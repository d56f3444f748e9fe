"""Forked children that stop with their parent: signals held across the fork, a child that runs
one function and exits without the parent's finalisers, and Linux's parent-death signal (so a
`kill -9` of the parent takes the child with it). Used by `--processes` workers, the report's
drafting processes and the server watchdog."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["arm_parent_death_signal", "enter_child", "fork", "signals_held"]

PR_SET_PDEATHSIG = 1


def arm_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send `sig` to this process when its parent dies; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


_HELD = {signal.SIGINT, signal.SIGTERM}


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held (a Ctrl-C waits) while children are forked: a signal between a
    fork and the child's own handlers would otherwise run the parent's handler in the child."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)


def fork(child: Callable[[], int]) -> int:
    """Fork (inside `signals_held`) a process that runs `child()` and exits with its code: no
    atexit handler, finaliser or `finally` of the parent's stack runs in it. The child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child()
        finally:
            os._exit(code)
    return pid


def enter_child(parent: int, on_term: Any) -> bool:
    """In a forked child, first: Ctrl-C left to the parent (which stops its children), SIGTERM to
    `on_term`, a parent killed with -9 taking the child with it (Linux's parent-death signal), then
    the held signals taken. Whether the parent is still there."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, on_term)
    arm_parent_death_signal()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
    return os.getppid() == parent  # else it died before the signal was armed
