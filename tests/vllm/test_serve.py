"""`--serve vllm` against vLLM's CPU build: needlepoint starts the server of the tiny Qwen2.5-VL
(`python -m vllm.entrypoints.openai.api_server`, through --serve-bin), runs against it and stops
it; a server that fails to start is one sentence; Ctrl-C and kill -9 of needlepoint leave no
server process (the API server nor its engine) behind.

The processes of a test are found by a marker in their environment, which every process
needlepoint starts inherits (and the session's other servers lack)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from .conftest import MAX_MODEL_LEN, MODEL_NAME, VLLM_PYTHON, needlepoint, needlepoint_popen

pytestmark = pytest.mark.vllm

SERVE_ARGS = f"--served-model-name {MODEL_NAME} --dtype float32 --max-model-len {MAX_MODEL_LEN} --max-num-seqs 16"
CPU_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "CUDA_VISIBLE_DEVICES": "",
}


def _marked_env() -> tuple[str, dict[str, str]]:
    mark = uuid.uuid4().hex
    return mark, {**CPU_ENV, "NEEDLEPOINT_SERVE_TEST_MARK": mark}


def _marked(mark: str) -> list[int]:
    """The live processes whose environment holds the marker (zombies excluded)."""
    needle = f"NEEDLEPOINT_SERVE_TEST_MARK={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def _none_left(mark: str, within_s: float = 60.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and _marked(mark):
        time.sleep(0.5)
    return _marked(mark)


def _args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "eval", "ref_adv_s", "--data", str(data), "--model", str(model), "--box-format", "abs_xyxy",
        "--serve", "vllm", "--serve-bin", str(VLLM_PYTHON), f"--serve-arg={SERVE_ARGS}",
        "--out", str(out), "--max-retries", "0", "--max-tokens", "32", "--no-report", "--concurrency", "4", *extra,
    ]  # fmt: skip


def test_a_run_with_serve_vllm(tiny_model: Path, ref_release: Any, tmp_path: Path) -> None:
    mark, env = _marked_env()
    out = tmp_path / "run"
    proc = needlepoint(_args(tiny_model, ref_release[0], out, "--limit", "3"), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "vLLM ready after" in proc.stderr
    header = json.loads((out / "run.json").read_text())
    assert header["config"]["model"] == MODEL_NAME
    (server,) = header["config"]["serve"]["servers"]
    assert server["command"][:3] == [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server"]
    assert server["generation_config"] == "vllm"
    assert len((out / "records.jsonl").read_text().splitlines()) == 3
    assert "Application startup complete" in (out / "serve" / server["log"]).read_text()
    assert _none_left(mark) == []


def test_a_server_that_fails_to_start(tiny_model: Path, ref_release: Any, tmp_path: Path) -> None:
    mark, env = _marked_env()
    out = tmp_path / "run"
    proc = needlepoint(_args(tiny_model, ref_release[0], out, "--serve-arg=--max-model-len 100000000"), env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("needlepoint:")]
    assert len(lines) == 1 and "exited with code" in lines[0] and "while starting" in lines[0], proc.stderr[-3000:]
    assert str(out / "serve" / "model-0.log") in lines[0]
    assert _none_left(mark) == []


@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_ctrl_c_and_kill_9_leave_no_server(tiny_model: Path, ref_release: Any, tmp_path: Path, how: str) -> None:
    mark, env = _marked_env()
    out = tmp_path / "run"
    proc: subprocess.Popen[bytes] = needlepoint_popen(_args(tiny_model, ref_release[0], out), tmp_path / "out.txt", env=env)
    deadline = time.monotonic() + 900
    # needlepoint, the guard, the API server and its engine process: the server is past its
    # configuration and loading the model
    while time.monotonic() < deadline and len(_marked(mark)) < 4:
        assert proc.poll() is None, (tmp_path / "out.txt").read_text()[-3000:]
        time.sleep(0.5)
    assert len(_marked(mark)) >= 4, (tmp_path / "out.txt").read_text()[-3000:]
    if how == "ctrl-c":
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, (tmp_path / "out.txt").read_text()[-3000:]
    else:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert _none_left(mark) == []
