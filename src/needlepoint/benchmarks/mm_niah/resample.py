"""MM-NIAH resampling: a scored sample is the unit; the authors' aggregation (cell means per range
and depth bin, 0 for an empty cell; each task's per-range score as the mean of its 5 depth cells
rounded to 6 decimals; its overall; the overall across the six tasks when all six are present, with
the same roundings) is recomputed on every draw, and on all samples once it is aggregate()'s to
the last bit (tests/test_stats_mm_niah.py).

The design (docs/statistics.md, "MM-NIAH: the collapsed-cell bootstrap"). The authors' score is a
mean of cell means with equal weights, and the cells are small (55 a task; counting's mean depth
leaves 1 or 2 samples in its edge bins). Drawn within the cell, a cell of one sample is drawn as
itself and adds no spread, and a cell of n samples gives (n - 1) / n of its variance: the 95%
interval covered 80% at 4 samples a cell. Drawn within task and range, a sparse cell came out
empty and scored 0. So:

- Strata (what `stats.draw` draws within) are groups of at least MIN_GROUP samples: a task's
  context ranges (rows below 1,000 tokens first, as a range of their own), merged in order until
  each group holds MIN_GROUP; a task too small for one group is merged with its neighbour. At the
  released size a group is one task x range.
- A draw keeps every cell's count. Column k of a draw (a unit drawn from unit k's group, as
  `stats.draw` lays it out) refills unit k's place: its cell gets the cell's mean plus the drawn
  unit's residual. The residual of a unit in a cell of two or more is its deviation from its cell's
  mean times sqrt(n / (n - 1)); of a unit alone in its cell, its deviation from its group's mean
  times sqrt(N / (N - 1)) (the collapsed-strata estimate, conservative by the depth effect); where
  no cell of a group varies but its scores do, every unit's deviation from the group's mean. The
  residuals are centred within their group, so a draw's cell means scatter around the run's own.
  Hence a cell of one sample varies, the spread is the pooled within-cell variance (unbiased), and
  paired runs drawn with the same positions keep their pairing sample by sample.
- A row of positions of another width (each sample alone, a subset) is read as a multiset of
  samples in their own cells, empty cells 0, as the authors aggregate it.

A range with no sample of a task (0 by the authors' rule, whatever is drawn) is left out of the
per-range numbers. Rows below 1,000 tokens, which the aggregate drops, move no official number.
The `extended` ranges get no intervals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from needlepoint.benchmarks.mm_niah.aggregate import DEPTH_BINS, DIGITS, checked_depth_bin, context_bin
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_EDGES, CONTEXT_RANGES, TASKS
from needlepoint.stats.resampler import Resampler, one_row, restrict_positions

__all__ = ["MIN_GROUP", "NiahResampler"]

MIN_GROUP = 20  # samples a stratum holds at least (context ranges of a task merged until then)

_RANGES = len(CONTEXT_EDGES)
_CELLS = _RANGES * DEPTH_BINS
_SCALE = 10.0**DIGITS


def _rounded(values: np.ndarray) -> np.ndarray:
    """Python's `round(v, DIGITS)` of every value, as aggregate() rounds, for a whole array at
    once (84,000 calls of `round` were a third of a 200-document run's intervals): v * 10**DIGITS
    to the nearest whole number, divided back (both exact in IEEE arithmetic, so the nearest float
    to the decimal, as `round` gives), wherever v * 10**DIGITS lies more than 1e-6 from a half (its
    float error is under 1.2e-7 for |v| < 1,000); a value near a half, large or not finite goes
    through `round` itself."""
    with np.errstate(invalid="ignore", over="ignore"):  # the non-finite go through `round`
        scaled = values * _SCALE
        out: np.ndarray = np.rint(scaled) / _SCALE
        doubt = ~(np.abs(values) < 1e3) | (np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6)
    if doubt.any():
        out[doubt] = [round(float(v), DIGITS) for v in values[doubt].tolist()]
    return out


def _groups(task: np.ndarray, block: np.ndarray, tasks: int) -> np.ndarray:
    """A group per unit: each task's blocks (0 below 1k, then the ranges 1k..64k) merged in order
    until a group holds MIN_GROUP units (a short tail joins the group before it); a group still
    short of MIN_GROUP (a small task) joins the next one (the last, the one before it)."""
    key = task * (_RANGES + 1) + block
    counts = np.bincount(key, minlength=tasks * (_RANGES + 1)).tolist()
    groups: list[list[int]] = []  # the keys of each group, in order
    sizes: list[int] = []
    for t in range(tasks):
        first = len(groups)
        for k in range(t * (_RANGES + 1), (t + 1) * (_RANGES + 1)):
            if not counts[k]:
                continue
            if len(groups) == first or sizes[-1] >= MIN_GROUP:
                groups.append([])
                sizes.append(0)
            groups[-1].append(k)
            sizes[-1] += counts[k]
        if len(groups) - first > 1 and sizes[-1] < MIN_GROUP:
            tail, tail_size = groups.pop(), sizes.pop()
            groups[-1] += tail
            sizes[-1] += tail_size
    g = 0
    while g < len(groups) and len(groups) > 1:
        if sizes[g] >= MIN_GROUP:
            g += 1
            continue
        into = g + 1 if g + 1 < len(groups) else g - 1
        groups[into] = sorted(groups[into] + groups[g])
        sizes[into] += sizes[g]
        del groups[g], sizes[g]
    group_of_key = np.zeros(len(counts), dtype=np.int64)
    for number, keys in enumerate(groups):
        group_of_key[keys] = number
    out: np.ndarray = group_of_key[key]
    return out


def _residuals(score: np.ndarray, cell: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Each unit's residual (module docstring): within-cell where its cell holds two or more,
    within-group otherwise, rescaled to unbiased variance and centred within the group."""
    n_cell = np.bincount(cell).astype(np.float64)
    cell_mean = np.bincount(cell, weights=score) / np.maximum(n_cell, 1)
    n_group = np.bincount(group).astype(np.float64)
    group_mean = np.bincount(group, weights=score) / n_group
    nc, ng = n_cell[cell], n_group[group]
    within_cell = (score - cell_mean[cell]) * np.sqrt(nc / np.maximum(nc - 1, 1))
    within_group = (score - group_mean[group]) * np.sqrt(ng / np.maximum(ng - 1, 1))
    e = np.where(nc >= 2, within_cell, within_group)
    # a group whose cells are each all-equal while its scores differ: the deviations from its mean
    flat = np.bincount(group, weights=np.abs(e)) <= 1e-12
    varies = np.bincount(group, weights=np.abs(score - group_mean[group])) > 1e-12
    e = np.where((flat & varies)[group], within_group, e)
    e = e - (np.bincount(group, weights=e) / n_group)[group]
    e[np.abs(e) < 1e-12] = 0.0  # exact zeros where a group holds no spread at all
    out: np.ndarray = e
    return out


class NiahResampler:
    """Scored MM-NIAH rows (aggregate()'s rows, with their sample ids) as bootstrap units.

    `tasks`: the order tasks are averaged in (default: the order they first appear, as aggregate()
    does); a restricted resampler keeps its parent's order."""

    unit = "sample"

    def __init__(self, ids: Sequence[str], rows: Sequence[Mapping[str, Any]], tasks: Sequence[str] | None = None) -> None:
        self.units = [str(i) for i in ids]
        self._rows = list(rows)
        present_tasks = list(dict.fromkeys(str(row["task"]) for row in rows))
        first = [t for t in tasks or () if t in present_tasks]
        self._tasks: list[str] = first + [t for t in present_tasks if t not in first]
        task_of, cell_of = [], []
        for index, row in enumerate(rows):
            task = str(row["task"])
            x = context_bin(row["context_length"])
            y = checked_depth_bin(row["placed_depth"], f"Row {index} of task {task}")
            task_of.append(self._tasks.index(task))
            cell_of.append((x - 1) * DEPTH_BINS + y if x >= 1 else -1)
        t, c = np.asarray(task_of, np.int64), np.asarray(cell_of, np.int64)
        n_bins = len(self._tasks) * _CELLS
        self._bin = np.where(c >= 0, t * _CELLS + c, n_bins)  # one extra bin: rows the aggregate drops
        self._bins = n_bins + 1
        self._score = np.asarray([float(r["score"]) for r in rows], dtype=np.float64)
        block = np.where(c >= 0, c // DEPTH_BINS + 1, 0)
        group = _groups(t, block, len(self._tasks)) if len(rows) else np.zeros(0, np.int64)
        self._group = group
        labels = [
            f"{self._tasks[k]} {'<1k' if b == 0 else CONTEXT_RANGES[b - 1]}"
            for k, b in zip(t.tolist(), block.tolist(), strict=True)
        ]
        order = (t * (_RANGES + 1) + block).tolist()
        names: dict[int, str] = {}
        for g in np.flatnonzero(np.bincount(group)).tolist():  # np.unique imports numpy.ma (stats.percentile_bounds)
            members = np.flatnonzero(group == g).tolist()
            first, last = labels[min(members, key=order.__getitem__)], labels[max(members, key=order.__getitem__)]
            names[g] = first if first == last else f"{first} .. {last}"
        self.strata: list[str] | None = [names[g] for g in group.tolist()]
        fine = np.where(c >= 0, self._bin, n_bins + t)  # the centring cell: the below-1k rows of a task form one
        cell_sum = np.bincount(fine, weights=self._score, minlength=n_bins + len(self._tasks))
        cell_n = np.bincount(fine, minlength=n_bins + len(self._tasks))
        self._centre = (cell_sum / np.maximum(cell_n, 1))[fine]  # the mean of each unit's own cell
        self._resid = _residuals(self._score, fine, group) if len(rows) else np.zeros(0)
        # (task, range) with samples: a range without any is 0 by the authors' rule on every draw,
        # so it gets no interval line of its own (the task's overall still counts it as 0)
        present = np.zeros((len(self._tasks), _RANGES), dtype=bool)
        present[t[c >= 0], c[c >= 0] // DEPTH_BINS] = True
        self._present = present
        self._complete = all(task in self._tasks for task in TASKS)

    @property
    def cells(self) -> np.ndarray:
        """Each unit's cell number (task, range, depth bin; the last number: below 1k, dropped)."""
        return self._bin

    @property
    def scores(self) -> np.ndarray:
        """Each unit's score."""
        return self._score

    def metrics(self, idx: np.ndarray) -> dict[str, float | None]:
        return one_row(self.metrics_batch(np.asarray(idx, dtype=np.int64)[None, :]))

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        idx = np.asarray(idx, dtype=np.int64)
        n = len(self.units)
        if idx.shape[1] == n and n:  # a draw: column k refills unit k's place in its cell
            bins = np.broadcast_to(self._bin, idx.shape)
            values = self._centre + self._resid[idx]
            whole = (idx == np.arange(n)).all(axis=1)
            values[whole] = self._score  # all samples once: the scores themselves, bit for bit
        else:  # a multiset of samples in their own cells
            bins, values = self._bin[idx], self._score[idx]
        return self.aggregate(bins, values)

    def aggregate(self, bins: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
        """The authors' aggregation of each row of `values` (scores, draws x places) placed in the
        cells `bins` (this resampler's cell numbers, the last one dropped below 1k)."""
        rows = len(values)
        where = (bins + self._bins * np.arange(rows)[:, None]).ravel()
        total = np.bincount(where, minlength=rows * self._bins).reshape(rows, self._bins)[:, :-1]
        correct = np.bincount(where, weights=values.ravel(), minlength=rows * self._bins)
        correct = correct.reshape(rows, self._bins)[:, :-1]
        shape = (rows, len(self._tasks), _RANGES, DEPTH_BINS)
        total, correct = total.reshape(shape).astype(np.float64), correct.reshape(shape)
        cells = np.divide(correct, total, out=np.zeros_like(correct), where=total != 0)
        scores = _rounded(cells.mean(axis=3))  # (rows, tasks, ranges)
        out: dict[str, np.ndarray] = {}
        for k, task in enumerate(self._tasks):
            for r, label in enumerate(CONTEXT_RANGES):
                if self._present[k, r]:
                    out[f"tasks/{task}/scores/{label}"] = scores[:, k, r]
            out[f"tasks/{task}/overall"] = _rounded(scores[:, k].mean(axis=1))
        if self._complete:
            overall = _rounded(scores.mean(axis=1))
            for r, label in enumerate(CONTEXT_RANGES):
                if self._present[:, r].any():
                    out[f"overall/scores/{label}"] = overall[:, r]
            out["overall/overall"] = _rounded(overall.mean(axis=1))
        return out

    def restrict(self, ids: Sequence[str]) -> Resampler:
        """The samples `ids` as a resampler of their own (their own cells, groups and residuals),
        the tasks averaged in this one's order."""
        positions = restrict_positions(self.units, ids).tolist()
        return NiahResampler([self.units[p] for p in positions], [self._rows[p] for p in positions], self._tasks)
