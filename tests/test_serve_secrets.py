"""`--serve`: credentials and server logs stay where they belong, and no server process outlives
needlepoint. A `--serve-arg` credential is stored nowhere (run.json, the run's page, the server
log), the run's own OPENAI_API_KEY printed by a server is quoted nowhere, a failing server's log is
quoted bounded and without terminal codes, a process that leaves the server's process group is
stopped with it, and the servers of a run stop together, as soon as they are gone.

The server is the fake `vllm` executable of helpers/fake_vllm.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import one_sentence, run_cli
from helpers.fake_vllm import all_gone, fake_env, server_pids, write_fake_vllm

from needlepoint.report.html import public_config
from needlepoint.serve import ServePlan, ServeSpec
from needlepoint.serve.process import STOP_GRACE_S

KEY = "sk-serve-secret-4242"
TOKEN = "hf_token_secret_4343"
RUN_KEY = "sk-the-runs-own-key-4444"


@pytest.fixture
def fake_vllm(tmp_path: Path) -> tuple[Path, Path]:
    return write_fake_vllm(tmp_path)


def _args(data: Path, exe: Path, out: Path, *extra: str) -> list[str]:
    return [
        "eval", "ref_adv_s", "--data", str(data), "--model", "org/m", "--box-format", "abs_xyxy",
        "--serve", "vllm", "--serve-bin", str(exe), "--out", str(out), "--max-retries", "0", *extra,
    ]  # fmt: skip


def _everything(folder: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file())


def test_a_serve_arg_credential_is_stored_nowhere(fake_vllm: tuple[Path, Path], ref_release: Any, tmp_path: Path) -> None:
    exe, state = fake_vllm
    out = tmp_path / "run"
    extra = ("--serve-arg", f"--api-key {KEY}", f"--serve-arg=--hf-token={TOKEN} --max-model-len 4096", "--no-progress")
    proc = run_cli(_args(ref_release[0], exe, out, *extra), env={**fake_env(state), "OPENAI_API_KEY": RUN_KEY})
    assert proc.returncode == 0, proc.stderr
    seen = [p.read_text() for p in state.glob("argv-*.json")]
    assert len(seen) == 1 and KEY in seen[0] and TOKEN in seen[0]  # the server was given them
    stored = _everything(out)
    assert (out / "run.json").exists() and any(out.rglob("*.html"))  # the run's page is among them
    assert "INFO non-default args" in stored and "--max-model-len" in stored and "[redacted]" in stored
    for secret in (KEY, TOKEN, RUN_KEY):
        assert secret not in stored and secret not in proc.stderr + proc.stdout, secret
    assert all_gone(server_pids(state)) == []


def test_a_failing_servers_log_is_quoted_bounded_plain_and_scrubbed(
    fake_vllm: tuple[Path, Path], ref_release: Any, tmp_path: Path
) -> None:
    exe, state = fake_vllm
    out = tmp_path / "run"
    env = {**fake_env(state, mode="noisy"), "OPENAI_API_KEY": RUN_KEY}
    proc = run_cli(_args(ref_release[0], exe, out, "--no-progress", f"--serve-arg=--api-key={KEY}"), env=env)
    assert proc.returncode == 2
    line = one_sentence(proc.stderr)
    assert "exited with code 3 while starting" in line and "ValueError: the model at /weights is broken" in line
    assert "the key in use is [redacted]" in line and RUN_KEY not in line and KEY not in line
    assert len(line.encode()) < 2600 and line.count(" | ") <= 19  # the last lines only
    assert not any(c < " " or "\x7f" <= c <= "\x9f" for c in line), repr(line)
    assert "[1;31m" not in line and "title" not in line
    log = (out / "serve" / "model-0.log").read_text()
    assert RUN_KEY not in log and KEY not in log and "step 399" in log
    assert all_gone(server_pids(state)) == []


def _escaped(state: Path, proc: subprocess.Popen[Any] | None = None) -> list[int]:
    deadline = time.monotonic() + 120
    path = state / "escaped"
    while time.monotonic() < deadline and not path.exists():
        assert proc is None or proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    return [int(p) for p in path.read_text().split()]


def test_a_process_that_leaves_the_servers_group_is_stopped_with_it(
    fake_vllm: tuple[Path, Path], ref_release: Any, tmp_path: Path
) -> None:
    exe, state = fake_vllm
    proc = run_cli(_args(ref_release[0], exe, tmp_path / "run", "--no-report"), env={**fake_env(state), "FAKE_SERVE_ESCAPE": "1"})
    assert proc.returncode == 0, proc.stderr
    escaped = _escaped(state)
    assert len(escaped) == 1 and all_gone(server_pids(state) + escaped) == []


@pytest.mark.parametrize("how", ["sigterm", "kill -9"])
def test_an_escaped_process_goes_after_sigterm_and_kill_9(
    fake_vllm: tuple[Path, Path], ref_release: Any, tmp_path: Path, how: str
) -> None:
    exe, state = fake_vllm
    proc = subprocess.Popen(
        [sys.executable, "-m", "needlepoint.cli", *_args(ref_release[0], exe, tmp_path / "run", "--no-report")],
        env={**os.environ, **fake_env(state, mode="never"), "FAKE_SERVE_ESCAPE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    escaped = _escaped(state, proc)
    proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    proc.wait(timeout=120)
    assert all_gone(server_pids(state) + escaped) == []


def test_the_servers_stop_together_as_soon_as_they_are_gone(fake_vllm: tuple[Path, Path], tmp_path: Path) -> None:
    """Two replicas whose servers end at once on SIGTERM: stopping both takes far less than one
    grace period (it took one full grace period per server, one after the other)."""
    exe, state = fake_vllm
    os.environ.update(fake_env(state))
    try:
        plan = ServePlan([ServeSpec("model", "vllm", "org/m", replicas=2, bin=str(exe))], show_progress=False, gpus=[])
        plan.start(tmp_path / "serve")
        began = time.monotonic()
        plan.stop()
        took = time.monotonic() - began
    finally:
        for name in ("FAKE_SERVE_STATE", "FAKE_SERVE_MODE", "CUDA_VISIBLE_DEVICES", "PYTHONPATH"):
            os.environ.pop(name, None)
    assert took < STOP_GRACE_S / 2, took  # 2 x STOP_GRACE_S before
    assert all_gone(server_pids(state)) == []


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    """The grace is a bound, not a wait: a server deaf to SIGTERM (and its child in a session of
    its own) is killed once it is over; its output reached the log through the guard."""
    from needlepoint.serve.process import ServerProcess

    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "away = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'], start_new_session=True)\n"
        "print('de' + 'af', away.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    server = ServerProcess("model", [sys.executable, "-c", code], 1, tmp_path / "model-0.log", grace_s=1.0)
    server.start()
    deadline = time.monotonic() + 60
    while "deaf " not in server.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int(server.log.read_text().split("deaf ")[1].split()[0])
    server.stop()
    assert server.exited() is not None and all_gone([pid], within_s=30) == []


def test_the_report_page_hides_a_key_in_a_command_line_stored_before_the_rule() -> None:
    """A run.json written before serve arguments were scrubbed keeps `--api-key sk-...` in its
    command lines: the page shows the flag, never the key."""
    secret = "sk-old-run-0123456789abcdef"
    header = {"config": {"serve": {"servers": [{"command": ["vllm", "serve", "m", "--api-key", secret, "--port", "8000"]}]}}}
    shown = public_config(header)
    command = shown["config"]["serve"]["servers"][0]["command"]
    assert secret not in repr(shown) and command[3] == "--api-key" and command[5:] == ["--port", "8000"]
