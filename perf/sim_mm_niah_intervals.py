"""How honest MM-NIAH's intervals and paired comparisons are: synthetic runs with a known truth,
scored by the project's own resampler (benchmarks.mm_niah.resample), draws (stats.draw) and
intervals (stats.bootstrap_interval), and compared as `needlepoint compare` compares.

The population: six tasks; per task a fixed design of context lengths (uniform over 1k..72k, 4% below
1k) and needle depths (uniform for retrieval and reasoning; for counting the mean of 2-5 uniform
depths, which leaves the edge bins nearly empty, as in the release). A cell's true accuracy p_c
falls with length and dips in the middle depths; a sample's own accuracy is drawn from a Beta of
mean p_c (concentration 2: samples differ in difficulty), and its score is right/wrong (retrieval,
reasoning) or the share of 4 counts right (counting, partial credit). The truth is the authors'
aggregation of the p_c (an empty cell 0).

- coverage: a fresh run per replicate (new samples, new scores), its 95% interval of the overall
  and of each task's overall: does it hold the truth?
- false positives: per replicate two runs of the same model on the same samples (the same
  per-sample accuracies, independent answers), compared on the same paired draws; how often is
  p < 0.05 (compare's bootstrap p-value) and how often does the 95% interval miss 0, on the
  overall, each task's overall and the plain share of samples right (full credit)?

    python perf/sim_mm_niah_intervals.py                      # the figures in docs/statistics.md
    python perf/sim_mm_niah_intervals.py --sizes 60 --reps 100 --resamples 500
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from needlepoint.benchmarks.mm_niah.aggregate import DEPTH_BINS, context_bin, depth_bin
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_EDGES, TASKS
from needlepoint.benchmarks.mm_niah.resample import NiahResampler
from needlepoint.stats import bootstrap_interval, draw
from needlepoint.stats.bootstrap import resampled

BASE = {
    "retrieval-text": 0.85,
    "retrieval-image": 0.35,
    "counting-text": 0.45,
    "counting-image": 0.25,
    "reasoning-text": 0.65,
    "reasoning-image": 0.4,
}
KAPPA = 2.0  # Beta concentration of the per-sample accuracies
LISTS = 4  # counts per counting answer


def design(per_task: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Rows without scores (task, context_length, placed_depth), fixed for a configuration."""
    rows = []
    for task in TASKS:
        for _ in range(per_task):
            length = (
                int(rng.integers(300, 1000)) if rng.random() < 0.04 else int(np.exp(rng.uniform(np.log(1000), np.log(72000))))
            )
            if task.startswith("counting"):
                depth: float | list[float] = [float(v) for v in rng.random(int(rng.integers(2, 6)))]
            else:
                depth = float(rng.choice([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])) if rng.random() < 0.5 else float(rng.random())
            rows.append({"task": task, "context_length": length, "placed_depth": depth})
    return rows


def cell_accuracy(row: dict[str, Any]) -> float:
    x, y = context_bin(row["context_length"]), depth_bin(row["placed_depth"])
    p = BASE[row["task"]] * (1.0 - 0.4 * max(x - 1, 0) / (len(CONTEXT_EDGES) - 1)) * (1.0 - 0.15 * (y in (1, 2, 3)))
    return float(np.clip(p, 0.02, 0.98))


def truth(rows: list[dict[str, Any]], p: np.ndarray) -> dict[str, float]:
    """The authors' aggregation of the cell accuracies (empty cells 0), unrounded."""
    cells = np.zeros((len(TASKS), len(CONTEXT_EDGES), DEPTH_BINS))
    seen = np.zeros_like(cells, dtype=bool)
    for row, pc in zip(rows, p.tolist(), strict=True):
        x = context_bin(row["context_length"])
        if x >= 1:
            k, y = TASKS.index(row["task"]), depth_bin(row["placed_depth"])
            cells[k, x - 1, y], seen[k, x - 1, y] = pc, True
    task = cells.mean(axis=2).mean(axis=1)
    out = {f"tasks/{t}/overall": float(v) for t, v in zip(TASKS, task, strict=True)}
    out["overall/overall"] = float(task.mean())
    return out


def scores(rows: list[dict[str, Any]], q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    counting = np.array([r["task"].startswith("counting") for r in rows])
    binary = (rng.random(len(rows)) < q).astype(np.float64)
    partial = rng.binomial(LISTS, q) / LISTS
    out: np.ndarray = np.where(counting, partial, binary)
    return out


class CellDesign:
    """The design before issue 41, for comparison: drawn within the cell (task, range, depth bin),
    each drawn sample in its own cell."""

    unit = "sample"

    def __init__(self, inner: NiahResampler) -> None:
        self.inner, self.units = inner, inner.units
        self.strata: list[str] | None = [str(c) for c in inner.cells.tolist()]

    def metrics(self, idx: np.ndarray) -> dict[str, float | None]:
        return self.inner.metrics(idx)

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        return self.inner.aggregate(self.inner.cells[idx], self.inner.scores[idx])

    def restrict(self, ids: Sequence[str]) -> CellDesign:
        raise NotImplementedError


def share(drawn: np.ndarray) -> np.ndarray:
    """Per row of drawn 0/1 outcomes, the share of ones (compare's "samples right" rows)."""
    out: np.ndarray = drawn.mean(axis=1)
    return out


def p_values(d: np.ndarray, observed: float) -> tuple[float, float]:
    """Two bootstrap p-values of no difference from the resampled differences `d`: the centred one
    (the share of |d - observed| >= |observed|: `compare` as committed before issue 41) and the
    percentile one (twice the smaller share of d on either side of 0, each (count + 1) / (B + 1):
    the same procedure as the percentile interval, which issue 41 item 2 brings to `compare`)."""
    centred = float(np.mean(np.abs(d - observed) >= abs(observed) - 1e-12))
    below, above = int((d <= 0.0).sum()), int((d >= 0.0).sum())
    return centred, min(1.0, 2.0 * (min(below, above) + 1) / (len(d) + 1))


def simulate(per_task: int, reps: int, resamples: int, seed: int, cell_design: bool = False) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    rows = design(per_task, rng)
    p = np.array([cell_accuracy(r) for r in rows])
    true = truth(rows, p)
    ids = [str(i) for i in range(len(rows))]
    names = list(true)
    covered = {name: 0 for name in names}
    missing = {name: 0 for name in names}
    positives = {name: 0 for name in [*names, "samples right"]}
    positives_pct = {name: 0 for name in [*names, "samples right"]}
    misses_zero = {name: 0 for name in [*names, "samples right"]}
    for rep in range(reps):
        q = rng.beta(p * KAPPA, (1 - p) * KAPPA)  # this replicate's samples: their own accuracies
        one: Any = NiahResampler(ids, [{**r, "score": s} for r, s in zip(rows, scores(rows, q, rng), strict=True)])
        one = CellDesign(one) if cell_design else one
        intervals = bootstrap_interval(one, resamples=resamples, seed=rep)
        for name in names:
            iv = intervals.get(name)
            if iv is None:
                missing[name] += 1
            else:
                covered[name] += iv.lo <= true[name] <= iv.hi
        a_scores, b_scores = scores(rows, q, rng), scores(rows, q, rng)  # two runs of one model
        a: Any = NiahResampler(ids, [{**r, "score": s} for r, s in zip(rows, a_scores, strict=True)])
        b: Any = NiahResampler(ids, [{**r, "score": s} for r, s in zip(rows, b_scores, strict=True)])
        if cell_design:
            a, b = CellDesign(a), CellDesign(b)
        idx = draw(len(ids), resamples, rep, a.strata)
        da, db = resampled(a, idx), resampled(b, idx)
        whole_a, whole_b = a.metrics(np.arange(len(ids))), b.metrics(np.arange(len(ids)))
        diffs = {name: (db[name] - da[name], float(whole_b[name] or 0) - float(whole_a[name] or 0)) for name in names}
        right_a, right_b = (a_scores == 1).astype(np.float64), (b_scores == 1).astype(np.float64)
        diffs["samples right"] = (share(right_b[idx]) - share(right_a[idx]), float(right_b.mean() - right_a.mean()))
        for name, (d, observed) in diffs.items():
            centred, percentile = p_values(d, observed)
            lo, hi = np.quantile(d, [0.025, 0.975])
            positives[name] += centred < 0.05
            positives_pct[name] += percentile < 0.05
            misses_zero[name] += not lo <= 0.0 <= hi
    cells = np.bincount(
        [TASKS.index(r["task"]) * 100 + context_bin(r["context_length"]) * 5 + depth_bin(r["placed_depth"]) for r in rows]
    )
    filled = cells[cells > 0]
    return {
        "per_task": per_task,
        "median_cell": float(np.median(filled)),
        "cells_of_one": int((filled == 1).sum()),
        "coverage": {k: covered[k] / max(reps - missing[k], 1) for k in names},
        "no_interval": missing,
        "false_positive": {k: v / reps for k, v in positives.items()},
        "false_positive_percentile": {k: v / reps for k, v in positives_pct.items()},
        "interval_misses_0": {k: v / reps for k, v in misses_zero.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[300, 1000], help="samples a task")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cell-design", action="store_true", help="the design before issue 41: drawn within the cell")
    args = ap.parse_args()
    for size in args.sizes:
        start = time.perf_counter()
        out = simulate(size, args.reps, args.resamples, args.seed, args.cell_design)
        tasks = [f"tasks/{t}/overall" for t in TASKS]
        task_cov = np.mean([out["coverage"][k] for k in tasks])
        task_fp = np.mean([out["false_positive"][k] for k in tasks])
        task_miss = np.mean([out["interval_misses_0"][k] for k in tasks])
        print(
            f"{size} a task, {'within the cell (before issue 41)' if args.cell_design else 'collapsed cells'} ({args.reps} runs, {args.resamples} resamples, median {out['median_cell']:.0f} a cell, "
            f"{out['cells_of_one']} cells of one; {time.perf_counter() - start:.0f} s)"
        )
        print(
            f"  coverage      overall {out['coverage']['overall/overall']:.1%}   per task {task_cov:.1%} ("
            + ", ".join(f"{out['coverage'][k]:.1%}" for k in tasks)
            + ")"
        )
        print(
            f"  p < 0.05      overall {out['false_positive']['overall/overall']:.1%}   per task {task_fp:.1%}   samples right {out['false_positive']['samples right']:.1%}"
        )
        fp = out["false_positive_percentile"]
        task_pct = np.mean([fp[k] for k in tasks])
        print(
            f"  p' < 0.05     overall {fp['overall/overall']:.1%}   per task {task_pct:.1%}   samples right {fp['samples right']:.1%}"
        )
        print(
            f"  0 outside CI  overall {out['interval_misses_0']['overall/overall']:.1%}   per task {task_miss:.1%}   samples right {out['interval_misses_0']['samples right']:.1%}"
        )
        if any(out["no_interval"].values()):
            print(f"  no interval: {out['no_interval']}")


if __name__ == "__main__":
    main()
