"""MM-NIAH aggregation: the authors' `calculate_scores.py` numbers, plus what it hides.

Official part (kept bit for bit, floating-point quirks included): rows are binned by context length
(left-closed edges, `numpy.digitize`; rows below 1,000 tokens dropped) and by needle depth
(`int(depth / 0.2)`, 1.0 -> 0.99); a cell is the mean score of its rows (0 when empty); a task's
score per context range is the mean of its 5 depth cells, rounded to 6 decimals; the overall per
range is the mean of the six rounded task scores, rounded again, only when all six are present.

Added: sample counts per cell, micro accuracy over all rows, the share of rows dropped below 1k,
and counts of rows the authors' script would have crashed on (see `judge.Verdict.crash`). When rows
reach 128k tokens (sets built past the release's 72k), an `extended` block beside the official one
splits the open-ended 64k range at 128k, 256k, 512k and 1M by the same rules; the official numbers
never change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_EDGES, CONTEXT_RANGES, EXTENDED_EDGES, EXTENDED_RANGES, TASKS
from needlepoint.contract.base import DataError
from needlepoint.core.numeric import finite, size

DEPTH_STEP = 0.2
DEPTH_BINS = 5
DEPTH_LABELS = tuple(f"{i * DEPTH_STEP:.1f}-{(i + 1) * DEPTH_STEP:.1f}" for i in range(DEPTH_BINS))
DIGITS = 6


def _number(value: Any, what: str, where: str) -> float:
    return finite(value, where, what, "fix that field")


def context_bin(context_length: float, edges: tuple[int, ...] = CONTEXT_EDGES) -> int:
    """0 for below 1,000 tokens (dropped), 1..11 for the ranges 1k..64k (64k open-ended); with
    EXTENDED_EDGES, 1..15 for 1k..1M (1M open-ended)."""
    return int(np.digitize(context_length, edges))


def depth_value(placed_depth: float | list[float]) -> float:
    """The depth the authors bin on: the mean of a list, and 1.0 moved to 0.99."""
    if isinstance(placed_depth, list):
        depth = sum(placed_depth) / len(placed_depth)
    else:
        depth = placed_depth
    return 0.99 if depth == 1.0 else depth


def depth_bin(placed_depth: float | list[float]) -> int:
    """`int(depth / 0.2)`: truncation, so 0.6 (0.6 / 0.2 = 2.9999999999999996) lands in bin 2."""
    return int(depth_value(placed_depth) / DEPTH_STEP)


def checked_depth_bin(placed_depth: Any, where: str) -> int:
    """depth_bin, after checking the depth is a number (or list of numbers) in [0, 1]."""
    values = placed_depth if isinstance(placed_depth, list) else [placed_depth]
    if not values:
        raise DataError(f"{where} has an empty placed_depth list; give at least one depth in [0, 1].")
    for value in values:
        if not 0.0 <= _number(value, "placed_depth", where) <= 1.0:
            raise DataError(f"{where} has placed_depth {placed_depth!r} outside [0, 1]; fix that field.")
    return depth_bin(placed_depth)


def _rounded(values: Iterable[float]) -> list[float]:
    return [round(float(value), DIGITS) for value in values]


def _task_metrics(rows: list[Mapping[str, Any]], task: str, edges: tuple[int, ...] = CONTEXT_EDGES) -> dict[str, Any]:
    total = np.zeros((len(edges) + 1, DEPTH_BINS))
    correct = np.zeros((len(edges) + 1, DEPTH_BINS))
    crashes: dict[str, int] = {}
    score_sum = 0.0
    for index, row in enumerate(rows):
        where = f"Row {index} of task {task}"
        length = size(row.get("context_length"), where, "context_length", "a length in tokens is 0 or more; fix that field")
        x = context_bin(length, edges)
        y = checked_depth_bin(row.get("placed_depth"), where)
        score = _number(row.get("score"), "score", where)
        if not 0.0 <= score <= 1.0:
            raise DataError(f"{where} has score {score!r} outside [0, 1]; scores come from judge.score_answer.")
        total[x][y] += 1
        correct[x][y] += score  # summed in row order, as upstream (partial credit is order-sensitive)
        score_sum += score
        if row.get("crash"):
            crashes[row["crash"]] = crashes.get(row["crash"], 0) + 1
    cells = np.divide(correct, total, out=np.zeros_like(correct), where=total != 0)[1:].T
    scores = _rounded(cells.mean(axis=0).tolist())
    below = int(total[0].sum())
    return {
        "scores": scores,
        "overall": round(float(np.mean(scores)), DIGITS),
        "cells": [_rounded(line) for line in cells.tolist()],
        "counts": total[1:].T.astype(int).tolist(),
        "micro_accuracy": round(score_sum / len(rows), DIGITS),
        "rows": len(rows),
        "rows_below_1k": below,
        "share_below_1k": round(below / len(rows), DIGITS),
        "crashes": crashes,
        "_cells": cells,
    }


def aggregate(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-task and overall MM-NIAH metrics from scored rows (JSON-ready).

    A row: `task` (one of TASKS), `context_length`, `placed_depth` (float or list), `score` (0..1),
    optional `crash` (a `judge.Verdict.crash` reason). Rows are taken in the order given, and tasks
    are averaged into the overall in the order they first appear (upstream: directory order).
    """
    by_task: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        task = row.get("task")
        if task not in TASKS:
            raise DataError(f"A scored row has task {task!r}; MM-NIAH tasks are {', '.join(TASKS)}.")
        by_task.setdefault(task, []).append(row)
    if not by_task:
        raise DataError("There are no scored MM-NIAH rows to aggregate; score some responses first.")
    tasks = {task: _task_metrics(task_rows, task) for task, task_rows in by_task.items()}
    missing = [task for task in TASKS if task not in tasks]
    metrics: dict[str, Any] = {
        "context_ranges": list(CONTEXT_RANGES),
        "depth_bins": list(DEPTH_LABELS),
        "tasks": tasks,
        "overall": None,
        "missing_tasks": missing,
    }
    if missing:
        metrics["overall_note"] = (
            f"No overall score: the official overall needs all six tasks and {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing."
        )
    else:
        metrics["overall"] = _overall(tasks)
    for task_metrics in tasks.values():
        del task_metrics["_cells"]
    if any(row.get("context_length", 0) >= EXTENDED_EDGES[len(CONTEXT_EDGES)] for rows in by_task.values() for row in rows):
        metrics["extended"] = extended(by_task)
    return metrics


def _overall(tasks: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    scores = _rounded(np.array([t["scores"] for t in tasks.values()]).mean(axis=0).tolist())
    cells = np.mean([t["_cells"] for t in tasks.values()], axis=0)
    counts = np.sum([t["counts"] for t in tasks.values()], axis=0)
    return {
        "scores": scores,
        "overall": round(float(np.mean(scores)), DIGITS),
        "cells": [_rounded(line) for line in cells.tolist()],
        "counts": counts.astype(int).tolist(),
    }


def extended(by_task: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, Any]:
    """The official rules over 15 ranges (1k .. 64k, 128k, 256k, 512k, 1M; 64k now ends at 128k
    and 1M is open-ended): per task scores, cells and counts, and the overall when all six tasks
    are present. Not part of the authors' numbers; shown beside them."""
    tasks = {}
    for task, rows in by_task.items():
        m = _task_metrics(rows, task, EXTENDED_EDGES)
        tasks[task] = {k: m[k] for k in ("scores", "overall", "cells", "counts", "_cells")}
    overall = _overall(tasks) if all(t in tasks for t in TASKS) else None
    for m in tasks.values():
        del m["_cells"]
    return {"context_ranges": list(EXTENDED_RANGES), "depth_bins": list(DEPTH_LABELS), "tasks": tasks, "overall": overall}
