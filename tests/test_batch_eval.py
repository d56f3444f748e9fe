"""`needlepoint eval --batch` against a local server with OpenAI's Batch API
(needlepoint.models.simulated_batch): the same metrics as the live path, repair turns as a second batch, a batch that
completes partly or expires (failed samples, completed by --retry-failed), a needlepoint killed
while it polls (the rerun waits for the same batch), and the combinations refused."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, one_sentence, ref_eval_args, run_cli, run_quiet, scripted_ref_release, untimed

from needlepoint.core.store import read_records

N = 10  # the demo script's samples 5 and 7 need a repair turn


def _args(data: Path, url: str, out: Path, *extra: str) -> list[str]:
    return ref_eval_args(data, url, out, "--no-report", "--batch", "--batch-poll", "0.01", *extra, model="sim-model")


def test_batch_run_matches_the_live_run(tmp_path: Path, batch_server: Any) -> None:
    data, _, keys, script = scripted_ref_release(tmp_path, N)
    live_server = batch_server(script)
    rc, err = run_quiet(ref_eval_args(data, live_server.url, tmp_path / "live", "--no-report", model="sim-model"))
    assert rc == 0, err
    assert live_server.created == 0

    server = batch_server(script)
    rc, err = run_quiet(_args(data, server.url, tmp_path / "batched", "--json"))
    assert rc == 0, err
    # first turns in one batch, the two repair turns (samples 5 and 7) in a second
    assert server.created == 2 and server.uploads == 2
    assert [len(ids) for ids in server.inputs] == [N, 2]
    assert all(m["role"] == "user" for m in server.bodies()[0]["messages"])
    live = json.loads((tmp_path / "live" / "metrics.json").read_text())
    batched = json.loads((tmp_path / "batched" / "metrics.json").read_text())
    assert untimed(batched) == untimed(live)
    assert batched["usage"]["total"]["prompt_tokens"] > 0
    records = read_records(tmp_path / "batched" / "records.jsonl")
    assert sum(r["repair_used"] for r in records.values()) == 2
    header = json.loads((tmp_path / "batched" / "run.json").read_text())
    assert header["config"]["batch"] is True
    assert header["hash"] == json.loads((tmp_path / "live" / "run.json").read_text())["hash"]  # not in the identity
    state = [json.loads(line) for line in (tmp_path / "batched" / "batches.jsonl").read_text().splitlines()]
    assert [e["batch"] for e in state if "batch" in e] == ["batch-1", "batch-2"]
    assert [e["intent"] for e in state if "intent" in e] == [e["input_file"] for e in state if "batch" in e]  # intents first


def test_partial_batch_leaves_failed_samples_that_a_retry_completes(tmp_path: Path, batch_server: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script, partial_batches=1)
    out = tmp_path / "run"
    rc, err = run_quiet([a for a in _args(data, server.url, out) if a != "--no-progress"])  # with progress lines
    assert rc == 3, err
    assert "batch batch-1: completed, 5/10 completed, 5 failed" in err
    records = read_records(out / "records.jsonl")
    failed = {i for i, r in records.items() if r["status"] == "backend_error"}
    assert len(failed) == N // 2 and all("answered this request with an error" in records[i]["error"] for i in failed)
    assert server.created >= 1
    created = server.created
    rc, err = run_quiet(_args(data, server.url, out, "--retry-failed"))
    assert rc == 0, err
    assert server.created > created and len(server.inputs[created]) == len(failed)  # only the failed go out again
    final = read_records(out / "records.jsonl")
    assert all(r["status"] == "done" for r in final.values())


def test_expired_batch_leaves_unanswered_samples_failed_and_retryable(tmp_path: Path, batch_server: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script, expire_batches=1)
    out = tmp_path / "run"
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 3, err
    records = read_records(out / "records.jsonl")
    failed = [r for r in records.values() if r["status"] == "backend_error"]
    assert len(failed) == N - N // 2 and all("ended expired without answering" in r["error"] for r in failed)
    rc, err = run_quiet(_args(data, server.url, out, "--retry-failed"))
    assert rc == 0, err
    assert all(r["status"] == "done" for r in read_records(out / "records.jsonl").values())


def test_killed_while_polling_the_rerun_waits_for_the_same_batch(tmp_path: Path, batch_server: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script, hold=True)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "needlepoint.cli", *_args(data, server.url, out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while server.polls < 3:
            assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()}"
            assert time.monotonic() < deadline, "the run never polled its batch"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert server.created == 1 and server.uploads == 1
    assert [e["batch"] for e in _state(out) if "batch" in e] == ["batch-1"]
    server.hold = False
    rerun = run_cli(_args(data, server.url, out))
    assert rerun.returncode == 0, rerun.stderr
    # the first turns were paid for once: the rerun waited for batch-1; only the repair turns made a new one
    assert server.created == 2 and server.uploads == 2 and len(server.inputs[1]) == 2
    assert len(read_records(out / "records.jsonl")) == N


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--max-cost", "1", "--price", "1,1"], "--max-cost and --max-tokens-total"),
        (["--repeats", "2", "--temperature", "0.7"], "--batch does not run --repeats"),
        (["--api-url", "http://127.0.0.1:9/v1"], "exactly one --api-url"),
        (["--batch-poll", "0"], "--batch-poll must be a positive"),
        (["--batch-deadline", "0"], "--batch-deadline must be a positive"),
    ],
)
def test_refused_combinations(tmp_path: Path, extra: list[str], words: str) -> None:
    data, _, _, _ = scripted_ref_release(tmp_path, 2)
    rc, err = run_quiet([*_args(data, "http://127.0.0.1:9/v1", tmp_path / "run"), *extra])
    assert rc == 2
    assert words in one_sentence(err)
    assert not (tmp_path / "run").exists()


def test_answers_lost_locally_come_from_the_paid_batch_and_a_forgotten_batch_is_sent_again(
    tmp_path: Path, batch_server: Any
) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script)
    out = tmp_path / "run"
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 0, err
    first = read_records(out / "records.jsonl")

    def lose_answers() -> None:
        (out / "records.jsonl").unlink()
        shutil.rmtree(out / "cache", ignore_errors=True)

    lose_answers()
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 0, err
    assert server.created == 2  # both batches' answers read again, none paid again
    assert {i: r["answer"] for i, r in read_records(out / "records.jsonl").items()} == {i: r["answer"] for i, r in first.items()}

    lose_answers()
    server.batches.clear()  # the provider no longer knows them: the requests go out again
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 0, err
    assert server.created == 4 and len(read_records(out / "records.jsonl")) == N


def test_refused_with_serve_and_with_solvers_that_ask_other_models(tmp_path: Path) -> None:
    from needlepoint.core.config import RunConfig
    from needlepoint.run.batchrun import refusal

    def config(**kw: Any) -> RunConfig:
        settings: dict[str, Any] = {"batch": True, **kw}
        return RunConfig(benchmark="ref_adv_s", data=tmp_path, model="m", api_urls=["http://127.0.0.1:9/v1"], **settings)

    assert refusal(config(), {}) is None
    assert refusal(config(batch=False, max_cost=1.0), {}) is None
    assert "--serve" in str(refusal(config(serve=object()), {}))
    why = str(refusal(config(solver="agentic"), {"localizer": object()}))
    assert "--solver agentic also asks localizer" in why


def _state(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "batches.jsonl").read_text().splitlines()]
