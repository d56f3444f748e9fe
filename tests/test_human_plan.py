"""The human baseline's plan (stratified, seeded, the same for every annotator) and its run folder
(answers checked, on disk, scored by the benchmark's own scorer as a prediction file is)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from needlepoint.benchmarks.mc_bench import demo as mc_demo
from needlepoint.benchmarks.mm_niah import demo as niah_demo
from needlepoint.core.errors import DataError
from needlepoint.core.store import read_records
from needlepoint.human.plan import make_plan
from needlepoint.human.runs import GOLD, HumanRun
from needlepoint.run.evaluate import score


@pytest.fixture(scope="module")
def mc(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    return mc_demo.write_release(tmp_path_factory.mktemp("mc"))


@pytest.fixture(scope="module")
def niah(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("niah")
    niah_demo.write_release(root, per_task=6)
    return root


def test_plan_is_seeded_stratified_and_the_same_for_everyone(mc: tuple[Path, list[dict[str, Any]]]) -> None:
    folder, _ = mc
    a = make_plan("mc_bench", folder, 8, seed=4, gold=2)
    assert a == make_plan("mc_bench", folder, 8, seed=4, gold=2)
    assert len(a.ids) == 8 and len(a.gold_ids) == 2 and not set(a.ids) & set(a.gold_ids)
    assert sorted(a.order()) == sorted(a.ids + a.gold_ids)
    assert make_plan("mc_bench", folder, 8, seed=5).ids != a.ids
    whole = make_plan("mc_bench", folder, None, seed=0)
    every = Counter(whole.strata.values())
    got = Counter(a.strata[i] for i in a.ids)
    for label, n in got.items():  # each stratum gets its share of the plan, within one sample
        assert abs(n - 8 * every[label] / len(whole.ids)) < 1 + 1e-9
    assert all("/" in s for s in whole.strata.values())
    with pytest.raises(DataError, match="holds"):
        make_plan("mc_bench", folder, 10_000, seed=0)


def test_niah_strata_are_task_range_depth(niah: Path) -> None:
    plan = make_plan("mm_niah", niah, 12, seed=1)
    tasks = {plan.strata[i].split("/")[0] for i in plan.ids}
    assert len(tasks) == 6  # 12 of 36 rows spread over every task
    assert all(len(plan.strata[i].split("/")) == 3 for i in plan.ids)


def test_run_folder_scores_as_a_prediction_file(mc: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    folder, _ = mc
    plan = make_plan("mc_bench", folder, 6, seed=2, gold=1)
    run = HumanRun.open("mc_bench", folder, "ann1", plan, tmp_path / "run")
    given: list[tuple[str, list[dict[str, Any]]]] = []
    for n, sid in enumerate(plan.ids):
        w, h = run.sample(sid).geometry.sizes[n % 2]
        answer: list[dict[str, Any]] = [{"image": n % 2, "group": 1, "bbox": [w * 0.1, h * 0.2, w * 0.5, h * 0.6]}]
        run.add(sid, answer, seconds=2.5, unsure=n == 1, note="hm" if n == 2 else "")
        given.append((sid, answer))
    run.add(plan.gold_ids[0], [], seconds=1.0)
    metrics = run.finish()
    run.close()
    # the same boxes as the authors' COCO results file
    samples = {s.id: s for s in run.dataset}
    results = [
        {"image_id": samples[sid].image_ids[b["image"]], "category_id": 1, "bbox": [x1, y1, x2 - x1, y2 - y1], "score": 1.0}
        for sid, answer in given
        for b in answer
        for x1, y1, x2, y2 in [b["bbox"]]
    ]
    file = tmp_path / "results.json"
    file.write_text(json.dumps(results))
    from needlepoint.benchmarks.mc_bench.scoring import score_results

    expected = score_results(run.dataset.truth, results, plan.ids)
    assert metrics["official"] == expected["official"]
    assert score("mc_bench", tmp_path / "run", folder)[1]["official"] == expected["official"]
    records = read_records(tmp_path / "run" / "records.jsonl")
    assert set(records) == set(plan.ids)  # gold samples are kept apart, never scored
    assert set(read_records(tmp_path / "run" / GOLD)) == {plan.gold_ids[0]}
    assert records[plan.ids[1]]["solver"]["unsure"] is True and records[plan.ids[2]]["solver"]["note"] == "hm"
    header = json.loads((tmp_path / "run" / "run.json").read_text())
    assert header["model_label"] == "human:ann1" and header["config"]["solver"] == "human"
    assert header["status"] == "complete"
    assert (tmp_path / "run" / "report" / "index.html").is_file()  # the run page, as a model run's
    from helpers.cli import run_quiet

    rc, err = run_quiet(["report", str(tmp_path / "run"), "--out", str(tmp_path / "board")])
    assert rc == 0, err
    assert "human:ann1" in (tmp_path / "board" / "leaderboard.md").read_text()
    again = HumanRun.open("mc_bench", folder, "ann1", plan, tmp_path / "run")
    assert set(again.done()) == set(plan.ids) | {plan.gold_ids[0]} and again.pending() == []
    again.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ([{"image": 0, "group": 1, "bbox": [0, 0, float("nan"), 5]}], "finite"),
        ([{"image": 0, "group": 1, "bbox": [0, 0, 5000, 5]}], "inside"),
        ([{"image": 2, "group": 1, "bbox": [0, 0, 5, 5]}], "image"),
        ([{"image": 0, "group": 12, "bbox": [0, 0, 5, 5]}], "group"),
        ([{"image": 0, "group": 1, "bbox": [0, 0, 5, 5]}] * 301, "more than"),
        ("boxes", "list"),
    ],
)
def test_malformed_answers_are_refused(mc: tuple[Path, list[dict[str, Any]]], tmp_path: Path, answer: Any, message: str) -> None:
    folder, _ = mc
    plan = make_plan("mc_bench", folder, 2, seed=2)
    run = HumanRun.open("mc_bench", folder, "ann1", plan, tmp_path / "run")
    try:
        with pytest.raises(DataError, match=message):
            run.add(plan.ids[0], answer, seconds=1.0)
        with pytest.raises(DataError, match="not in this plan"):
            run.add("nope", [], seconds=1.0)
        with pytest.raises(DataError, match="seconds"):
            run.add(plan.ids[0], [], seconds=float("inf"))
        assert run.done() == {}
    finally:
        run.close()


def test_niah_answers_of_each_type(niah: Path, tmp_path: Path) -> None:
    plan = make_plan("mm_niah", niah, None, seed=0)
    run = HumanRun.open("mm_niah", niah, "ann1", plan, tmp_path / "run")
    try:
        by_task: dict[str, Any] = {}  # the first sample of each task
        for s in run.dataset:
            by_task.setdefault(s.task, s)
        counting = by_task["counting-text"]
        rec = run.add(counting.id, counting.answer, seconds=1.0)
        assert rec["scores"]["score"] == 1.0 and rec["answer"] == json.dumps(counting.answer)
        with pytest.raises(DataError, match="counts"):
            run.add(counting.id, "three", seconds=1.0)
        option = by_task["retrieval-image"]
        rec = run.add(option.id, chr(ord("A") + option.answer).lower(), seconds=1.0)
        assert rec["answer"] == chr(ord("A") + option.answer) and rec["scores"]["score"] == 1.0
        with pytest.raises(DataError, match="options"):
            run.add(option.id, "Z", seconds=1.0)
        text = by_task["retrieval-text"]
        assert run.add(text.id, str(text.answer), seconds=1.0)["scores"]["score"] == 1.0
        with pytest.raises(DataError, match="word or phrase"):
            run.add(text.id, ["x"], seconds=1.0)
    finally:
        run.close()


def test_another_annotator_or_plan_is_refused_in_the_same_folder(mc: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    folder, _ = mc
    plan = make_plan("mc_bench", folder, 2, seed=2)
    HumanRun.open("mc_bench", folder, "ann1", plan, tmp_path / "run").close()
    with pytest.raises(DataError, match="different configuration"):
        HumanRun.open("mc_bench", folder, "ann2", plan, tmp_path / "run")
    with pytest.raises(DataError, match="annotator"):
        HumanRun.open("mc_bench", folder, "../x", plan, tmp_path / "run2")
