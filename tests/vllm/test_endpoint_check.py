"""The endpoint check against a real vLLM: the three commonest set-up mistakes end before anything
is sent, in one sentence, with exit code 2 and no run folder left behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from needlepoint.benchmarks.ref_adv import demo as ref_adv

from .conftest import API_KEY, MODEL_NAME, Servers, needlepoint, vllm_counter

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ref_adv.write_release(tmp_path_factory.mktemp("ref_adv_s"), ref_adv.make_rows(4))


def run_eval(
    release: Path, url: str, out: Path, model: str = MODEL_NAME, key: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = [
        "eval",
        "ref_adv_s",
        "--data",
        str(release),
        "--model",
        model,
        "--api-url",
        url,
        "--box-format",
        "abs_xyxy",
        "--limit",
        "2",
        "--max-tokens",
        "8",
        "--out",
        str(out),
        "--no-progress",
        "--no-report",
    ]
    return needlepoint(args, env={"OPENAI_API_KEY": key} if key else None)


def one_sentence(stderr: str) -> str:
    """The error line; no traceback around it."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_wrong_model_name_lists_the_served_models(release: Path, servers: Servers, tmp_path: Path) -> None:
    server = servers.open
    before = vllm_counter(server, "vllm:request_success_total")
    proc = run_eval(release, server.url, tmp_path / "run", model="Qwen/Qwen2.5-VL-7B-Instruct")
    assert proc.returncode == 2, proc.stderr
    line = one_sentence(proc.stderr)
    assert "Qwen/Qwen2.5-VL-7B-Instruct" in line and MODEL_NAME in line, line
    assert not (tmp_path / "run").exists()
    assert vllm_counter(server, "vllm:request_success_total") == before, "a request was sent"


def test_missing_key_is_named(release: Path, servers: Servers, tmp_path: Path) -> None:
    server = servers.ensure_keyed()
    proc = run_eval(release, server.url, tmp_path / "run")
    assert proc.returncode == 2, proc.stderr
    line = one_sentence(proc.stderr)
    assert "--api-key" in line or "OPENAI_API_KEY" in line, line
    assert API_KEY not in proc.stderr + proc.stdout
    assert not (tmp_path / "run").exists()


def test_wrong_key_is_named_and_not_printed(release: Path, servers: Servers, tmp_path: Path) -> None:
    server = servers.ensure_keyed()
    proc = run_eval(release, server.url, tmp_path / "run", key="sk-wrong-key-123")
    assert proc.returncode == 2, proc.stderr
    line = one_sentence(proc.stderr)
    assert "--api-key" in line or "OPENAI_API_KEY" in line, line
    assert "sk-wrong-key-123" not in proc.stderr + proc.stdout
    assert not (tmp_path / "run").exists()


def test_url_without_v1_says_so(release: Path, servers: Servers, tmp_path: Path) -> None:
    server = servers.open
    proc = run_eval(release, server.base, tmp_path / "run")
    assert proc.returncode == 2, proc.stderr
    line = one_sentence(proc.stderr)
    assert "/v1" in line, line
    assert not (tmp_path / "run").exists()


def test_right_key_passes_the_check(release: Path, servers: Servers, tmp_path: Path) -> None:
    """The same keyed server with its key: the check lets the run through and samples are answered."""
    server = servers.ensure_keyed()
    proc = run_eval(release, server.url, tmp_path / "run", key=API_KEY)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "records.jsonl").read_text().count("\n") == 2
    assert API_KEY not in "".join(p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*") if p.is_file())
