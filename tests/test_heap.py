"""A run's memory between its phases (core/heap.py): freed memory goes back to the system,
measured in a fresh interpreter by its resident set; the cyclic collector is off for a run's end."""

from __future__ import annotations

import contextlib
import gc
import io
import subprocess
import sys
from pathlib import Path

import pytest

from needlepoint.cli import main
from needlepoint.core.heap import collector_paused

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


def test_the_collector_is_off_for_a_runs_end_and_back_after() -> None:
    gc.collect()
    before = [g["collections"] for g in gc.get_stats()]
    with collector_paused():
        assert not gc.isenabled()
        made = [[n] for n in range(100_000)]  # enough containers for several collections
        during = [g["collections"] for g in gc.get_stats()]
    assert during == before and gc.isenabled() and made
    gc.disable()  # a caller's own choice stays as it was, also after an error
    try:
        with pytest.raises(KeyError), collector_paused():
            raise KeyError("x")
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(KeyError), collector_paused():
        raise KeyError("x")
    assert gc.isenabled()


PROGRAM = """
import gc, sys
sys.argv = ["needlepoint", "runs", sys.argv[1]]
from needlepoint.cli import main
code = main()
print(code, gc.get_freeze_count() > 0)
"""


def test_the_program_leaves_its_objects_to_the_exit_and_a_caller_keeps_its_collector(tmp_path: Path) -> None:
    """The `needlepoint` program freezes what it made before the interpreter's last collection
    (which would walk it all and free nothing); `main` called from Python freezes nothing."""
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "True"]
    before = gc.get_freeze_count()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["runs", str(tmp_path)]) == 0
    assert gc.get_freeze_count() == before
