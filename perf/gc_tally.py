"""Run the command line with the garbage collector's collections timed.

    python perf/gc_tally.py OUT.json ARGS...

runs `python -m needlepoint.cli ARGS` in this process with a `gc.callbacks` hook, and writes
{"ms": total, "collections": n, "full_ms": time in generation-2 collections} to OUT.json when
the command exits (perf/bench_mm_niah_memory.py --gc). The hook costs two clock reads a
collection.
"""

from __future__ import annotations

import atexit
import gc
import json
import runpy
import sys
import time
from pathlib import Path
from typing import Any

_started: list[float] = []
_tally = {"ms": 0.0, "collections": 0, "full_ms": 0.0}


def _timed(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started.append(time.perf_counter())
        return
    if not _started:
        return
    ms = (time.perf_counter() - _started.pop()) * 1000
    _tally["ms"] += ms
    _tally["collections"] += 1
    if info.get("generation") == 2:
        _tally["full_ms"] += ms


def main() -> None:
    out = Path(sys.argv[1])
    atexit.register(lambda: out.write_text(json.dumps(_tally) + "\n"))
    gc.callbacks.append(_timed)
    sys.argv = ["needlepoint", *sys.argv[2:]]
    runpy.run_module("needlepoint.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
