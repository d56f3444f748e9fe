"""MM-NIAH intervals: the authors' aggregation recomputed on a draw equals aggregate() on the whole
set (per task and range, per task, overall), draws stay within the cell (task, range, depth bin),
and a missing task leaves the overall without interval."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from needlepoint.benchmarks.mm_niah.aggregate import aggregate
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_RANGES, TASKS
from needlepoint.benchmarks.mm_niah.resample import NiahResampler
from needlepoint.stats import bootstrap_interval


def _rows(n: int, seed: int, tasks: tuple[str, ...] = TASKS) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        depth: float | list[float] = rng.choice([0.0, 0.2, 0.4, 0.6, 0.8, 1.0, rng.random()])
        if rng.random() < 0.1:
            depth = [rng.random(), rng.random()]
        out.append(
            {
                "task": rng.choice(tasks),
                "context_length": rng.choice([500, rng.randint(1000, 70000)]),
                "placed_depth": depth,
                "score": rng.choice([0.0, 1.0, 1.0, 0.5, 0.25]),  # partial credit too
            }
        )
    return out


def _expected(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics by name, without the per-range numbers of ranges that hold no sample (0 by the
    authors' rule on every draw: no interval line of their own)."""
    out: dict[str, Any] = {}
    seen = [False] * len(CONTEXT_RANGES)
    for task, block in metrics["tasks"].items():
        for r, (label, v) in enumerate(zip(CONTEXT_RANGES, block["scores"], strict=True)):
            if any(row[r] for row in block["counts"]):
                out[f"tasks/{task}/scores/{label}"] = v
                seen[r] = True
        out[f"tasks/{task}/overall"] = block["overall"]
    if metrics["overall"] is not None:
        for r, (label, v) in enumerate(zip(CONTEXT_RANGES, metrics["overall"]["scores"], strict=True)):
            if seen[r]:
                out[f"overall/scores/{label}"] = v
        out["overall/overall"] = metrics["overall"]["overall"]
    return out


def test_whole_set_equals_the_aggregate() -> None:
    for seed in (1, 2, 3):
        rows = _rows(900, seed)
        r = NiahResampler([str(i) for i in range(len(rows))], rows)
        assert r.metrics(np.arange(len(rows))) == _expected(aggregate(rows))


def test_a_draw_equals_the_aggregate_of_the_drawn_rows() -> None:
    rows = _rows(600, 4)
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    idx = np.random.default_rng(0).integers(0, len(rows), len(rows))
    # tasks may first appear in another order among the drawn rows: the mean over tasks can then
    # differ in its last bit, and the 6-decimal rounding by one unit
    want = _expected(aggregate([rows[i] for i in idx.tolist()]))
    got = r.metrics(idx)
    assert {k: got[k] for k in want} == pytest.approx(want, abs=1.5e-6)
    assert all(got[k] == 0 for k in got.keys() - want.keys())  # a range this (unstratified) draw missed


def test_a_range_without_samples_has_no_interval_line() -> None:
    rows = [r for r in _rows(3000, 6) if not (r["task"] == TASKS[0] and 2000 <= r["context_length"] < 4000)]
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    names = r.metrics(np.arange(len(rows)))
    assert f"tasks/{TASKS[0]}/scores/2k" not in names and f"tasks/{TASKS[1]}/scores/2k" in names
    assert "overall/scores/2k" in names and f"tasks/{TASKS[0]}/overall" in names


def test_draws_keep_each_task_and_range_and_overall_needs_all_tasks() -> None:
    rows = _rows(400, 5, tasks=TASKS[:3])
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    assert r.strata is not None and len(set(r.strata)) > 10
    intervals = bootstrap_interval(r, resamples=200, seed=0)
    assert "overall/overall" not in intervals
    iv = intervals[f"tasks/{TASKS[0]}/overall"]
    assert iv is not None and iv.lo <= iv.estimate <= iv.hi


def test_intervals_of_sparse_cells_hold_the_estimate() -> None:
    """One or two samples a cell (the demo's size): a draw keeps every cell's count, so no cell
    empties and scores 0 on a draw; every interval holds its estimate. Drawn within task and range
    only, the overall's interval lay wholly below it."""
    rows = _rows(360, 11)
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    assert r.strata is not None
    assert all(label.endswith("<1k") or " depth " in label for label in r.strata)  # a cell is a stratum
    intervals = bootstrap_interval(r, resamples=300, seed=0)
    assert "overall/overall" in intervals
    for name, iv in intervals.items():
        if iv is not None:
            assert iv.lo <= iv.estimate <= iv.hi, (name, iv)
