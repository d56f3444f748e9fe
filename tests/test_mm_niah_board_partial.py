"""MM-NIAH's leaderboards for a run over part of the grid (a person's small plan): means over the
measured cells, marked, empty cells empty; a full-grid run keeps the authors' aggregate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from needlepoint.benchmarks.mm_niah.aggregate import aggregate
from needlepoint.benchmarks.mm_niah.board import MEASURED, boards
from needlepoint.benchmarks.mm_niah.grid import full_grid, measured_overall
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_EDGES, CONTEXT_RANGES, PAPER_TASKS
from needlepoint.contract.boards import Board, Run
from needlepoint.report import agreement


def small_plan() -> dict[str, Any]:
    """12 samples, two a task (ranges 1k and 4k, one depth bin each), 10 right: one sample a cell."""
    rows = [
        {"task": t, "context_length": 1500 + 3000 * k, "placed_depth": 0.1 + 0.4 * k, "score": float(n < 10)}
        for n, (t, k) in enumerate((t, k) for t in PAPER_TASKS for k in range(2))
    ]
    return aggregate(rows)


def full_plan() -> dict[str, Any]:
    """Every task at every context range (one depth bin each, so the authors' rule differs from the
    mean over measured cells), some answers wrong."""
    edges = [*CONTEXT_EDGES, 70000]
    rows = [
        {"task": t, "context_length": (edges[i] + edges[i + 1]) // 2, "placed_depth": 0.5, "score": float((i + j) % 3 != 0)}
        for j, t in enumerate(PAPER_TASKS)
        for i in range(len(CONTEXT_EDGES))
    ]
    return aggregate(rows)


def run(tmp_path: Path, name: str, metrics: dict[str, Any]) -> Run:
    folder = tmp_path / name
    folder.mkdir()
    header = {"model_label": name, "config": {"benchmark": "mm_niah", "model": name}}
    (folder / "run.json").write_text(json.dumps(header))
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return Run(folder, header, metrics)


def row(board: Board, label: str) -> dict[str, str]:
    (found,) = [r for r in board.rows if r.labels[0] == label]
    return dict(zip(board.columns, (board.shown(found, i) for i in range(len(board.columns)))))


def test_small_plan_shows_overall_over_measured_cells(tmp_path: Path) -> None:
    metrics = small_plan()
    assert 100 * metrics["overall"]["overall"] < 5  # the authors' rule: empty cells score 0 (about 3.0)
    assert not full_grid(metrics)
    ranges, tasks = boards([run(tmp_path, "human:ann", metrics)])
    by_range, by_task = row(ranges, "human:ann"), row(tasks, "human:ann")
    assert by_range["overall"] == by_task["overall"] == f"83.3{MEASURED}"
    # 1k: six cells, five right (the last two samples, reasoning-image's, are wrong); 4k: five of six
    assert by_range["1k"] == f"83.3{MEASURED}" and by_range["4k"] == f"83.3{MEASURED}"
    assert all(by_range[r] == "" for r in CONTEXT_RANGES if r not in ("1k", "4k"))  # empty, not 0
    assert by_task["retrieval-text"] == f"100.0{MEASURED}" and by_task["reasoning-image"] == f"0.0{MEASURED}"
    for board in (ranges, tasks):
        assert MEASURED in board.note and "human:ann: 12 of 330 cells measured" in board.note
        assert MEASURED in board.title  # the papers' captions (`report --format`) carry the title
        assert not any(board.interval_of(r, i) for r in board.rows for i in range(len(board.columns)))


def test_missing_task_is_empty_and_overall_is_over_the_rest(tmp_path: Path) -> None:
    rows = [
        {"task": t, "context_length": 1500, "placed_depth": 0.1, "score": 1.0 if t != "counting-text" else 0.5}
        for t in PAPER_TASKS
        if t != "reasoning-image"
    ]
    metrics = aggregate(rows)
    assert metrics["overall"] is None
    ranges, tasks = boards([run(tmp_path, "human:b", metrics)])
    assert row(tasks, "human:b")["reasoning-image"] == ""
    assert row(tasks, "human:b")["overall"] == row(ranges, "human:b")["overall"] == f"90.0{MEASURED}"


def test_full_grid_run_unchanged(tmp_path: Path) -> None:
    metrics = full_plan()
    assert full_grid(metrics) and measured_overall(metrics)[1] == 66
    small = run(tmp_path, "human:ann", small_plan())
    full = run(tmp_path, "model-a", metrics)
    ranges, tasks = boards([small, full])
    assert [r.labels[0] for r in ranges.rows] == ["model-a", "human:ann"]  # a partial run ranks after
    got = ranges.rows[0].values
    assert got[-1] == pytest.approx(100 * metrics["overall"]["overall"])
    assert list(got[:-1]) == pytest.approx([100 * v for v in metrics["overall"]["scores"]])
    assert list(tasks.rows[0].values) == pytest.approx(
        [100 * metrics["tasks"][t]["overall"] for t in PAPER_TASKS] + [100 * metrics["overall"]["overall"]]
    )
    alone_ranges, alone_tasks = boards([full])
    assert alone_ranges.note == alone_tasks.note == ""  # no note without a partial run
    assert alone_ranges.title == "MM-NIAH by context range (%, mean of the six tasks; official aggregate)"
    assert alone_tasks.title == "MM-NIAH by task (%, mean over the context ranges; official aggregate)"


def test_agreement_uses_the_grid_rule() -> None:
    """The per-annotator board decides with the same rule (moved here from report/agreement.py)."""
    assert vars(agreement)["full_grid"] is full_grid and vars(agreement)["measured_overall"] is measured_overall
