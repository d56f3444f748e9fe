"""A fake `vllm` executable for the tests of `--serve` (tests/test_serve_*.py): it serves
/v1/models and chat requests (the simulated model), starts a child process as vLLM starts its
engine, and records its argv, its CUDA_VISIBLE_DEVICES and every pid it made in a state folder,
so that a test can check that none is left. FAKE_SERVE_MODE: ok, die (exits 3 while starting,
after a line of log), never (never answers), noisy (exits 3 while starting after a long log in
colour that quotes its settings and the environment's OPENAI_API_KEY, as a real server's may).
Like vLLM it logs its non-default settings, credentials included. FAKE_SERVE_ESCAPE=1: it also
starts a process that leaves its process group (setsid) and records that pid in `escaped`."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from helpers.paths import REPO

FAKE = """#!{python}
import json, os, signal, subprocess, sys, time

args = sys.argv[1:]
def flag(name):
    return args[args.index(name) + 1]

state = os.environ["FAKE_SERVE_STATE"]
mode = os.environ.get("FAKE_SERVE_MODE", "ok")
engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # like vLLM's engine process
with open(os.path.join(state, "pids"), "a") as fh:
    fh.write(f"{{os.getpid()}}\\n{{engine.pid}}\\n")
with open(os.path.join(state, f"argv-{{os.getpid()}}.json"), "w") as fh:
    json.dump({{"argv": args, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}}, fh)
print("INFO non-default args:", {{a.lstrip("-").replace("-", "_"): b for a, b in zip(args, args[1:]) if a.startswith("--")}}, flush=True)
if os.environ.get("FAKE_SERVE_ESCAPE") == "1":
    away = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    with open(os.path.join(state, "escaped"), "a") as fh:
        fh.write(f"{{away.pid}}\\n")
print("INFO loading weights", flush=True)
if mode == "noisy":
    for i in range(400):
        print(f"\\x1b[1;31mDEBUG\\x1b[0m step {{i}} " + "x" * 40 + "\\x07\\x1b]0;title\\x07", flush=True)
    print("ERROR the key in use is " + os.environ.get("OPENAI_API_KEY", ""), flush=True)
    print("\\x1b[31mValueError: the model at /weights is broken\\x1b[0m", flush=True)
    sys.exit(3)
if mode == "die":
    print("ValueError: the model at /weights is broken", flush=True)
    sys.exit(3)
if mode == "never":
    time.sleep(600)
from needlepoint.models.simulated import SimulatedServer

name = flag("--served-model-name")
SimulatedServer(port=int(flag("--port")), models=[name], embed_models=[name]).start()
print("INFO ready", flush=True)
while True:
    time.sleep(1)
"""


def write_fake_vllm(tmp_path: Path) -> tuple[Path, Path]:
    """The fake `vllm` executable (tmp_path/bin/vllm) and the folder where its servers leave their state."""
    state = tmp_path / "state"
    state.mkdir()
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(0o755)
    return exe, state


def fake_env(state: Path, mode: str = "ok", gpus: str = "") -> dict[str, str]:
    """The environment the fake server reads (and that lets it import needlepoint)."""
    return {
        "FAKE_SERVE_STATE": str(state),
        "FAKE_SERVE_MODE": mode,
        "CUDA_VISIBLE_DEVICES": gpus,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    }


def server_pids(state: Path) -> list[int]:
    """Every pid the fake servers made (server and engine child, in pairs)."""
    path = state / "pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    """Whether a process exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def all_gone(pids: list[int], within_s: float = 60.0) -> list[int]:
    """The pids still alive after waiting up to `within_s` for them to end (a deadline, not a timing check)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in pids if alive(p)]
