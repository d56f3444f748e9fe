"""MM-NIAH resampling: a scored sample is the unit, drawn within its cell (task, context range and
depth bin: what the authors' aggregation averages), and the official aggregation recomputed on each
draw. Drawing within the cell keeps every cell that has samples non-empty on every draw: drawn
within task and range only, a sparse cell came out empty on many draws and scored 0 by the
authors' rule, which pulled the whole distribution below the estimate. The aggregation: cell
means per range and depth bin (0 for an empty cell), each task's per-range score as the mean of its
depth cells rounded to 6 decimals, its overall, and the overall across the six tasks (only when all
six are present), with the same roundings. On all samples once the numbers are aggregate()'s to the
last bit (tests/test_stats_mm_niah.py). A range with no sample of a task (0 by the authors' rule,
whatever is drawn) is left out of the per-range numbers. Rows below 1,000 tokens, which the aggregate drops, are
units of their own stratum and move no number. The `extended` ranges get no intervals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from needlepoint.benchmarks.mm_niah.aggregate import DEPTH_BINS, DIGITS, checked_depth_bin, context_bin
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_EDGES, CONTEXT_RANGES, TASKS
from needlepoint.stats.resampler import Resampler, Restricted, one_row

__all__ = ["NiahResampler"]

_RANGES = len(CONTEXT_EDGES)
_CELLS = _RANGES * DEPTH_BINS
_round = np.frompyfunc(lambda v: round(float(v), DIGITS), 1, 1)  # Python's round, as aggregate() rounds


def _rounded(values: np.ndarray) -> np.ndarray:
    return np.asarray(_round(values), dtype=np.float64)


class NiahResampler:
    """Scored MM-NIAH rows (aggregate()'s rows, with their sample ids) as bootstrap units."""

    unit = "sample"

    def __init__(self, ids: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
        self.units = [str(i) for i in ids]
        self._tasks: list[str] = []  # in the order they first appear, as aggregate() averages them
        task_of, cell_of = [], []
        for index, row in enumerate(rows):
            task = str(row["task"])
            if task not in self._tasks:
                self._tasks.append(task)
            x = context_bin(row["context_length"])
            y = checked_depth_bin(row["placed_depth"], f"Row {index} of task {task}")
            task_of.append(self._tasks.index(task))
            cell_of.append((x - 1) * DEPTH_BINS + y if x >= 1 else -1)
        t, c = np.asarray(task_of, np.int64), np.asarray(cell_of, np.int64)
        self.strata: list[str] | None = [
            f"{self._tasks[k]} {CONTEXT_RANGES[cell // DEPTH_BINS]} depth {cell % DEPTH_BINS}"
            if cell >= 0
            else f"{self._tasks[k]} <1k"
            for k, cell in zip(t.tolist(), c.tolist(), strict=True)
        ]
        n_bins = len(self._tasks) * _CELLS
        self._bin = np.where(c >= 0, t * _CELLS + c, n_bins)  # one extra bin: rows the aggregate drops
        self._bins = n_bins + 1
        self._score = np.asarray([float(r["score"]) for r in rows], dtype=np.float64)
        # (task, range) with samples: a range without any is 0 by the authors' rule on every draw,
        # so it gets no interval line of its own (the task's overall still counts it as 0)
        present = np.zeros((len(self._tasks), _RANGES), dtype=bool)
        present[t[c >= 0], c[c >= 0] // DEPTH_BINS] = True
        self._present = present
        self._complete = all(task in self._tasks for task in TASKS)

    def metrics(self, idx: np.ndarray) -> dict[str, float | None]:
        return one_row(self.metrics_batch(np.asarray(idx, dtype=np.int64)[None, :]))

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        rows = len(idx)
        where = (self._bin[idx] + self._bins * np.arange(rows)[:, None]).ravel()
        total = np.bincount(where, minlength=rows * self._bins).reshape(rows, self._bins)[:, :-1]
        correct = np.bincount(where, weights=self._score[idx].ravel(), minlength=rows * self._bins)
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
        return Restricted(self, ids)
