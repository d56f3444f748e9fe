"""`needlepoint eval --batch` against a hostile Batch API (needlepoint.models.simulated_batch's
faults): a 500 on a status poll, a malformed output line, answers without an `id`, a batch whose
creation answer is lost, a needlepoint killed during `POST /v1/batches`, a batch that never
finishes, and an endpoint without a Batch API. Never pay twice, never lose a paid answer."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, TEST_MODELS, one_sentence, ref_eval_args, run_quiet, scripted_ref_release

from needlepoint.core.store import read_records
from needlepoint.models.batch import MAX_LINE_BYTES, BatchClient, BatchGone, BatchStopped, _lines
from needlepoint.models.simulated import SimulatedServer

N = 10  # the demo script's samples 5 and 7 need a repair turn: a second batch of 2


def _args(data: Path, url: str, out: Path, *extra: str) -> list[str]:
    return ref_eval_args(data, url, out, "--no-report", "--batch", "--batch-poll", "0.01", *extra, model="sim-model")


def _state(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "batches.jsonl").read_text().splitlines()]


def _statuses(out: Path) -> dict[str, str]:
    return {i: r["status"] for i, r in read_records(out / "records.jsonl").items()}


def test_a_500_on_a_status_poll_is_retried_and_a_rerun_never_pays_twice(tmp_path: Path, batch_server: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script, poll_errors=1)
    out = tmp_path / "run"
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 0, err  # the 500 was retried with backoff, not 10/10 backend_error
    assert server.created == 2 and set(_statuses(out).values()) == {"done"}

    # killed while the batch runs; the rerun's first polls answer 500: it waits for the same batch
    server2 = batch_server(script, hold=True)
    out2 = tmp_path / "run2"
    proc = subprocess.Popen([sys.executable, "-m", "needlepoint.cli", *_args(data, server2.url, out2)], cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while server2.polls < 3:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "the run never polled its batch"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert server2.created == 1
    server2.hold = False
    server2.poll_errors = 2
    rc, err = run_quiet(_args(data, server2.url, out2))
    assert rc == 0, err
    assert server2.created == 2 and server2.uploads == 2 and len(server2.inputs[1]) == 2  # batch-1 not uploaded again
    assert set(_statuses(out2).values()) == {"done"}


def test_a_malformed_output_line_is_that_samples_invalid_response_and_the_rest_are_kept(
    tmp_path: Path, batch_server: Any
) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)

    files = [0]

    def corrupt(k: int, cid: str, line: bytes) -> bytes:  # the first batch's first two lines
        files[0] += k == 0
        if files[0] > 1:
            return line
        if k == 0:  # 100,000-deep JSON that names its request
            return b'{"custom_id": ' + json.dumps(cid).encode() + b', "response": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        if k == 1:
            return b"\x00junk that names no request"
        return line

    server = batch_server(script, corrupt=corrupt)
    out = tmp_path / "run"
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 3, err  # failed samples, not an internal error
    records = read_records(out / "records.jsonl")
    assert len(records) == N
    failed = {i: r for i, r in records.items() if r["status"] != "done"}
    assert len(failed) == 2 and all(r["status"] == "backend_error" for r in failed.values())
    assert sum("invalid_response" in r["error"] for r in failed.values()) == 1
    assert not any(r["status"] == "internal_error" for r in records.values())
    created = server.created
    server.corrupt = None
    rc, err = run_quiet(_args(data, server.url, out, "--retry-failed"))
    assert rc == 0, err
    assert len(server.inputs[created]) == 2  # only the two bad lines' requests went out again
    assert set(_statuses(out).values()) == {"done"}


def test_a_batch_answer_without_an_id_stops_in_one_sentence_and_the_rerun_finds_the_batch(
    tmp_path: Path, batch_server: Any
) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script, no_id="batches")
    out = tmp_path / "run"
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 3, err
    assert "answered POST /v1/batches without an id, so the batch cannot be followed" in err
    assert "Traceback" not in err and "internal_error" not in err
    assert not (out / "records.jsonl").exists() or not read_records(out / "records.jsonl")  # nobody recorded as failed
    assert server.created == 1 and [e.get("intent") for e in _state(out)] == ["file-0"]
    server.no_id = ""
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 0, err
    assert server.listed >= 1 and server.created == 2 and server.uploads == 2  # batch-1 found, only repairs new
    assert set(_statuses(out).values()) == {"done"}


def test_an_upload_answer_without_an_id_is_one_clear_error(tmp_path: Path, batch_server: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script, no_id="files")
    out = tmp_path / "run"
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 3, err
    assert "answered POST /v1/files without an id" in err and "internal_error" not in err
    assert server.created == 0


def test_a_lost_creation_answer_is_looked_up_before_creating_again(tmp_path: Path, batch_server: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script, create_errors=1)
    out = tmp_path / "run"
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 0, err
    assert server.created == 2 and server.listed >= 1  # not 3: the lost answer's batch was found in the list


def test_killed_during_batch_creation_the_rerun_finds_the_batch(tmp_path: Path, batch_server: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script, create_stall_s=60.0)
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "needlepoint.cli", *_args(data, server.url, out)], cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while server.created < 1:  # the batch exists; its answer is not sent yet
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "the run never created its batch"
            time.sleep(0.01)
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert [e.get("intent") for e in _state(out)] == ["file-0"]  # the intent was on disk before the POST
    server.create_stall_s = 0.0
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 0, err
    assert server.created == 2 and server.uploads == 2 and len(server.inputs[1]) == 2  # batch-1 paid once
    assert set(_statuses(out).values()) == {"done"}


def test_batch_progress_lines_without_a_terminal_and_with_no_progress(tmp_path: Path, batch_server: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script)
    rc, err = run_quiet(_args(data, server.url, tmp_path / "run"))  # --no-progress, stderr not a terminal
    assert rc == 0, err
    assert "batch batch-1: in_progress, 0/10 completed" in err and "batch batch-1: completed, 10/10 completed" in err


def test_a_batch_that_never_finishes_stops_at_the_deadline_and_keeps_the_batch(tmp_path: Path, batch_server: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, 4)
    server = batch_server(script, hold=True)
    state = tmp_path / "batches.jsonl"

    async def go() -> None:
        client = BatchClient(server.url, state, poll_s=0.01, deadline_h=0.5 / 3600)
        await client.submit([("a", b'{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}')])
        with pytest.raises(BatchStopped) as stop:
            await client.wait("batch-1", ["a"])
        text = str(stop.value)
        assert "did not finish within --batch-deadline" in text and "rerun the same command" in text
        assert "\n" not in text
        assert client.known_ids() == {"a": "batch-1"}  # kept: the rerun waits for it

    asyncio.run(go())
    assert server.created == 1 and server.polls >= 2


def test_only_a_404_means_the_batch_is_gone(tmp_path: Path, batch_server: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, 4)
    server = batch_server(script, poll_errors=3)

    async def go() -> None:
        fast = dataclasses.replace(BatchClient(server.url, tmp_path / "s").retry, base_s=0.01)
        client = BatchClient(server.url, tmp_path / "s.jsonl", poll_s=0.01, retry=fast)
        with pytest.raises(BatchGone):
            await client.wait("batch-404", [])
        await client.submit([("a", b'{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}')])
        got = await client.wait("batch-1", ["a"])  # three 500s first: retried, not "gone"
        assert got.status == "completed" and "a" in got.answers

    asyncio.run(go())


def test_an_endpoint_without_a_batch_api_is_refused_before_the_run(tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, 3)
    server = SimulatedServer(script=script, models=TEST_MODELS).start()
    try:
        rc, err = run_quiet(_args(data, server.url, tmp_path / "run"))
    finally:
        server.stop()
    assert rc == 2, err
    assert "--batch needs OpenAI's Batch API" in one_sentence(err)
    assert not (tmp_path / "run").exists()


def test_output_lines_are_streamed_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    import needlepoint.models.batch as batch_module

    async def chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    async def collect(parts: list[bytes]) -> list[bytes]:
        return [line async for line in _lines(chunks(parts))]

    assert asyncio.run(collect([b'{"a":', b"1}\n{", b'"b":2}\n', b"tail"])) == [b'{"a":1}', b'{"b":2}', b"tail"]
    assert MAX_LINE_BYTES >= 100 << 20  # a long answer is read whole
    monkeypatch.setattr(batch_module, "MAX_LINE_BYTES", 1000)  # a line past the bound: its head, the rest skipped
    got = asyncio.run(collect([b"x" * 400] * 5 + [b"\nnext\n"]))
    assert [len(x) for x in got] == [1000, 4] and got[1] == b"next"


def test_the_batch_deadline_stops_the_run_in_one_sentence_and_the_rerun_waits_for_the_same_batch(
    tmp_path: Path, batch_server: Any
) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, N)
    server = batch_server(script, hold=True)
    out = tmp_path / "run"
    rc, err = run_quiet(_args(data, server.url, out, "--batch-deadline", "0.0003"))  # about a second
    assert rc == 3, err
    assert "did not finish within --batch-deadline 0.0003 h" in err and "rerun the same command" in err
    assert "batch batch-1: in_progress" in err  # progress lines under --no-progress
    assert not (out / "records.jsonl").exists() or not read_records(out / "records.jsonl")
    server.hold = False
    rc, err = run_quiet(_args(data, server.url, out))
    assert rc == 0, err
    assert server.created == 2 and server.uploads == 2  # batch-1 waited for, not paid again
