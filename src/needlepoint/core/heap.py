"""The process's memory between a run's phases: what is freed handed back to the system, and the
cyclic collector kept off the objects a run's end builds."""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused", "give_back_freed"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a bounded phase that builds many objects and
    no cycles to speak of (a run's end: its records read back, its scores, the page's rows):
    each full collection there walks every object the run holds and frees nothing (0.08 s at
    600 MM-NIAH documents, issue 45). Its earlier state comes back after; cycles made meanwhile
    are collected then."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def give_back_freed() -> bool:
    """Hand the memory the C allocator holds free back to the system (glibc's `malloc_trim`):
    whether any went back (False where there is no such call). A run's answering frees hundreds of megabytes of request
    bodies (an MM-NIAH document's images are 40 base64 strings of about 100 KB, below the size
    glibc maps on its own, 64 documents in flight) that glibc keeps in its heap, while Python's
    own objects come from separate mappings: the report built after the last answer then stood
    on top of them (peak RSS 1.22x `--no-report`'s at 600 documents; about 20 ms, issue 45)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return False
