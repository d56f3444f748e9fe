"""Two real vLLM servers, one killed mid-run: requests that fail on the dead server are sent to the
live one, and no sample is lost. The doomed server is named first, so that a client which prefers
it (ties, fewest in flight) keeps retrying on it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from needlepoint.benchmarks.ref_adv import demo as ref_adv
from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.core.status import DONE

from .conftest import API_KEY, MODEL_NAME, Servers, needlepoint, needlepoint_popen, read_records, vllm_counter

pytestmark = pytest.mark.vllm

SAMPLES = 80


def test_one_of_two_servers_killed_mid_run_loses_nothing(servers: Servers, tmp_path: Path) -> None:
    data = ref_adv.write_release(tmp_path / "ref_adv_s", ref_adv.make_rows(SAMPLES))
    ids = {str(s.id) for s in RefAdv(box_format="abs_xyxy").load(data)}
    assert len(ids) == SAMPLES
    live, doomed = servers.open, servers.ensure_keyed()
    common = ["--model", MODEL_NAME, "--box-format", "abs_xyxy", "--max-tokens", "48", "--no-progress", "--no-report"]
    # Warm the doomed server up first. A cold server's first image requests take seconds, and its
    # request gauges stay 0 until its first step ends: in CI the live server once answered every
    # sample while the doomed one sat in that first step, so the kill below never came.
    warm = needlepoint(
        [
            "eval",
            "ref_adv_s",
            "--data",
            str(data),
            "--api-url",
            doomed.url,
            "--limit",
            "4",
            "--out",
            str(tmp_path / "warm"),
            *common,
        ],
        env={"OPENAI_API_KEY": API_KEY},
    )
    assert warm.returncode == 0, warm.stdout[-3000:] + warm.stderr[-3000:]
    out = tmp_path / "run"
    log = tmp_path / "eval.log"
    proc = needlepoint_popen(
        ["eval", "ref_adv_s", "--data", str(data), "--api-url", doomed.url, "--api-url", live.url, "--concurrency", "4"]
        + ["--out", str(out), *common],
        log,
        env={"OPENAI_API_KEY": API_KEY},
    )
    try:
        # Kill the doomed server while it holds requests of this run (running or waiting) and
        # samples are done: those requests die with it.
        records = out / "records.jsonl"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            done = records.read_text().count("\n") if records.exists() else 0
            held = vllm_counter(doomed, "vllm:num_requests_running") + vllm_counter(doomed, "vllm:num_requests_waiting")
            if done >= 1 and held > 0:
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"the run ended before the kill:\n{log.read_text()[-3000:]}"
        done_at_kill = records.read_text().count("\n")
        assert done_at_kill < SAMPLES, done_at_kill
        doomed.kill()
        rc = proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log.read_text()
    assert rc == 0, output[-3000:]
    got = read_records(out)
    assert sorted(str(r["id"]) for r in got) == sorted(ids), "a sample is missing or was recorded twice"
    assert [r for r in got if r["status"] != DONE] == []
    assert all(r["turns"][0]["usage"]["completion_tokens"] > 0 for r in got)
    # The kill hit requests (first turns or repair turns): some were answered only after a failed attempt.
    assert any(turn["attempts"] > 1 for r in got for turn in r["turns"])
