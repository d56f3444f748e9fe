"""The process's freed memory handed back to the system between a run's phases."""

from __future__ import annotations

import ctypes
import sys

__all__ = ["give_back_freed"]


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
