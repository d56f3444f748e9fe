"""Interrupting a run (SIGKILL, torn last line) and rerunning it: nothing lost, nothing asked twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, prompt_key, ref_eval_args, report_blob, run_cli

from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.benchmarks.ref_adv.demo import make_rows, write_release
from needlepoint.cli import main
from needlepoint.core.store import read_records

N = 40


def _eval_args(data: Path, url: str, out: Path, box_format: str = "abs_xyxy") -> list[str]:
    return ref_eval_args(data, url, out, "--concurrency", "4", "--no-report", model="sim-model", box_format=box_format)


def _complete_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("needlepoint: error:")
    return lines[0]


def _run_until(args: list[str], records: Path, lines: int) -> subprocess.Popen[str]:
    """`needlepoint` with `args` in a process of its own, once its records file holds `lines` whole
    lines (the process still running)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "needlepoint.cli", *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while _complete_lines(records) < lines:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the run ended or stalled before {lines} records: {proc.communicate()}")
        time.sleep(0.01)
    return proc


@pytest.fixture
def killed_run(serve: Any, tmp_path: Path) -> dict[str, Any]:
    """A run killed with SIGKILL about half way, with a torn half line appended to its records."""
    data = write_release(tmp_path / "data", make_rows(N))
    samples = RefAdv(box_format="abs_xyxy").load(data)
    keys = {s.id: prompt_key(s) for s in samples}
    server = serve(delay_s=0.15)
    out = tmp_path / "run"
    records = out / "records.jsonl"
    proc = _run_until(_eval_args(data, server.url, out), records, N // 2)
    try:
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    finished = set(read_records(records))
    assert N // 2 <= len(finished) < N
    unfinished = sorted(set(keys) - finished, key=int)
    with records.open("ab") as fh:
        fh.write(b'{"id": "' + unfinished[-1].encode() + b'", "status": "done", "tur')
    return {"data": data, "server": server, "out": out, "keys": keys, "finished": finished, "log_at_kill": len(server.log)}


def test_resume_after_kill(killed_run: dict[str, Any]) -> None:
    data, server, out, keys = killed_run["data"], killed_run["server"], killed_run["out"], killed_run["keys"]
    finished = killed_run["finished"]

    rerun = run_cli(_eval_args(data, server.url, out))
    assert rerun.returncode == 0, rerun.stderr
    assert "Traceback" not in rerun.stderr

    # every sample exactly once, every line whole
    lines = (out / "records.jsonl").read_bytes().splitlines(keepends=True)
    assert all(line.endswith(b"\n") for line in lines)
    ids = [json.loads(line)["id"] for line in lines]
    assert Counter(ids) == Counter(list(keys))
    assert set(read_records(out / "records.jsonl")) == set(keys)

    # no sample finished before the kill was asked again; all others were
    requests = Counter(server.log)
    for sample_id in finished:
        assert requests[(keys[sample_id], 0)] == 1, f"sample {sample_id} was requested again"
    asked_after = {k for k, _ in server.log[killed_run["log_at_kill"] :]}
    assert asked_after == {keys[i] for i in set(keys) - finished}

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n"] == N
    assert metrics["run"]["answered"] == N
    assert json.loads((out / "run.json").read_text())["status"] == "complete"


def _finished_run(serve: Any, tmp_path: Path, n: int = 6, seed: int = 7) -> tuple[Path, Any, Path]:
    """A complete run made in this process: its data, server and run folder."""
    data = write_release(tmp_path / f"data{seed}", make_rows(n, seed=seed))
    server = serve()
    out = tmp_path / "run"
    assert main(_eval_args(data, server.url, out)) == 0
    return data, server, out


def test_changed_configuration_is_refused(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, server, out = _finished_run(serve, tmp_path)
    capsys.readouterr()
    before = len(server.log)
    records_before = (out / "records.jsonl").read_bytes()
    header_before = (out / "run.json").read_bytes()

    refused = run_cli(_eval_args(data, server.url, out, box_format="norm_1000_xyxy"))
    assert refused.returncode == 2
    line = _one_error_line(refused.stderr)
    assert "--fresh" in line
    assert "box_format" in line
    assert refused.stdout == ""
    assert len(server.log) == before
    assert (out / "records.jsonl").read_bytes() == records_before
    assert (out / "run.json").read_bytes() == header_before


def test_fresh_as_advised_does_not_refuse_again(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Following the refusal's advice (`--fresh`) starts a new run in the folder named, with none of
    the old answers; the old run is moved aside, not deleted."""
    data, server, out = _finished_run(serve, tmp_path)
    old_records = (out / "records.jsonl").read_bytes()
    capsys.readouterr()
    refused = main(_eval_args(data, server.url, out, box_format="norm_1000_xyxy"))
    assert refused == 2 and "--fresh" in _one_error_line(capsys.readouterr().err)
    before = len(server.log)

    code = main([*_eval_args(data, server.url, out, box_format="norm_1000_xyxy"), "--fresh"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Traceback" not in err
    assert f"run folder: {out}" in err.splitlines()
    header = json.loads((out / "run.json").read_text())
    assert header["identity"]["option.box_format"] == "norm_1000_xyxy" and header["status"] == "complete"
    assert len(read_records(out / "records.jsonl")) == 6
    assert len(server.log) - before == 6, "every sample is asked again: no answer of the old configuration is reused"
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    assert (aside / "records.jsonl").read_bytes() == old_records
    assert str(aside) in err


def test_other_data_in_the_same_run_folder_is_refused(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two releases of the same length but different content are different datasets: never mixed."""
    _, server, out = _finished_run(serve, tmp_path, seed=7)
    second = write_release(tmp_path / "second", make_rows(6, seed=8))
    capsys.readouterr()
    records_before = (out / "records.jsonl").read_bytes()
    before = len(server.log)

    code = main(_eval_args(second, server.url, out))
    err = capsys.readouterr().err
    assert code == 2, "answers to one dataset were reused for another"
    line = _one_error_line(err)
    assert "dataset" in line and "--fresh" in line
    assert len(server.log) == before
    assert (out / "records.jsonl").read_bytes() == records_before


def test_moved_data_resumes(serve: Any, tmp_path: Path) -> None:
    """The same release in another place is the same dataset: a rerun resumes and asks nothing."""
    _, server, out = _finished_run(serve, tmp_path)
    moved = write_release(tmp_path / "moved", make_rows(6))
    before = len(server.log)
    assert main(_eval_args(moved, server.url, out)) == 0
    assert len(server.log) == before


def test_resumed_run_reuses_every_thumbnail(serve: Any, tmp_path: Path) -> None:
    """A failed request retried later: the rerun's report reuses every thumbnail made before (same
    file, untouched: a thumbnail shows the image alone), and the page shows the new answer's box."""
    data = write_release(tmp_path / "data", make_rows(6, seed=3))
    samples = RefAdv(box_format="abs_xyxy").load(data)
    failing = prompt_key(samples[2])
    server = serve(faults={failing: ["500"]})
    out = tmp_path / "run"
    args = [a for a in _eval_args(data, server.url, out) if a != "--no-report"]
    assert main(args) == 3  # one sample failed
    thumbs = out / "report" / "thumbs"
    first = {p.name: p.stat().st_mtime_ns for p in thumbs.glob("*.jpg")}
    assert len(first) == 6
    assert read_records(out / "records.jsonl")["2"]["status"] == "backend_error"

    assert main([*args, "--retry-failed"]) == 0
    answer = read_records(out / "records.jsonl")["2"]
    assert answer["status"] == "done"
    assert {p.name: p.stat().st_mtime_ns for p in thumbs.glob("*.jpg")} == first  # reused, not redrawn
    page = (out / "report" / "index.html").read_text()
    assert all(f"thumbs/{n}" in page for n in first)
    card = next(it for it in report_blob(out / "report" / "index.html")["items"] if it["id"] == "2")
    assert [[round(v, 1) for v in answer["answer"][0]]] == [b[:4] for b in card["im"][0][4] if b[5]]


def test_fresh_does_not_move_a_run_that_is_still_answering(serve: Any, tmp_path: Path) -> None:
    """`--fresh` on the folder of a run still answering in another process is refused in one
    sentence: moved aside under it, that run went on writing by its paths into the new run's folder
    (its run.json over the new one's, its metrics from the other configuration's answers)."""
    data = write_release(tmp_path / "data", make_rows(N))
    tried = threading.Event()  # the answers after the first two wait until --fresh was tried

    async def hold(_key: str) -> None:
        while len(server.log) > 2 and not tried.is_set():
            await asyncio.sleep(0.01)

    server = serve(before_answer=hold)
    out = tmp_path / "run"
    records = out / "records.jsonl"
    proc = _run_until(_eval_args(data, server.url, out), records, 2)
    try:
        fresh = run_cli([*_eval_args(data, server.url, out, box_format="norm_1000_xyxy"), "--fresh"])
        assert proc.poll() is None, "the first run ended before --fresh was tried: the test proves nothing"
    finally:
        tried.set()
        _, first_err = proc.communicate(timeout=120)
    assert fresh.returncode == 2
    assert "in use by another needlepoint process" in _one_error_line(fresh.stderr)
    assert proc.returncode == 0, first_err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    header = json.loads((out / "run.json").read_text())
    assert header["identity"]["option.box_format"] == "abs_xyxy" and header["status"] == "complete"
    assert len(read_records(records)) == N


def test_an_out_folder_of_other_files_or_inside_the_data_is_refused(serve: Any, tmp_path: Path) -> None:
    """`--out` at a folder that holds no run but other files (a run writes its report's thumbnails,
    metrics and page over them) or at the data folder itself (its records and prediction files
    would be read as data by the next run) is refused in one sentence before anything is asked;
    the files stay as they were. An empty folder, one that holds only a dry run's estimate, and
    one below the data folder take the run."""
    data = write_release(tmp_path / "data", make_rows(6))
    server = serve()
    mine = tmp_path / "mine"
    (mine / "report" / "thumbs").mkdir(parents=True)
    (mine / "report" / "thumbs" / "photo.jpg").write_bytes(b"\xff\xd8 mine")
    (mine / "metrics.json").write_text('{"mine": 1}')
    for out, words in ((mine, "holds files but no run (metrics.json, report)"), (data, "is the data folder")):
        refused = run_cli(_eval_args(data, server.url, out))
        assert refused.returncode == 2 and words in _one_error_line(refused.stderr)
    assert len(server.log) == 0
    assert (mine / "report" / "thumbs" / "photo.jpg").read_bytes() == b"\xff\xd8 mine"
    assert (mine / "metrics.json").read_text() == '{"mine": 1}' and sorted(os.listdir(mine)) == ["metrics.json", "report"]
    assert sorted(p.name for p in data.rglob("*")) == ["data", "train-00000-of-00001.parquet"]
    empty = tmp_path / "empty"
    empty.mkdir()
    estimated = tmp_path / "estimated"
    dry = run_cli([*_eval_args(data, server.url, estimated), "--dry-run", "--dry-run-requests", "0"])
    assert dry.returncode == 0 and sorted(os.listdir(estimated)) == ["dry-run.json"], dry.stderr
    for out in (empty, estimated, data / "runs" / "one"):
        ran = run_cli(_eval_args(data, server.url, out))
        assert ran.returncode == 0, ran.stderr
        assert len(read_records(out / "records.jsonl")) == 6
