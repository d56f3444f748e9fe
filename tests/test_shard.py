"""Sharded runs (`eval --shard I/N`) and `merge`: the merged folder equals the unsharded run."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import demo_config, run_cli, untimed, untimed_record

from needlepoint.cli import main
from needlepoint.contract.registry import make
from needlepoint.core.config import RunConfig
from needlepoint.core.errors import DataError
from needlepoint.core.shard import Shard, assign, parse_shard, select
from needlepoint.core.store import read_records
from needlepoint.models.simulated import SIMULATED_MODEL_NAME
from needlepoint.run.evaluate import evaluate
from needlepoint.run.merge import merge


def test_assignment_ignores_order_and_balances_cost() -> None:
    rng = random.Random(3)
    items = [(f"doc-{i}", float(rng.choice([1_000, 5_000, 30_000, 100_000]))) for i in range(200)]
    owner = assign(items, 4)
    shuffled = items[:]
    rng.shuffle(shuffled)
    assert assign(shuffled, 4) == owner  # the data's order does not matter
    assert set(owner) == {i for i, _ in items} and set(owner.values()) == {1, 2, 3, 4}
    loads = [sum(c for i, c in items if owner[i] == k) for k in range(1, 5)]
    assert max(loads) - min(loads) <= 100_000  # within one document of each other
    counts = [list(owner.values()).count(k) for k in range(1, 5)]
    assert max(counts) > min(counts) + 5  # balanced by cost, not by count
    even = assign([(f"r{i}", 1.0) for i in range(10)], 3)
    assert sorted(list(even.values()).count(k) for k in (1, 2, 3)) == [3, 3, 4]


def test_select_keeps_data_order_and_partitions() -> None:
    class S:
        def __init__(self, i: str) -> None:
            self.id = i

    samples = [S(f"s{i}") for i in range(23)]
    parts = [select(samples, Shard(k, 3), lambda s: 1.0) for k in (1, 2, 3)]
    assert sorted(s.id for p in parts for s in p) == sorted(s.id for s in samples)
    for p in parts:
        assert [samples.index(s) for s in p] == sorted(samples.index(s) for s in p)


@pytest.mark.parametrize("text", ["0/4", "5/4", "1-4", "a/b", "1/0"])
def test_bad_shard_is_one_sentence(text: str) -> None:
    with pytest.raises(DataError, match="--shard"):
        parse_shard(text)


@pytest.mark.parametrize("name", ["ref_adv_s", "mc_bench", "mm_niah"])
def test_merged_shards_equal_the_unsharded_run(demo_sets: Any, tmp_path: Path, name: str) -> None:
    plans, server = demo_sets
    full = evaluate(demo_config(plans, server, name, tmp_path / "full"))
    shards = [evaluate(demo_config(plans, server, name, tmp_path / f"s{k}", shard=f"{k}/3")).run_dir for k in (3, 1, 2)]
    sizes = [json.loads((d / "metrics.json").read_text())["run"]["samples"] for d in shards]
    assert sum(sizes) == full.metrics["run"]["samples"] and min(sizes) > 0
    merged = merge(shards, tmp_path / "merged")

    full_metrics = json.loads((tmp_path / "full" / "metrics.json").read_text())
    full_untimed = untimed(full_metrics)
    assert untimed(json.loads((tmp_path / "merged" / "metrics.json").read_text())) == full_untimed  # to the last digit
    assert untimed(merged.metrics) == full_untimed
    a = [json.loads(line) for line in (tmp_path / "full" / "records.jsonl").read_text().splitlines()]
    b = [json.loads(line) for line in (tmp_path / "merged" / "records.jsonl").read_text().splitlines()]
    assert len(b) == len(a) and {r["id"]: untimed_record(r) for r in b} == {r["id"]: untimed_record(r) for r in a}
    data, options = plans[name]
    assert [r["id"] for r in b] == [s.id for s in make(name, **options).load(data)]  # in the data's order
    exports = [p.relative_to(full.run_dir) for p in full.exports if p.suffix in (".json", ".jsonl", ".csv")]
    assert exports, full.exports
    for rel in exports:
        assert (tmp_path / "merged" / rel).read_bytes() == (full.run_dir / rel).read_bytes(), rel

    header = json.loads((tmp_path / "merged" / "run.json").read_text())
    unsharded = json.loads((tmp_path / "full" / "run.json").read_text())
    assert header["hash"] == unsharded["hash"] and header["identity"] == unsharded["identity"]
    assert header["status"] == "complete"
    assert sorted(m["shard"] for m in header["merged_from"]) == ["1/3", "2/3", "3/3"]
    assert header["endpoints"] == unsharded["endpoints"]  # requests per endpoint, summed over the shards
    assert unsharded["endpoints"][0]["requests"] >= len(b)
    report = (tmp_path / "merged" / "report" / "index.html").read_text()
    assert all(r["id"] in report for r in b) and "merged from shards 1/3, 2/3, 3/3" in report
    assert "Requests per endpoint" in report

    # The unsharded command pointed at the merged folder resumes it and finds nothing to do.
    server.log.clear()
    again = evaluate(demo_config(plans, server, name, tmp_path / "merged"))
    assert server.log == [] and untimed(again.metrics) == full_untimed


def test_merge_cli_score_and_report_accept_the_merged_folder(demo_sets: Any, tmp_path: Path) -> None:
    plans, server = demo_sets
    data, _ = plans["ref_adv_s"]
    base = [
        "eval",
        "ref_adv_s",
        "--data",
        str(data),
        "--model",
        SIMULATED_MODEL_NAME,
        "--api-url",
        server.url,
        "--box-format",
        "abs_xyxy",
        "--no-progress",
        "--no-report",
    ]
    for k in (1, 2):
        assert main([*base, "--shard", f"{k}/2", "--out", str(tmp_path / f"s{k}")]) == 0
    assert main([*base, "--out", str(tmp_path / "full")]) == 0
    done = run_cli(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"), "--json"])
    assert done.returncode == 0, done.stderr
    assert untimed(json.loads(done.stdout)) == untimed(json.loads((tmp_path / "full" / "metrics.json").read_text()))
    scored = run_cli(["score", "ref_adv_s", "--predictions", str(tmp_path / "m"), "--json"])
    full_scored = run_cli(["score", "ref_adv_s", "--predictions", str(tmp_path / "full"), "--json"])
    assert scored.returncode == 0 and json.loads(scored.stdout) == json.loads(full_scored.stdout)
    board = run_cli(["report", str(tmp_path / "m"), "--out", str(tmp_path / "board")])
    assert board.returncode == 0, board.stderr
    assert SIMULATED_MODEL_NAME in (tmp_path / "board" / "leaderboard.md").read_text()
    # A folder of shards and their merge: the report shows the merged run, and says why not the shards.
    whole = run_cli(["report", str(tmp_path), "--out", str(tmp_path / "board2")])
    assert whole.returncode == 0, whole.stderr
    assert "s1: shard 1/2 of a run, not the whole" in whole.stderr and "s2: shard 2/2" in whole.stderr


def _one_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_missing_and_duplicated_shards_are_named(demo_sets: Any, tmp_path: Path) -> None:
    plans, server = demo_sets
    dirs = {k: evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / f"s{k}", shard=f"{k}/4")).run_dir for k in (1, 2)}
    copy = tmp_path / "s2-again"
    copy.mkdir()
    for f in ("run.json", "records.jsonl"):
        (copy / f).write_bytes((dirs[2] / f).read_bytes())
    done = run_cli(["merge", str(dirs[1]), str(dirs[2]), str(copy), "--out", str(tmp_path / "m")])
    assert done.returncode == 2
    line = _one_error(done.stderr)
    assert "shards 3/4 and 4/4 are missing" in line and "shard 2/4" in line and "given twice" in line
    assert str(copy) in line and not (tmp_path / "m").exists()

    # --allow-partial merges what exists; the merged run says it is incomplete.
    result = merge([dirs[1], dirs[2]], tmp_path / "partial", allow_partial=True)
    answered = sum(len(read_records(d / "records.jsonl")) for d in dirs.values())
    assert result.metrics["run"]["answered"] == answered < result.metrics["run"]["samples"]
    assert json.loads((tmp_path / "partial" / "run.json").read_text())["status"] == "incomplete"


def test_shards_of_different_runs_are_refused(demo_sets: Any, tmp_path: Path) -> None:
    plans, server = demo_sets
    a = evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / "a", shard="1/2")).run_dir
    b = evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / "b", shard="2/2", generation={"max_tokens": 77})).run_dir
    with pytest.raises(DataError, match=r"shards of different runs \(generation differ\)"):
        merge([a, b], tmp_path / "m")
    c = evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / "c", shard="2/3")).run_dir
    with pytest.raises(DataError, match="one N"):
        merge([a, c], tmp_path / "m")
    full = evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / "full")).run_dir
    with pytest.raises(DataError, match="not a shard run"):
        merge([a, full], tmp_path / "m")


def test_a_shard_is_an_ordinary_run(demo_sets: Any, tmp_path: Path, serve: Any) -> None:
    """Resume, --retry-failed and identity hold for a shard; its identity is the run's plus I/N."""
    plans, server = demo_sets
    data, options = plans["ref_adv_s"]
    flaky = serve(default=None, script=server.script)
    shard_ids = [s.id for s in select(make("ref_adv_s", **options).load(data), Shard(2, 3), lambda s: 1.0)]
    cfg = dict(
        benchmark="ref_adv_s",
        data=data,
        model=SIMULATED_MODEL_NAME,
        options=options,
        out=tmp_path / "s2",
        show_progress=False,
        concurrency=2,
        max_retries=0,
        shard="2/3",
    )
    first = evaluate(RunConfig(api_urls=[flaky.url], **cfg))
    assert first.metrics["run"]["samples"] == len(shard_ids)
    assert set(read_records(tmp_path / "s2" / "records.jsonl")) == set(shard_ids)
    header = json.loads((tmp_path / "s2" / "run.json").read_text())
    assert header["identity"]["shard"] == "2/3" and header["config"]["shard"] == "2/3"
    # Another shard into the same folder is another run: refused, answers not mixed.
    with pytest.raises(DataError, match='different configuration.*shard "2/3" -> "1/3"'):
        evaluate(RunConfig(api_urls=[flaky.url], **{**cfg, "shard": "1/3"}))
    # Fail one sample's request, then --retry-failed asks for that one only.
    target = shard_ids[0]
    records = read_records(tmp_path / "s2" / "records.jsonl")
    failed = {**records[target], "status": "backend_error", "error": "simulated"}
    with (tmp_path / "s2" / "records.jsonl").open("a") as fh:
        fh.write(json.dumps(failed) + "\n")
    flaky.log.clear()
    evaluate(RunConfig(api_urls=[flaky.url], retry_failed=True, **cfg))
    assert len(flaky.log) == 1
    flaky.log.clear()
    evaluate(RunConfig(api_urls=[flaky.url], **cfg))  # resume: nothing left
    assert flaky.log == []


def test_bad_shard_flag_exits_2(tmp_path: Path) -> None:
    done = run_cli(
        ["eval", "ref_adv_s", "--data", str(tmp_path), "--model", "m", "--api-url", "http://127.0.0.1:9/v1", "--shard", "5/4"]
    )
    assert done.returncode == 2 and re.search(r"--shard 5/4 is out of range", _one_error(done.stderr))


def test_unanswered_samples_and_foreign_answers_are_refused(demo_sets: Any, tmp_path: Path) -> None:
    plans, server = demo_sets
    dirs = [evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / f"s{k}", shard=f"{k}/2")).run_dir for k in (1, 2)]
    records = dirs[1] / "records.jsonl"
    lines = records.read_text().splitlines(keepends=True)
    records.write_text("".join(lines[:-2]))  # shard 2's job died before its last two answers
    with pytest.raises(DataError, match=r"shard 2/2 \(.*s2: 2 left\) has unanswered samples; rerun the shard's command"):
        merge(dirs, tmp_path / "m")
    partial = merge(dirs, tmp_path / "m", allow_partial=True)
    assert partial.metrics["run"]["answered"] == partial.metrics["run"]["samples"] - 2
    # Rerunning shard 2's command resumes it; merging again into the same folder completes the run.
    evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / "s2", shard="2/2"))
    whole = merge(dirs, tmp_path / "m")
    assert whole.metrics["run"]["answered"] == whole.metrics["run"]["samples"]
    assert json.loads((tmp_path / "m" / "run.json").read_text())["status"] == "complete"

    # A shard folder holding answers of another shard's samples (records copied by hand) is refused.
    foreign = (dirs[0] / "records.jsonl").read_text().splitlines(keepends=True)[0]
    with (dirs[1] / "records.jsonl").open("a") as fh:
        fh.write(foreign)
    with pytest.raises(DataError, match="outside shard 2/2"):
        merge(dirs, tmp_path / "m2")


def test_limit_requests_the_first_samples_of_the_shard(demo_sets: Any, tmp_path: Path) -> None:
    """The partition is of the whole dataset: --limit only bounds what a shard requests, so a
    limited shard resumed without the limit completes the same shard."""
    plans, server = demo_sets
    data, options = plans["ref_adv_s"]
    mine = [s.id for s in select(make("ref_adv_s", **options).load(data), Shard(1, 2), lambda s: 1.0)]
    first = evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / "s1", shard="1/2", limit=4))
    assert set(read_records(tmp_path / "s1" / "records.jsonl")) == set(mine[:4])
    assert first.metrics["run"]["samples"] == len(mine)
    evaluate(demo_config(plans, server, "ref_adv_s", tmp_path / "s1", shard="1/2"))
    assert set(read_records(tmp_path / "s1" / "records.jsonl")) == set(mine)
