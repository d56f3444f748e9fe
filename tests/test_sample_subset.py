"""Issue 42 item 8: `eval --sample N --seed S` answers a stratified random subset, the samples a
human plan of the same N and seed takes (run/strata.py), instead of only --limit's first N; the
subset is a run of its own (identity), while runs without it keep their identity; `--dry-run`
counts the same subset and, with `--price`, says what the requests cost (the repair turn's most
included)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import ref_eval_args, scripted_ref_release
from helpers.cli import one_sentence, run_quiet

from needlepoint.cli import main
from needlepoint.core.config import RunConfig, identity
from needlepoint.core.conversation import Generation
from needlepoint.core.store import read_records
from needlepoint.human.plan import load_plan_data, make_plan
from needlepoint.run.dryrun import dry_run_config
from needlepoint.run.strata import sample_subset, stratum


@pytest.fixture(scope="module")
def niah(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from needlepoint.benchmarks.mm_niah import demo as niah_demo

    root = tmp_path_factory.mktemp("niah")
    niah_demo.write_release(root / "niah", per_task=4)
    return root / "niah"


def test_the_subset_is_the_human_plans_samples_in_every_stratum(niah: Path) -> None:
    bench, dataset = load_plan_data("mm_niah", niah)
    for seed in (0, 5):
        got = sample_subset(bench, dataset, 12, seed)
        assert {s.id for s in got} == set(make_plan("mm_niah", niah, 12, seed).ids)
        assert [s.id for s in got] == [s.id for s in dataset if s.id in {g.id for g in got}]  # the release's order
    tasks = Counter(stratum(bench, dataset, s).split("/")[0] for s in sample_subset(bench, dataset, 12, 0))
    assert len(tasks) == 6 and set(tasks.values()) == {2}  # every task its share
    assert {s.id for s in sample_subset(bench, dataset, 12, 0)} != {s.id for s in sample_subset(bench, dataset, 12, 1)}


def test_the_subset_enters_the_identity_and_nothing_else_moves(niah: Path) -> None:
    def ident(**kw: Any) -> dict[str, Any]:
        config = RunConfig(benchmark="mm_niah", data=niah, model="m", api_urls=[], **kw)
        return identity(config, {}, Generation(), "fp")

    plain = ident()
    assert "sample" not in plain  # a run without --sample keeps the identity it always had (it resumes)
    assert plain == ident(sample_seed=7)
    assert ident(sample=12)["sample"] == {"size": 12, "seed": 0}
    assert ident(sample=12, sample_seed=1) != ident(sample=12) != ident(sample=13)
    assert {k: v for k, v in ident(sample=12).items() if k != "sample"} == plain
    assert RunConfig(benchmark="mm_niah", data=niah, model="m", api_urls=[], sample=3, sample_seed=2).public()["sample"] == 3


def test_the_dry_run_counts_the_subset(niah: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bodies.jsonl"
    argv = ["eval", "mm_niah", "--data", str(niah), "--model", "m", "--out", str(tmp_path / "run"), "--dry-run"]
    assert main([*argv, "--sample", "6", "--seed", "4", "--dry-run-requests", "6", "--dry-run-file", str(out), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["samples"] == 6
    sent = {json.loads(line)["sample"] for line in out.read_text().splitlines()}
    assert sent == set(make_plan("mm_niah", niah, 6, 4).ids)
    # --sample-seed picks another subset without changing the seed the requests carry
    assert main([*argv, "--sample", "6", "--seed", "4", "--sample-seed", "9", "--dry-run-file", str(out)]) == 0
    capsys.readouterr()
    assert {json.loads(line)["body"].get("seed") for line in out.read_text().splitlines()} == {4}
    code, err = run_quiet([*argv, "--sample", "0"])
    assert code == 2 and one_sentence(err) and "--sample" in err
    code, err = run_quiet([*argv, "--sample", "999"])
    assert code == 2 and one_sentence(err) and "--sample 999" in err
    code, err = run_quiet([*argv, "--sample-seed", "3"])
    assert code == 2 and one_sentence(err) and "--sample N" in err


def test_the_dry_run_prices_the_requests_with_the_repair_turn(niah: Path, tmp_path: Path) -> None:
    from needlepoint.benchmarks.mc_bench import demo as mc_demo

    mc, _ = mc_demo.write_release(tmp_path / "mc")
    config = RunConfig(
        benchmark="mc_bench",
        data=mc,
        model="Qwen/Qwen2.5-VL-7B-Instruct",
        api_urls=[],
        out=tmp_path / "run",
        price="2,8",
        options={"box_format": "abs_xyxy"},
    )
    summary = dry_run_config(config, write_count=0)
    cost = summary.to_dict()["cost"]
    reqs = summary.requests
    assert all(r.prompt_tokens is not None and r.max_tokens for r in reqs)
    prompts = sum(r.prompt_tokens or 0 for r in reqs)
    replies = sum(r.max_tokens or 0 for r in reqs)
    assert cost["prompts"] == pytest.approx(prompts * 2 / 1e6)
    assert cost["first_turns_at_most"] == pytest.approx((prompts * 2 + replies * 8) / 1e6)
    repair = [r for r in reqs if r.repair_tokens]
    assert repair  # MC-Bench asks again once when the reply cannot be read
    want = sum(((r.prompt_tokens or 0) + r.repair_tokens) * 2 + (r.max_tokens or 0) * 8 for r in repair) / 1e6
    assert cost["repair_turns_add_at_most"] == pytest.approx(want)
    assert cost["at_most"] == pytest.approx(cost["first_turns_at_most"] + want)
    line = next(x for x in summary.lines() if x.startswith("cost at 2/8 per million"))
    assert "a repair turn on every sample adds at most $" in line and "in all" in line
    assert "cost" not in dry_run_config(RunConfig(benchmark="mm_niah", data=niah, model="m", api_urls=[])).to_dict()


def test_the_dry_run_cost_line_on_the_command_line(niah: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "mm_niah", "--data", str(niah), "--model", "m", "--out", str(tmp_path / "run"), "--dry-run"]
    assert main([*argv, "--price", "0.15,0.60", "--dry-run-requests", "0"]) == 0
    printed = capsys.readouterr().out
    (line,) = [x for x in printed.splitlines() if x.startswith("cost at 0.15/0.6 per million")]
    assert "prompts at least $" in line and "plus the images' prompt tokens" in line  # image tokens unknown for "m"
    assert main([*argv, "--dry-run-requests", "0"]) == 0
    assert "cost at" not in capsys.readouterr().out


def test_eval_answers_the_subset_as_a_run_of_its_own(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=12)
    server = serve(script=script, default=None)
    out = tmp_path / "runs" / "sampled"
    assert main(ref_eval_args(data, server.url, out, "--sample", "4", "--seed", "5")) == 0
    capsys.readouterr()
    answered = set(read_records(out / "records.jsonl"))
    assert answered == set(make_plan("ref_adv_s", data, 4, 5).ids)
    assert json.loads((out / "metrics.json").read_text())["run"]["samples"] == 4
    header = json.loads((out / "run.json").read_text())
    assert header["identity"]["sample"] == {"size": 4, "seed": 5} and header["config"]["sample"] == 4
    # the whole set is another run: the same --out refuses it rather than mixing the two
    assert main(ref_eval_args(data, server.url, out)) == 2


def test_the_dry_run_ceiling_is_what_the_requests_send_times_the_repeats(
    niah: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replies' ceiling is the body's own: an --extra-body max_tokens (or max_completion_tokens)
    over --max-tokens, times the n choices it asks for; --repeats K asks every request K times."""
    argv = ["eval", "mm_niah", "--data", str(niah), "--model", "m", "--dry-run", "--dry-run-requests", "0", "--json"]
    argv += ["--price", "1000,1000", "--max-tokens", "100"]

    def cost(out: str, *extra: str) -> dict[str, Any]:
        assert main([*argv, "--out", str(tmp_path / out), *extra]) == 0
        got: dict[str, Any] = json.loads(capsys.readouterr().out)["cost"]
        return got

    plain = cost("a")
    wider = cost("b", "--extra-body", '{"max_tokens": 100000, "n": 10}')
    assert wider["replies_at_most"] == pytest.approx(plain["replies_at_most"] * 10_000)
    assert wider["prompts"] == pytest.approx(plain["prompts"])
    newer = cost("c", "--extra-body", '{"max_completion_tokens": 300}')
    assert newer["replies_at_most"] == pytest.approx(plain["replies_at_most"] * 3)
    repeated = cost("d", "--repeats", "3", "--temperature", "0.7")
    assert repeated["repeats"] == 3
    for key in ("prompts", "replies_at_most", "at_most"):
        assert repeated[key] == pytest.approx(plain[key] * 3)
