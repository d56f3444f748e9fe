"""Agreement between annotators (hand-computed kappa, box F1, IoU and exact agreement) and the
human rows of `needlepoint report`: one row per annotator, their mean, Table 9's per-annotator
board, the agreement board and the papers' human rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import run_quiet

from needlepoint.contract.boards import Run
from needlepoint.core.records import Record
from needlepoint.report.agreement import box_f1, cohen_kappa, human_boards, matched_boxes, pair_agreement, seconds_per_sample


def rec(sid: str, answer: Any, seconds: float = 10.0, **facts: Any) -> Record:
    return {"id": sid, "answer": answer, "solver": {"annotator": "x", "seconds": seconds, **facts}}


def mc(*boxes: tuple[int, list[float]]) -> list[dict[str, Any]]:
    return [{"image": i, "group": 1, "bbox": b} for i, b in boxes]


def test_kappa_by_hand() -> None:
    # observed 4/6; both say "present" for half the items: chance 0.5; kappa (2/3 - 1/2) / (1/2) = 1/3
    a = [True, False, False, False, True, True]
    b = [True, True, False, False, False, True]
    assert cohen_kappa(a, b) == pytest.approx(1 / 3)
    assert cohen_kappa([True, True], [True, True]) is None  # one label everywhere: undefined, not 1.0
    assert cohen_kappa([False, False, False], [False, False, False]) is None
    assert cohen_kappa([], []) is None
    # observed 2/4; pa = 3/4, pb = 1/4: chance 3/16 + 3/16 = 3/8; kappa (1/2 - 3/8) / (5/8) = 0.2
    assert cohen_kappa([True, True, True, False], [True, False, False, False]) == pytest.approx(0.2)


def test_box_f1_by_hand() -> None:
    # one B box overlaps two A boxes: it is matched once
    assert matched_boxes([[0, 0, 10, 10], [0, 0, 10, 9]], [[0, 0, 10, 10]]) == 1
    # IoU 40/60 = 0.67 matches; 40/100 does not
    assert matched_boxes([[0, 0, 10, 10]], [[0, 0, 10, 4]]) == 0
    assert matched_boxes([[0, 0, 10, 6]], [[0, 2, 10, 6]]) == 1
    assert box_f1([([[0, 0, 10, 10]], [[0, 0, 10, 10], [50, 50, 60, 60]]), ([], [[0, 0, 5, 5]])]) == pytest.approx(2 / 4)
    assert box_f1([([], [])]) is None


def test_box_matching_is_maximum_not_greedy() -> None:
    # a1-b1 has the highest IoU (0.82); taking it first leaves a2-b2 at 0.25 (greedy: 1 pair), while
    # a1-b2 (0.54) and a2-b1 (0.67) both qualify: the maximum one-to-one matching has 2
    a = [[0, 0, 10, 10], [3, 0, 13, 10]]
    b = [[1, 0, 11, 10], [-3, 0, 7, 10]]
    assert matched_boxes(a, b) == 2
    assert box_f1([(a, b)]) == 1.0


def test_agreement_counts_groups_after_regrouping() -> None:
    """An annotator who put two targets in one group agrees on one box of two; one who only
    numbered the groups the other way round agrees on both (42.5: groups were ignored)."""
    x, y = [0.0, 0, 10, 10], [50.0, 50, 60, 60]
    ann = {"s": rec("s", [{"image": 0, "group": 1, "bbox": x}, {"image": 1, "group": 2, "bbox": y}])}
    merged = {"s": rec("s", [{"image": 0, "group": 1, "bbox": x}, {"image": 1, "group": 1, "bbox": y}])}
    swapped = {"s": rec("s", [{"image": 0, "group": 2, "bbox": x}, {"image": 1, "group": 1, "bbox": y}])}
    assert pair_agreement("mc_bench", ann, merged).measures["box F1@0.5"] == pytest.approx(0.5)
    assert pair_agreement("mc_bench", ann, swapped).measures["box F1@0.5"] == 1.0
    # both mark a target in every image: kappa has nothing to measure
    assert pair_agreement("mc_bench", ann, swapped).measures["image kappa"] is None


def test_mc_bench_pair() -> None:
    # images (A, B): s1 (T, T) (F, T); s2 (F, F) (F, F); s3 (T, F) (T, T): kappa 1/3 as above.
    # boxes: s1 A 2 / B 3, one matched (IoU 100/110); s3 A 2 / B 1, one matched (IoU 0.8): F1 2*2/8
    a = {
        "s1": rec("s1", mc((0, [0, 0, 10, 10]), (0, [20, 20, 30, 30]))),
        "s2": rec("s2", []),
        "s3": rec("s3", mc((0, [0, 0, 10, 10]), (1, [100, 100, 200, 200]))),
        "s4": rec("s4", mc((0, [0, 0, 10, 10])), skipped=True),
        "only-a": rec("only-a", []),
    }
    b = {
        "s1": rec("s1", mc((0, [0, 0, 10, 11]), (0, [50, 50, 60, 60]), (1, [0, 0, 5, 5]))),
        "s2": rec("s2", []),
        "s3": rec("s3", mc((1, [100, 100, 200, 180]))),
        "s4": rec("s4", []),
    }
    got = pair_agreement("mc_bench", a, b, ("ann", "bob"))
    assert (got.a, got.b, got.shared) == ("ann", "bob", 3)
    assert got.measures["image kappa"] == pytest.approx(1 / 3)
    assert got.measures["box F1@0.5"] == pytest.approx(0.5)


def test_ref_adv_and_mm_niah_pairs() -> None:
    a = {"1": rec("1", [[0, 0, 10, 10]]), "2": rec("2", [[0, 0, 10, 10]]), "3": rec("3", []), "4": rec("4", [[0, 0, 1, 1]])}
    b = {"1": rec("1", [[0, 0, 10, 8]]), "2": rec("2", [[0, 0, 10, 4]]), "3": rec("3", [[0, 0, 10, 10]])}
    # IoU 0.8 agrees, 0.4 does not, a missing box does not: 1 of 3
    assert pair_agreement("ref_adv_s", a, b).measures["IoU>=0.5 agreement"] == pytest.approx(1 / 3)
    a = {"x": rec("x", " Paris\n"), "y": rec("y", "3"), "g": rec("g", "A", gold=True)}
    b = {"x": rec("x", "paris"), "y": rec("y", "[3, 4]"), "g": rec("g", "A")}
    got = pair_agreement("mm_niah", a, b)
    assert (got.shared, got.measures["exact agreement"]) == (2, 0.5)


def test_seconds_per_sample_leaves_skipped_out() -> None:
    recs = {"a": rec("a", [], 4.0), "b": rec("b", [], 8.0), "c": rec("c", None, 100.0, skipped=True)}
    assert seconds_per_sample(recs) == 6.0


def write_human_run(folder: Path, name: str, acc: float, ap50: float, records: list[Record], confidence: bool = False) -> Path:
    folder.mkdir(parents=True)
    config = {"benchmark": "mc_bench", "model": f"human:{name}", "solver_options": {"confidence": confidence}}
    header = {"model_label": f"human:{name}", "config": config, "identity": {"solver.confidence": confidence}}
    block = {"acc": acc, "ap50": ap50, "by_style": {}}
    metrics = {"official": block, "corrected": block, "run": {"samples": len(records), "answered": len(records), "failed": 0}}
    (folder / "run.json").write_text(json.dumps(header))
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def three_annotators(tmp_path: Path, comparable: bool = False) -> list[Path]:
    """Three annotators; by default with different sample counts (2, 2, 1) and confidence
    settings (cy gave confidences), so that no mean of them may be printed."""
    box = mc((0, [0, 0, 10, 10]))
    cy = [rec("s1", [{**box[0], "score": 0.5}], 9.0)] + ([rec("s2", [], 9.0)] if comparable else [])
    return [
        write_human_run(tmp_path / "ann", "ann", 0.9, 0.4, [rec("s1", box, 3.0), rec("s2", [], 5.0)]),
        write_human_run(tmp_path / "bob", "bob", 0.8, 0.5, [rec("s1", box, 6.0), rec("s2", box, 6.0)]),
        write_human_run(tmp_path / "cy", "cy", 0.7, 0.3, cy, confidence=not comparable),
    ]


def read_runs(paths: list[Path]) -> list[Run]:
    return [Run(p, json.loads((p / "run.json").read_text()), json.loads((p / "metrics.json").read_text())) for p in paths]


def test_human_boards(tmp_path: Path) -> None:
    runs = read_runs(three_annotators(tmp_path, comparable=True))
    per, agree = human_boards("mc_bench", runs, with_published=True)
    rows = {r.labels[0]: r for r in per.rows}
    assert rows["ann"].values == pytest.approx([90.0, 40.0, 4.0])
    assert rows["ann"].labels[1:] == ["2", "no (1.0)"] and rows["cy"].labels[2] == "no (1.0)"
    assert rows["humans (mean of 3)"].values == pytest.approx([80.0, 40.0, 19 / 3])
    assert rows["Volunteer 1"].values[:2] == [94.3, 46.0] and rows["Volunteer 1"].published
    assert rows["Humans (mean of 3)"].values[:2] == [92.3, 41.3]
    pairs = {(r.labels[0], r.labels[1]): r for r in agree.rows}
    # ann/bob share s1 (both boxed image 1) and s2 (ann none, bob one): kappa over 4 images
    # [T,F,F,F] vs [T,F,T,F]: observed 3/4, chance 1/4*2/4 + 3/4*2/4 = 1/2: kappa 0.5; F1 2*1/3
    assert pairs[("ann", "bob")].labels[2] == "2"
    assert pairs[("ann", "bob")].values == pytest.approx([0.5, 200 / 3])
    assert pairs[("ann", "cy")].labels[2] == "2"
    # ann and cy agree everywhere, one image with a box per sample of two: kappa defined (1.0)
    assert pairs[("ann", "cy")].values == pytest.approx([1.0, 100.0])


def test_no_mean_of_annotators_who_are_not_comparable(tmp_path: Path) -> None:
    """Different sample counts and confidence settings: the "humans (mean of k)" row says why
    and holds no number, on the annotators' board and on the benchmark's board."""
    runs = read_runs(three_annotators(tmp_path))
    per, _ = human_boards("mc_bench", runs)
    mean = per.rows[-1]
    assert mean.labels[0].startswith("humans (no mean of 3: ")
    assert "different sample counts (2, 2, 1)" in mean.labels[0] and "confidences" in mean.labels[0]
    assert mean.values == [None, None, None]
    rc, err = run_quiet(["report", str(tmp_path), "--out", str(tmp_path / "board")])
    assert rc == 0, err
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "humans (mean of 3)" not in md and "humans (no mean of 3: different sample counts (2, 2, 1)" in md


def test_no_mean_over_different_plans(tmp_path: Path) -> None:
    paths = three_annotators(tmp_path, comparable=True)
    header = json.loads((paths[0] / "run.json").read_text())
    header["identity"]["solver.plan"] = {"hash": "other"}
    (paths[0] / "run.json").write_text(json.dumps(header))
    per, _ = human_boards("mc_bench", read_runs(paths))
    assert "different plans" in per.rows[-1].labels[0] and per.rows[-1].values[0] is None


def test_mm_niah_human_overall_over_measured_cells(tmp_path: Path) -> None:
    """10 of 12 right, one sample a cell: the authors' overall (empty cells 0) is about 3.0; the
    board shows the mean over the 12 measured cells (83.3) and leaves the authors' overall empty."""
    from needlepoint.benchmarks.mm_niah.aggregate import aggregate
    from needlepoint.benchmarks.mm_niah.ranges import PAPER_TASKS

    rows = [
        {"task": t, "context_length": 1500 + 4000 * k, "placed_depth": 0.1 + 0.4 * k, "score": float(n < 10)}
        for n, (t, k) in enumerate((t, k) for t in PAPER_TASKS for k in range(2))
    ]
    metrics = aggregate(rows)
    assert 100 * metrics["overall"]["overall"] < 5  # the authors' rule: 3.0-ish
    folder = tmp_path / "h"
    folder.mkdir()
    header = {"model_label": "human:ann", "config": {"benchmark": "mm_niah", "model": "human:ann"}}
    (folder / "run.json").write_text(json.dumps(header))
    (folder / "records.jsonl").write_text("".join(json.dumps(rec(str(i), "x")) + "\n" for i in range(12)))
    run = Run(folder, header, metrics)
    (per,) = human_boards("mm_niah", [run])
    assert per.columns == ["Overall", "measured cells", "cells", "s/sample"]
    overall, measured, cells, _ = per.rows[0].values
    assert overall is None and measured == pytest.approx(1000 / 12) and cells == 12


def test_report_shows_human_rows(tmp_path: Path) -> None:
    three_annotators(tmp_path / "runs", comparable=True)
    rc, err = run_quiet(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "board"), "--with-published"])
    assert rc == 0, err
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "humans (mean of 3)" in md and "Volunteer 2" in md and "agreement" in md
    assert "| ann | 2 | no (1.0) | 90.0 | 40.0 | 4.0 |" in md


def test_report_over_human_runs(tmp_path: Path) -> None:
    """Runs written by HumanRun (the page's path): two annotators on one plan, one skip."""
    from helpers.labelstudio import person_answers

    from needlepoint.benchmarks.mc_bench.demo import write_release
    from needlepoint.human.plan import load_plan_data, make_plan
    from needlepoint.human.runs import HumanRun

    data = write_release(tmp_path / "mc", pairs=8)[0]
    plan = make_plan("mc_bench", data, 6, 3)
    _, dataset = load_plan_data("mc_bench", data)
    samples = [s for s in dataset if s.id in set(plan.ids)]
    for person, name in ((0, "ann"), (2, "bob")):
        answers = person_answers(samples, dataset.truth, person)
        run = HumanRun.open("mc_bench", data, name, plan, out=tmp_path / "runs" / name)
        for k, sid in enumerate(plan.ids):
            run.add(sid, answers[sid], seconds=2.0 + person, skipped=(name == "bob" and k == 0))
        run.finish()
        run.close()
    rc, err = run_quiet(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "board")])
    assert rc == 0, err
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "| ann | 6 | no (1.0) | 100.0 |" in md and "| bob | 5 | no (1.0) |" in md
    # bob skipped one sample: 5 answered beside ann's 6, so no mean of the two is printed
    assert "| humans (no mean of 2: different sample counts (6, 5)) | sequence | official |" in md
    assert "| ann | bob | 5 |" in md  # the agreement over the 5 samples both answered
