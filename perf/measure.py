"""What the measurement scripts share: one command run and measured (wall time, CPU, peak RSS),
perf/serve_simulated.py started in its own process with its arrival counters, and a count of the
records a running command has stored that reads each byte once."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def with_bytecode(*trees: Path) -> None:
    """Compile the Python trees whose commands are timed (default: the one `needlepoint` is
    imported from here, PYTHONPATH included), and let every child process read and write
    bytecode. A package installed by pip has its bytecode from the install; an editable checkout
    run in a shell with PYTHONDONTWRITEBYTECODE set (some sandboxes set it) would compile its
    modules again in every timed command, a start-up cost (0.3-0.4 s here) that no user pays and
    that the tools it is compared with (installed by pip) do not pay either."""
    import compileall
    import importlib.util

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    spec = importlib.util.find_spec("needlepoint")
    imported = Path(spec.origin).parents[1] if spec is not None and spec.origin else REPO / "src"
    for tree in trees or (imported,):
        compileall.compile_dir(str(tree), quiet=1)


def measured(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, user + system CPU s, peak RSS MB) of `argv`, run with this checkout's `src` first
    on PYTHONPATH (compiled: `with_bytecode`); exits with the command's stderr when it fails."""
    if "PYTHONDONTWRITEBYTECODE" in os.environ:
        with_bytecode()
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


class GrowingLines:
    """The whole lines of a file that only grows (a run's records.jsonl), counted by reading what
    was appended since the last call: a watcher that polls a running command reads each byte once.
    Reading the whole file at each poll took a share of the two cores that the measured command and
    its server run on (a long-document run's 126 MB of records, ten times a second)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.read_to = 0
        self.count = 0

    def __call__(self) -> int:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.read_to)
                new = fh.read()
        except FileNotFoundError:
            return self.count
        self.read_to += len(new)
        self.count += new.count(b"\n")
        return self.count


@dataclass
class ServerProcess:
    """perf/serve_simulated.py in its own process, answering after `delay_ms` as `model`; `extra`
    are its other flags (--script, --reply, --capacity); `name` tells several servers' stats files
    apart. `stats()` gives the chat requests since the previous call and the first and last
    arrival (time.time()); `cpu_s()` the server's CPU seconds so far."""

    delay_ms: float
    workdir: Path
    model: str = "bench-model"
    extra: Sequence[str] = ()
    name: str = ""
    proc: subprocess.Popen[str] | None = field(default=None, repr=False)
    url: str = ""

    @property
    def stats_path(self) -> Path:
        return self.workdir / f"server-{self.name or f'{self.delay_ms:g}ms'}.stats.json"

    def start(self) -> ServerProcess:
        cmd = [sys.executable, str(REPO / "perf" / "serve_simulated.py"), "--delay-ms", str(self.delay_ms)]
        cmd += ["--model", self.model, "--stats", str(self.stats_path), *self.extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise RuntimeError(f"serve_simulated.py did not print its URL (got {self.url!r})")
        return self

    def stats(self) -> dict[str, Any]:
        """Requests and arrival times since the previous call (the server's counters restart)."""
        assert self.proc is not None
        self.stats_path.unlink(missing_ok=True)
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not self.stats_path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the simulated server did not write its stats")
            time.sleep(0.005)
        return dict(json.loads(self.stats_path.read_text()))

    def cpu_s(self) -> float:
        """User + system CPU seconds of the server process so far."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
