"""`eval --processes N`: one run answered by forked client processes, against local HTTP servers.
The run folder equals one process's to the last digit; every sample is requested once and stored
once; a resumed run requests only what is missing; Ctrl-C, a killed worker, a kill -9 of the
command, a full disk and the combinations that need one process end in one sentence (or none) with
the records kept."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, CountingServer, demo_config, one_sentence, records, run_quiet, untimed, untimed_record
from helpers.agentic import FMT, LOCALIZER, REASONER, agentic_args, scripts
from helpers.cli import ctrl_c_stops

from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.mc_bench.demo import write_release
from needlepoint.core.errors import DataError, InternalFault
from needlepoint.core.store import RunStore, read_records
from needlepoint.models.replay import ReplayModel
from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer
from needlepoint.run.evaluate import evaluate
from needlepoint.run.processes import split


def test_shares_sum_to_the_bound_and_none_is_zero() -> None:
    assert [split(10, 3, i) for i in range(3)] == [4, 3, 3]
    assert [split(64, 4, i) for i in range(4)] == [16] * 4
    assert [split(2, 3, i) for i in range(3)] == [1, 1, 1]  # never 0: a worker always has one in flight


@pytest.mark.parametrize("name", ["ref_adv_s", "mc_bench", "mm_niah"])
def test_processes_give_the_one_process_run(demo_sets: Any, tmp_path: Path, name: str) -> None:
    plans, server = demo_sets
    server.log.clear()
    one = evaluate(demo_config(plans, server, name, tmp_path / "one"))
    asked_once = len(server.log)
    server.log.clear()
    three = evaluate(demo_config(plans, server, name, tmp_path / "three", processes=3))

    stored = records(three.run_dir)
    ids = [r["id"] for r in stored]
    assert len(ids) == len(set(ids)) == len(records(one.run_dir))  # each sample stored once
    assert len(server.log) == asked_once >= len(ids)  # and requested as often as by one process
    assert {r["id"]: untimed_record(r, also=("endpoint",)) for r in stored} == {
        r["id"]: untimed_record(r, also=("endpoint",)) for r in records(one.run_dir)
    }
    assert untimed(three.metrics) == untimed(one.metrics)  # to the last digit
    exports = [p.relative_to(one.run_dir) for p in one.exports if p.suffix in (".json", ".jsonl", ".csv")]
    for rel in exports:
        assert (three.run_dir / rel).read_bytes() == (one.run_dir / rel).read_bytes(), rel

    header = json.loads((three.run_dir / "run.json").read_text())
    single = json.loads((one.run_dir / "run.json").read_text())
    assert header["hash"] == single["hash"] and header["status"] == "complete"  # processes are no identity
    assert header["config"]["processes"] == 3 and "processes" not in single["config"]
    assert header["endpoints"] == single["endpoints"]  # the workers' requests, counted in the parent
    report = (three.run_dir / "report" / "index.html").read_text()
    assert all(i in report for i in ids)


def test_a_resumed_run_requests_only_what_is_missing(demo_sets: Any, tmp_path: Path) -> None:
    plans, server = demo_sets
    asked = {}
    for processes in (1, 2):
        out = tmp_path / f"p{processes}"
        evaluate(demo_config(plans, server, "ref_adv_s", out, limit=5))
        server.log.clear()
        whole = evaluate(demo_config(plans, server, "ref_adv_s", out, processes=processes))
        ids = [r["id"] for r in records(whole.run_dir)]
        assert len(ids) == len(set(ids)) == whole.metrics["run"]["samples"] > 5
        asked[processes] = sorted(map(str, server.log))
        server.log.clear()
        evaluate(demo_config(plans, server, "ref_adv_s", out, processes=processes))
        assert server.log == []  # a complete run: nothing to do, no worker started
    assert asked[2] == asked[1]  # the five stored answers are not asked again, the rest once


def test_agentic_localizer_bounds_are_shared(serve: Any, tmp_path: Path) -> None:
    folder, _ = write_release(tmp_path / "data", pairs=8)
    bench = McBench(box_format=FMT)
    samples = bench.load(folder)
    reasoner_script, localizer_script = scripts(bench, samples)

    runs = {}
    for processes in (1, 2):
        reasoner = serve(script=reasoner_script, default=None, models=(REASONER,))
        localizer = serve(script=localizer_script, default=None, models=(LOCALIZER,))
        out = tmp_path / f"p{processes}"
        assert main_ok(agentic_args(folder, reasoner.url, localizer.url, out, "--processes", str(processes)))
        runs[processes] = (out, len(reasoner.requests), len(localizer.requests))
    (one, r1, l1), (two, r2, l2) = runs[1], runs[2]
    assert (r2, l2) == (r1, l1) and l1 > r1  # the same calls, each phrase once
    assert {r["id"]: untimed_record(r, also=("endpoint",)) for r in records(two)} == {
        r["id"]: untimed_record(r, also=("endpoint",)) for r in records(one)
    }
    m1, m2 = (json.loads((d / "metrics.json").read_text()) for d in (one, two))
    assert untimed(m2) == untimed(m1)
    endpoints = json.loads((two / "run.json").read_text())["endpoints"]
    assert sorted(e["requests"] for e in endpoints) == sorted([r1, l1])  # both clients' requests, from the workers

    # the workers share --concurrency and --localizer-concurrency: together never more in flight
    with (
        CountingServer(script=reasoner_script, default=None, models=(REASONER,), delay_s=0.2) as reasoner,
        CountingServer(script=localizer_script, default=None, models=(LOCALIZER,), delay_s=0.2) as localizer,
    ):
        bounded = ["--processes", "2", "--concurrency", "4", "--localizer-concurrency", "2"]
        assert main_ok(agentic_args(folder, reasoner.url, localizer.url, tmp_path / "bounded", *bounded))
    assert reasoner.most == 4 and localizer.most == 2
    with CountingServer(script=localizer_script, default=None, models=(LOCALIZER,), delay_s=0.05) as localizer:
        reasoner = serve(script=reasoner_script, default=None, models=(REASONER,))
        single = ["--processes", "2", "--concurrency", "4", "--localizer-concurrency", "1"]  # too few for two
        assert main_ok(agentic_args(folder, reasoner.url, localizer.url, tmp_path / "one", *single))
    assert localizer.most == 1


def main_ok(argv: list[str]) -> bool:
    rc, err = run_quiet(argv)
    assert rc == 0, err
    return True


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--processes", "0"], "--processes must be at least 1"),
        (["--processes", "2", "--max-tokens-total", "1000"], "--processes answers in several processes"),
        (["--processes", "2", "--batch"], "--processes answers in several processes"),
    ],
)
def test_refusals_are_one_sentence(demo_sets: Any, tmp_path: Path, flags: list[str], words: str) -> None:
    plans, server = demo_sets
    data, _ = plans["ref_adv_s"]
    argv = ["eval", "ref_adv_s", "--data", str(data), "--model", SIMULATED_MODEL_NAME, "--api-url", server.url]
    rc, err = run_quiet([*argv, "--out", str(tmp_path / "run"), "--box-format", "abs_xyxy", *flags])
    assert rc == 2 and words in one_sentence(err)
    assert not (tmp_path / "run" / "records.jsonl").exists()


def test_a_model_object_is_refused(demo_sets: Any, tmp_path: Path) -> None:
    plans, _ = demo_sets
    data, options = plans["ref_adv_s"]
    with pytest.raises(DataError, match="--processes sends requests from several processes"):
        evaluate(benchmark="ref_adv_s", data=data, options=options, model=ReplayModel([], "m"), processes=2, out=tmp_path / "r")
    assert not (tmp_path / "r").exists()  # refused before anything was kept


def _slow_run(tmp_path: Path, server: SimulatedServer, data: Path) -> subprocess.Popen[str]:
    argv = ["eval", "ref_adv_s", "--data", str(data), "--model", SIMULATED_MODEL_NAME, "--api-url", server.url]
    argv += ["--out", str(tmp_path / "run"), "--box-format", "abs_xyxy", "--processes", "2", "--concurrency", "2"]
    return subprocess.Popen(
        [sys.executable, "-m", "needlepoint.cli", *argv, "--no-progress"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_stops,
    )


def _workers_of(pid: int) -> list[int]:
    """The children of `pid` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie that no one reaped yet does not)."""
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for_records(path: Path, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} records in {path}")


@pytest.mark.parametrize("how", ["ctrl-c", "kill-a-worker", "kill-the-command"])
def test_interrupted_runs_keep_their_records_and_resume(demo_sets: Any, tmp_path: Path, how: str) -> None:
    plans, shared = demo_sets
    data, _ = plans["ref_adv_s"]
    with SimulatedServer(script=shared.script, default=None, delay_s=0.3) as slow:
        proc = _slow_run(tmp_path, slow, data)
        _wait_for_records(tmp_path / "run" / "records.jsonl", 2)
        workers = _workers_of(proc.pid)
        assert len(workers) == 2
        if how == "ctrl-c":
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
        elif how == "kill-the-command":  # kill -9: the workers get SIGTERM from Linux and stop
            proc.kill()
            proc.wait(timeout=60)  # (not communicate: the workers hold its pipes too)
            at_kill = len(read_records(tmp_path / "run" / "records.jsonl"))
            deadline = time.monotonic() + 30
            while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
                time.sleep(0.05)
            # at most the samples in flight were stored after it, not the rest of the workers' parts
            assert len(read_records(tmp_path / "run" / "records.jsonl")) <= at_kill + 2
            proc.communicate(timeout=60)
        else:
            os.kill(workers[0], signal.SIGKILL)
            _, err = proc.communicate(timeout=60)
            lines = [line for line in err.splitlines() if line.strip()]
            assert proc.returncode == 4 and len(lines) == 1 and "Traceback" not in err
            assert f"worker process {workers[0]} ended by signal 9" in lines[0] and "rerun the same command" in lines[0]
        assert not any(_alive(pid) for pid in workers)  # no worker outlives the command
    kept = read_records(tmp_path / "run" / "records.jsonl")
    assert len(kept) >= 2

    with SimulatedServer(script=shared.script, default=None) as fast:
        proc = _slow_run(tmp_path, fast, data)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        final = records(tmp_path / "run")
        assert len({r["id"] for r in final}) == len(final) > len(kept)  # each sample stored once
        new = [t for r in final if r["id"] not in kept for t in r["turns"] if not t.get("reused")]
        assert len(fast.log) == len(new) > 0  # only what was missing was asked (answered calls came from the cache)


def test_a_full_disk_in_a_worker_is_the_commands_sentence(
    demo_sets: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans, server = demo_sets
    appended = {"n": 0}
    real_append = RunStore.append

    def append(self: RunStore, record: Any, *line: Any) -> None:
        appended["n"] += 1  # in each forked worker, its own count
        if appended["n"] > 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.records_path))
        real_append(self, record, *line)

    monkeypatch.setattr(RunStore, "append", append)
    with pytest.raises(OSError) as raised:
        evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / "run", processes=2))
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "run" / "records.jsonl")
    assert len(read_records(tmp_path / "run" / "records.jsonl")) == 4  # two from each worker, kept

    monkeypatch.setattr(RunStore, "append", real_append)
    plans_data, _ = plans["ref_adv_s"]
    argv = ["eval", "ref_adv_s", "--data", str(plans_data), "--model", SIMULATED_MODEL_NAME, "--api-url", server.url]
    rc, err = run_quiet([*argv, "--out", str(tmp_path / "run"), "--box-format", "abs_xyxy", "--processes", "2"])
    assert rc == 0, err  # the rerun completes it
    assert len(read_records(tmp_path / "run" / "records.jsonl")) == len(records(tmp_path / "run"))


def test_a_long_error_message_does_not_hang_the_command(demo_sets: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plans, server = demo_sets

    async def fails(*_args: Any) -> None:
        raise DataError("no " + "\N{GRINNING FACE}" * 30_000)  # about 120 KB in UTF-8, more than a pipe holds

    monkeypatch.setattr("needlepoint.run.runner.run", fails)
    signal.alarm(120)  # a hang fails the test instead of the suite
    try:
        with pytest.raises(DataError) as raised:
            evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / "run", processes=2))
    finally:
        signal.alarm(0)
    assert len(str(raised.value).encode()) <= 8000  # the end of the message, cut to the pipe's measure


def test_internal_errors_stop_the_run_at_the_runs_limit(demo_sets: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plans, server = demo_sets

    def broken(*_args: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("needlepoint.benchmarks.ref_adv.benchmark.RefAdv.parse", broken)
    with SimulatedServer(script=server.script, default=None, delay_s=0.1) as slow:  # a fault every 0.1 s a worker
        with pytest.raises(InternalFault, match="samples hit a fault in needlepoint itself"):
            evaluate(demo_config(plans, slow, "ref_adv_s", tmp_path / "run", processes=3, concurrency=3))
    faults = [r for r in records(tmp_path / "run") if r["status"] == "internal_error"]
    # 5 for the whole run of 30 samples, counted over the workers (each alone would stop only at 5)
    assert 5 <= len(faults) < 11


def test_part_files_a_killed_command_left_are_folded_in_once(demo_sets: Any, tmp_path: Path) -> None:
    plans, server = demo_sets
    out = tmp_path / "run"
    evaluate(demo_config(plans, server, "ref_adv_s", out, limit=3))
    lines = (out / "records.jsonl").read_bytes().splitlines(keepends=True)
    moved = lines.pop()  # as if a worker had stored it and the command died before copying it
    (out / "records.jsonl").write_bytes(b"".join(lines))
    # a part file: a line already copied, the one not copied yet, and a worker's torn last line
    (out / "records.part-0.jsonl").write_bytes(lines[0] + moved + b'{"id": "9", "status": "do')
    assert len(read_records(out / "records.jsonl")) == 3  # a reader counts the part file's record already
    server.log.clear()
    evaluate(demo_config(plans, server, "ref_adv_s", out, limit=3, processes=2))
    assert server.log == []  # the folded record was not asked again
    assert (out / "records.jsonl").read_bytes().splitlines(keepends=True) == [*lines, moved]  # once each, no fragment
    assert not list(out.glob("records.part-*"))


def test_records_survive_a_copy_that_fails(demo_sets: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plans, server = demo_sets
    out = tmp_path / "run"

    def full(self: RunStore, data: bytes) -> None:  # the command's copy into records.jsonl (not the workers' writes)
        raise OSError(errno.ENOSPC, "No space left on device", str(self.records_path))

    monkeypatch.setattr(RunStore, "append_lines", full)
    with SimulatedServer(script=server.script, default=None, delay_s=0.05) as slow:
        with pytest.raises(OSError):
            evaluate(demo_config(plans, slow, "ref_adv_s", out, processes=2))
    kept = read_records(out / "records.jsonl")  # from the part files the failed copy left
    assert kept and list(out.glob("records.part-*")) and not (out / "records.jsonl").exists()

    monkeypatch.undo()
    done = evaluate(demo_config(plans, server, "ref_adv_s", out, processes=2))
    again = read_records(out / "records.jsonl")
    assert all(again[i] == kept[i] for i in kept)  # the stored answers were kept, not asked again
    assert len(again) == done.metrics["run"]["samples"] and not list(out.glob("records.part-*"))
    assert len(records(out)) == len(again)  # each once in records.jsonl
