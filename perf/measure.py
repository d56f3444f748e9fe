"""One command run and measured, for the measurement scripts: wall time, CPU and peak RSS."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measured(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, user + system CPU s, peak RSS MB) of `argv`, run with this checkout's `src` first
    on PYTHONPATH; exits with the command's stderr when it fails."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"command failed: {' '.join(argv)}\n{err}")
    rss_mb = usage.ru_maxrss / (2**20 if platform.system() == "Darwin" else 1024)
    return wall, usage.ru_utime + usage.ru_stime, rss_mb
