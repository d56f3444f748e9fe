"""`--serve`: needlepoint starts the servers, waits for them, runs against them and stops them, at
the end, after a server's death at start, on SIGTERM and Ctrl-C, and after its own kill -9.

The server is the fake `vllm` executable of helpers/fake_vllm.py, which records every process it
makes, so that a test can check that none is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import ctrl_c_stops, one_sentence, run_cli
from helpers.fake_vllm import all_gone, fake_env, server_pids, write_fake_vllm


@pytest.fixture
def fake_vllm(tmp_path: Path) -> tuple[Path, Path]:
    """The fake `vllm` executable and the folder where its servers leave their state."""
    return write_fake_vllm(tmp_path)


def _args(data: Path, exe: Path, out: Path, *extra: str) -> list[str]:
    return [
        "eval", "ref_adv_s", "--data", str(data), "--model", "org/m", "--box-format", "abs_xyxy",
        "--serve", "vllm", "--serve-bin", str(exe), "--out", str(out), "--max-retries", "0", "--no-report", *extra,
    ]  # fmt: skip


def _wait_for_servers(state: Path, count: int, proc: subprocess.Popen[Any]) -> list[int]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(server_pids(state)) < 2 * count:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    return server_pids(state)


def test_a_run_starts_its_servers_and_stops_them(fake_vllm: tuple[Path, Path], ref_release: Any, tmp_path: Path) -> None:
    exe, state = fake_vllm
    out = tmp_path / "run"
    proc = run_cli(_args(ref_release[0], exe, out, "--serve-replicas", "2"), env=fake_env(state, gpus="3,5"))
    assert proc.returncode == 0, proc.stderr
    assert "vLLM loading weights:" in proc.stderr and "vLLM ready after" in proc.stderr
    pids = server_pids(state)
    assert len(pids) == 4 and all_gone(pids) == []
    header = json.loads((out / "run.json").read_text())
    servers = header["config"]["serve"]["servers"]
    assert [s["gpus"] for s in servers] == [["3"], ["5"]]  # disjoint groups from CUDA_VISIBLE_DEVICES
    assert header["config"]["api_urls"] == [s["url"] for s in servers]
    for s in servers:
        cmd = s["command"]
        assert cmd[:3] == [str(exe), "serve", "org/m"] and s["generation_config"] == "vllm"
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--served-model-name") + 1] == "org/m"
        assert json.loads(cmd[cmd.index("--limit-mm-per-prompt") + 1]) == {"image": 1, "video": 0}
        assert (out / "serve" / s["log"]).read_text().count("INFO ready") == 1
    seen = [json.loads(p.read_text()) for p in state.glob("argv-*.json")]
    assert sorted(s["gpus"] for s in seen) == ["3", "5"]
    assert len(out.joinpath("records.jsonl").read_text().splitlines()) == len(ref_release[1])


def test_workers_of_processes_use_the_servers_the_command_started(
    fake_vllm: tuple[Path, Path], ref_release: Any, tmp_path: Path
) -> None:
    exe, state = fake_vllm
    out = tmp_path / "run"
    args = _args(ref_release[0], exe, out, "--serve-replicas", "2", "--processes", "2", "--concurrency", "4")
    proc = run_cli(args, env=fake_env(state, gpus="3,5"))
    assert proc.returncode == 0, proc.stderr
    pids = server_pids(state)
    assert len(pids) == 4 and all_gone(pids) == []  # started once, by the command, and stopped at its end
    header = json.loads((out / "run.json").read_text())
    assert header["status"] == "complete" and header["config"]["processes"] == 2
    urls = {s["url"] for s in header["config"]["serve"]["servers"]}
    assert {e["url"] for e in header["endpoints"]} == urls and all(e["requests"] > 0 for e in header["endpoints"])
    assert len(json.loads((out / "metrics.json").read_text())["run"]["failed_ids"]) == 0


def test_a_server_dying_at_start_is_one_sentence_with_its_log(
    fake_vllm: tuple[Path, Path], ref_release: Any, tmp_path: Path
) -> None:
    exe, state = fake_vllm
    out = tmp_path / "run"
    proc = run_cli(_args(ref_release[0], exe, out, "--no-progress"), env=fake_env(state, mode="die"))
    assert proc.returncode == 2
    line = one_sentence(proc.stderr)
    assert "exited with code 3 while starting" in line and "ValueError: the model at /weights is broken" in line
    assert str(out / "serve" / "model-0.log") in line
    assert all_gone(server_pids(state)) == []  # the engine child of the dead server too
    assert not (out / "run.json").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_ctrl_c_stop_the_servers(fake_vllm: tuple[Path, Path], ref_release: Any, tmp_path: Path, sig: int) -> None:
    exe, state = fake_vllm
    proc = subprocess.Popen(
        [sys.executable, "-m", "needlepoint.cli", *_args(ref_release[0], exe, tmp_path / "run", "--serve-replicas", "2")],
        env={**os.environ, **fake_env(state, mode="never")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_stops,
    )
    pids = _wait_for_servers(state, 2, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert all_gone(pids) == []


def test_kill_9_of_needlepoint_leaves_no_server(fake_vllm: tuple[Path, Path], ref_release: Any, tmp_path: Path) -> None:
    exe, state = fake_vllm
    proc = subprocess.Popen(
        [sys.executable, "-m", "needlepoint.cli", *_args(ref_release[0], exe, tmp_path / "run")],
        env={**os.environ, **fake_env(state, mode="never")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids = _wait_for_servers(state, 1, proc)
    proc.kill()
    proc.wait()
    assert all_gone(pids, within_s=30) == []


def test_serve_and_api_url_together_are_refused(fake_vllm: tuple[Path, Path], ref_release: Any, tmp_path: Path) -> None:
    exe, state = fake_vllm
    proc = run_cli([*_args(ref_release[0], exe, tmp_path / "run"), "--api-url", "http://127.0.0.1:1/v1"], env=fake_env(state))
    assert proc.returncode == 2
    assert "--api-url has nothing to add" in one_sentence(proc.stderr)
    assert server_pids(state) == []


SOLVER_SERVERS = [
    ("mc_bench", ["--box-format", "norm_1000_xyxy", "--solver", "agentic", "--localizer", "vlm:org/loc", "--localizer-serve", "vllm"], "localizer"),
    ("mm_niah", ["--split", "val", "--solver", "rag", "--embed-model", "org/emb", "--embed-serve", "vllm"], "embed"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "flags", "role"), SOLVER_SERVERS)
def test_a_solvers_model_is_served_too(
    fake_vllm: tuple[Path, Path], tmp_path: Path, name: str, flags: list[str], role: str
) -> None:
    from needlepoint.contract.declaration import load_target
    from needlepoint.contract.registry import declarations

    decl = next(d for d in declarations() if d.name == name)
    assert decl.demo is not None
    data, _, _ = load_target(decl.demo)(tmp_path / "data")
    exe, state = fake_vllm
    out = tmp_path / "run"
    args = ["eval", name, "--data", str(data), "--model", "org/m", "--serve", "vllm", "--serve-bin", str(exe)]
    proc = run_cli([*args, *flags, "--limit", "2", "--out", str(out), "--no-report", "--no-progress"], env=fake_env(state))
    assert proc.returncode in (0, 3), proc.stderr
    config = json.loads((out / "run.json").read_text())["config"]
    servers = {s["role"]: s for s in config["serve"]["servers"]}
    assert set(servers) == {"model", role}
    cmd = servers[role]["command"]
    if role == "embed":
        assert cmd[cmd.index("--runner") + 1] == "pooling" and "--limit-mm-per-prompt" not in cmd
        assert config["solver_options"]["embed_url"] == servers[role]["url"]
    else:
        assert config["solver_options"]["localizer_url"] == [servers[role]["url"]]
    assert all_gone(server_pids(state)) == []


def test_the_guard_stops_its_server_on_a_signal_at_any_moment(tmp_path: Path) -> None:
    """Signals may reach the guard at any point of its wait, several at once; it stops the
    server's tree every time. (Its handler once set a threading.Event: a second signal arriving
    while the first one's `Event.set` held the event's lock ran the handler again on the same
    thread, which waited on that lock for ever, and the server of a `kill -9`-ed needlepoint ran on.)"""
    guards = []
    for k in range(12):
        pidfile = tmp_path / f"server-{k}"
        command = [sys.executable, "-c", f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(600)"]
        guard = subprocess.Popen(
            [sys.executable, "-m", "needlepoint.serve.guard", str(os.getpid()), "5", *command],
            stdout=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        guards.append((guard, pidfile))
    deadline = time.monotonic() + 60
    while not all(p.exists() and p.read_text() for _, p in guards) and time.monotonic() < deadline:
        time.sleep(0.05)
    servers = [int(p.read_text()) for _, p in guards]
    for k, (guard, _) in enumerate(guards):
        time.sleep(0.013 * (k % 7))  # at different moments of the guards' 0.25 s polls
        for n in range(300):  # a burst, as the parent-death signal and a hang-up may come together
            guard.send_signal((signal.SIGTERM, signal.SIGHUP, signal.SIGINT)[n % 3])
    for guard, _ in guards:
        guard.wait(timeout=60)
    assert all_gone(servers, within_s=30) == []
