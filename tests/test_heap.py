"""Freed memory goes back to the system between a run's phases (core/heap.py), measured in a
fresh interpreter by its resident set."""

from __future__ import annotations

import subprocess
import sys

CODE = """
from needlepoint.core.heap import give_back_freed

def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

base = resident()
held = [bytes(100_000) for _ in range(3000)]  # 300 MB in pieces of a base64 image's size: glibc's heap
kept = held[::50]  # a few survive, spread out, as records and caches do: the heap cannot just shrink
del held
freed = resident()
back = give_back_freed()
print(base, freed, resident(), back, len(kept))
"""


def test_request_sized_buffers_freed_in_the_heap_go_back_to_the_system() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout.split()
    base, freed, after, back = int(out[0]), int(out[1]), int(out[2]), out[3]
    assert freed - base > 150e6  # freed by Python, still resident: glibc kept most of it
    assert back == "True" and after - base < 30e6  # handed back, all but the survivors (6 MB)
