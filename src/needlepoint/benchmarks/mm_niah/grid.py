"""Which of MM-NIAH's cells a run measured: the one rule the leaderboards (`board.py`) and the
per-annotator board (`report/agreement.py`) share.

The authors' aggregate scores a task x range x depth cell without samples 0 and averages it in, so
a small plan (a person's, 10 right of 12) scores about 3.0 there. Their overall stands only where
the grid is full (`full_grid`: all six tasks, every context range of each holding samples); else a
score is the mean over the cells that hold a sample (`measured_mean`, `measured_overall`), read from
metrics.json's per-task `cells` and `counts` (depth rows by range columns).
"""

from __future__ import annotations

from typing import Any

from needlepoint.contract.boards import at, obj

__all__ = ["full_grid", "measured_mean", "measured_overall"]


def _measured(metrics: dict[str, Any], task: str | None = None, range_index: int | None = None) -> tuple[list[float], int]:
    """The scores of the cells holding a sample (of one task and/or one range column when given)
    and how many cells that slice of the grid has."""
    got: list[float] = []
    size = 0
    for name, block in obj(metrics.get("tasks")).items():
        if task is not None and name != task:
            continue
        cells, counts = obj(block).get("cells"), obj(block).get("counts")
        if not isinstance(cells, list) or not isinstance(counts, list):
            continue
        for cell_row, count_row in zip(cells, counts):
            if not isinstance(cell_row, list) or not isinstance(count_row, list):
                continue
            for i, (value, n) in enumerate(zip(cell_row, count_row)):
                if range_index is not None and i != range_index:
                    continue
                size += 1
                if isinstance(n, int | float) and n > 0 and isinstance(value, int | float):
                    got.append(float(value))
    return got, size


def measured_mean(metrics: dict[str, Any], task: str | None = None, range_index: int | None = None) -> float | None:
    """The mean score (0..1) over the task x range x depth cells that hold a sample, of one task
    and/or one context range (its index in the run's `context_ranges`) when given; None where no
    cell of that slice holds one."""
    got, _ = _measured(metrics, task, range_index)
    return sum(got) / len(got) if got else None


def measured_overall(metrics: dict[str, Any]) -> tuple[float | None, int, int]:
    """MM-NIAH: the mean score over the task x range x depth cells that hold a sample, how many
    cells that is and how many the grid has. The authors' overall counts an empty cell as 0, so a
    small plan of 10 right of 12 scores 3.0 there; this one scores 83.3."""
    got, size = _measured(metrics)
    return (sum(got) / len(got) if got else None), len(got), size


def full_grid(metrics: dict[str, Any]) -> bool:
    """Whether the authors' MM-NIAH overall stands: all six tasks there and every context range of
    every task holding samples (their aggregate scores an empty range 0)."""
    tasks = obj(metrics.get("tasks"))
    if metrics.get("missing_tasks") or not tasks or at(metrics, "overall", "overall") is None:
        return False
    for block in tasks.values():
        counts = obj(block).get("counts")
        if not isinstance(counts, list) or not counts:
            return False
        width = max((len(r) for r in counts if isinstance(r, list)), default=0)
        if not width or not all(any(isinstance(r, list) and i < len(r) and r[i] for r in counts) for i in range(width)):
            return False
    return True
