"""MM-NIAH intervals: the authors' aggregation on all samples equals aggregate() (per task and
range, per task, overall); draws stay within groups of at least MIN_GROUP samples (a task's context
ranges merged), keep every cell's count, and refill a cell's places with residuals, so that a cell
of one sample varies, the spread is the pooled within-cell variance, two runs whose samples
disagree never differ by the same amount on every draw, and a missing task leaves the overall
without interval. The calibration (coverage, false positives) is perf/sim_mm_niah_intervals.py's,
in docs/statistics.md."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import pytest

from needlepoint.benchmarks.mm_niah.aggregate import aggregate
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_RANGES, TASKS
from needlepoint.benchmarks.mm_niah.resample import MIN_GROUP, NiahResampler
from needlepoint.stats import bootstrap_interval, draw
from needlepoint.stats.bootstrap import resampled


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


def test_a_multiset_of_another_width_equals_the_aggregate_of_its_rows() -> None:
    """Positions that are no draw of every unit (each sample alone, a subset) are samples in their
    own cells, aggregated as the authors aggregate them."""
    rows = _rows(600, 4)
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    idx = np.random.default_rng(0).integers(0, len(rows), 450)
    # tasks may first appear in another order among the drawn rows: the mean over tasks can then
    # differ in its last bit, and the 6-decimal rounding by one unit
    want = _expected(aggregate([rows[i] for i in idx.tolist()]))
    got = r.metrics(idx)
    assert {k: got[k] for k in want} == pytest.approx(want, abs=1.5e-6)
    assert all(got[k] == 0 for k in got.keys() - want.keys())  # a range this multiset missed


def test_a_restricted_resampler_is_the_aggregate_of_its_samples() -> None:
    rows = _rows(600, 7)
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    keep = [str(i) for i in range(0, len(rows), 3)][::-1]
    sub = r.restrict(keep)
    assert sub.units == keep
    got = sub.metrics(np.arange(len(keep)))
    want = _expected(aggregate([rows[int(i)] for i in keep]))
    assert {k: got[k] for k in want} == pytest.approx(want, abs=1.5e-6)


def test_a_range_without_samples_has_no_interval_line() -> None:
    rows = [r for r in _rows(3000, 6) if not (r["task"] == TASKS[0] and 2000 <= r["context_length"] < 4000)]
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    names = r.metrics(np.arange(len(rows)))
    assert f"tasks/{TASKS[0]}/scores/2k" not in names and f"tasks/{TASKS[1]}/scores/2k" in names
    assert "overall/scores/2k" in names and f"tasks/{TASKS[0]}/overall" in names


def test_draws_keep_each_task_and_range_and_overall_needs_all_tasks() -> None:
    rows = _rows(400, 5, tasks=TASKS[:3])
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    assert r.strata is not None and len(set(r.strata)) > 6
    sizes = Counter(r.strata)
    assert min(sizes.values()) >= MIN_GROUP  # merged ranges of a task, never a sparse cell
    assert all(label.split()[0] == label.split()[-2] for label in sizes)  # no group spans two tasks here
    intervals = bootstrap_interval(r, resamples=200, seed=0)
    assert "overall/overall" not in intervals
    iv = intervals[f"tasks/{TASKS[0]}/overall"]
    assert iv is not None and iv.lo <= iv.estimate <= iv.hi


def test_intervals_of_sparse_cells_hold_the_estimate() -> None:
    """One or two samples a cell (the demo's size): a draw keeps every cell's count, so no cell
    empties and scores 0 on a draw; every interval holds its estimate. Drawn within task and range
    with the drawn samples in their own cells, the overall's interval lay wholly below it."""
    rows = _rows(360, 11)
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    assert r.strata is not None
    assert min(Counter(r.strata).values()) >= MIN_GROUP
    intervals = bootstrap_interval(r, resamples=300, seed=0)
    assert "overall/overall" in intervals
    for name, iv in intervals.items():
        if iv is not None:
            assert iv.lo <= iv.estimate <= iv.hi, (name, iv)


def _cells_rows(task: str, length: int, per_depth: list[list[float]]) -> list[dict[str, Any]]:
    """Rows of one task and one context length: per depth bin (0.1, 0.3, ...), the given scores."""
    return [
        {"task": task, "context_length": length, "placed_depth": 0.1 + 0.2 * d, "score": score}
        for d, scores in enumerate(per_depth)
        for score in scores
    ]


def test_a_cell_of_one_sample_varies_across_draws() -> None:
    """A range whose only sample sits alone in its cell: drawn within the cell it was drawn as
    itself on every draw, so its score had no interval although the task's samples disagree."""
    rows = _cells_rows(TASKS[0], 1500, [[1.0, 0.0, 1.0, 0.0]] * 5) + _cells_rows(TASKS[0], 2500, [[1.0], [], [], [], []])
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    drawn = resampled(r, draw(len(rows), 400, 0, r.strata))[f"tasks/{TASKS[0]}/scores/2k"]
    assert r.metrics(np.arange(len(rows)))[f"tasks/{TASKS[0]}/scores/2k"] == 0.2
    assert len(set(drawn.tolist())) > 2
    assert bootstrap_interval(r, resamples=400)[f"tasks/{TASKS[0]}/scores/2k"] is not None


def test_disagreeing_samples_never_give_a_zero_width_interval() -> None:
    """Five samples, each alone in its cell, and a second run that differs on one of them: every
    draw gave the difference -20 ([-20, -20], McNemar p = 1.0), and the one run's own score had
    no interval at all ("the scores do not vary")."""
    depths = [[1.0], [0.0], [1.0], [1.0], [0.0]]
    first = _cells_rows(TASKS[0], 1500, depths)
    second = _cells_rows(TASKS[0], 1500, [[1.0], [0.0], [0.0], [1.0], [0.0]])
    ids = [str(i) for i in range(5)]
    a, b = NiahResampler(ids, first), NiahResampler(ids, second)
    name = f"tasks/{TASKS[0]}/scores/1k"
    estimate_a, estimate_b = a.metrics(np.arange(5))[name], b.metrics(np.arange(5))[name]
    assert estimate_a is not None and estimate_b is not None and estimate_b - estimate_a == pytest.approx(-0.2)
    idx = draw(5, 1000, 0, a.strata)
    diff = resampled(b, idx)[name] - resampled(a, idx)[name]
    lo, hi = np.quantile(diff, [0.025, 0.975])
    assert lo < -0.2 < hi and hi >= 0.0  # spread around the observed difference, and 0 within it
    assert abs(float(diff.mean()) + 0.2) < 0.02  # centred on it
    iv = bootstrap_interval(a, resamples=1000)[name]
    assert iv is not None and iv.lo < iv.estimate < iv.hi


def test_paired_identical_runs_differ_by_zero_on_every_draw() -> None:
    rows = _rows(500, 8)
    ids = [str(i) for i in range(len(rows))]
    a, b = NiahResampler(ids, rows), NiahResampler(ids, [dict(row) for row in rows])
    idx = draw(len(rows), 200, 3, a.strata)
    da, db = resampled(a, idx), resampled(b, idx)
    assert all(np.array_equal(da[k], db[k]) for k in da)


def test_the_spread_is_the_pooled_within_cell_variance() -> None:
    """Five cells of 1, 0, 1, 0: the within-cell variance is 1/3 (unbiased), a cell mean's 1/12,
    the range score's (mean of 5 cells) 1/60, sd 0.129. Drawn within the cell the bootstrap gave
    (n - 1) / n of it: sd 0.112, and 80% coverage at 4 samples a cell."""
    rows = _cells_rows(TASKS[0], 1500, [[1.0, 0.0, 1.0, 0.0]] * 5)
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    drawn = resampled(r, draw(len(rows), 8000, 0, r.strata))[f"tasks/{TASKS[0]}/scores/1k"]
    assert float(drawn.std()) == pytest.approx((1 / 60) ** 0.5, rel=0.03)
    assert float(drawn.mean()) == pytest.approx(0.5, abs=0.005)


def test_draws_are_centred_on_the_estimate_with_unequal_cells() -> None:
    """Cells of 1 to 20 samples with different accuracies in one group: a drawn unit from another
    cell brings its deviation, not its score, so the draws scatter around the authors' number."""
    rng = np.random.default_rng(2)
    per_depth = [[float(v) for v in rng.random(n) < p] for n, p in ((1, 0.0), (3, 0.9), (20, 0.2), (6, 0.5), (2, 1.0))]
    rows = _cells_rows(TASKS[0], 1500, per_depth)
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    name = f"tasks/{TASKS[0]}/scores/1k"
    drawn = resampled(r, draw(len(rows), 4000, 0, r.strata))[name]
    estimate = r.metrics(np.arange(len(rows)))[name]
    assert estimate is not None and float(drawn.mean()) == pytest.approx(estimate, abs=0.01)


def test_a_draw_refills_each_place_from_its_own_group() -> None:
    """The design reads column k of a draw as unit k's place: stats.draw must lay a row out so."""
    rows = _rows(700, 9)
    r = NiahResampler([str(i) for i in range(len(rows))], rows)
    assert r.strata is not None
    strata = np.asarray(r.strata)
    idx = draw(len(rows), 50, 1, r.strata)
    assert (strata[idx] == strata[None, :]).all()


def test_rounding_of_a_whole_array_is_pythons_round_bit_for_bit() -> None:
    """The draws' 6-decimal rounding (`_rounded`, all values at once) gives what `round(v, 6)`
    gives for each value: means of counts, values at and near a decimal half (where the float
    product could round the wrong way), large, negative and non-finite ones."""
    from needlepoint.benchmarks.mm_niah.resample import _rounded

    rng = np.random.default_rng(7)
    means = [k / n for n in range(1, 400) for k in range(n + 1)]
    halves = (np.arange(-2000, 2000) + 0.5) / 1e6
    near = np.concatenate([np.nextafter(halves, np.inf), np.nextafter(halves, -np.inf), halves + 1e-13, halves - 1e-13])
    values = np.concatenate(
        [np.asarray(means), halves, near, rng.random(100_000), rng.normal(0, 1e4, 1000), [np.nan, np.inf, -np.inf, -0.0, 1e300]]
    )
    expected = [round(float(v), 6) for v in values]
    got = _rounded(values.reshape(-1, 1)).ravel().tolist()  # any shape, as the draws' blocks
    assert [repr(v) for v in got] == [repr(v) for v in expected]
