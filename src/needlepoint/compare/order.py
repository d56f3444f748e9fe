"""The order and the headline of a comparison's rows: which row is the primary comparison of a
benchmark, and the paper's order of a benchmark's tasks (MM-NIAH's rows and heatmaps list the tasks
as the paper and `needlepoint eval` do, not in the order the records happen to hold them). Both
come from the benchmark's declaration (`primary_metric`, `task_order`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from needlepoint.contract.declaration import Declaration
from needlepoint.contract.registry import declaration
from needlepoint.core.errors import DataError

__all__ = ["paper_tasks", "primary_metric", "task_sorted"]

T = TypeVar("T")


def _declared(benchmark: str) -> Declaration | None:
    """The benchmark's declaration, None for a run of a benchmark no longer registered."""
    try:
        return declaration(benchmark)
    except DataError:
        return None


def primary_metric(benchmark: str, names: Sequence[str]) -> str | None:
    """The primary row among `names`: the benchmark's declared `primary_metric` (the headline
    number of its paper), else the first name ending in "overall", else the first name (None
    without names)."""
    declared = _declared(benchmark)
    if declared is not None and declared.primary_metric in names:
        return declared.primary_metric
    overall = [n for n in names if n.rsplit("/", 1)[-1] == "overall"]
    return overall[0] if overall else (names[0] if names else None)


def paper_tasks(benchmark: str) -> tuple[str, ...]:
    """The benchmark's tasks in its paper's order (() for a benchmark without tasks)."""
    declared = _declared(benchmark)
    return declared.task_order if declared is not None else ()


def _task_of(name: str, tasks: Sequence[str]) -> int | None:
    for k, task in enumerate(tasks):
        if f"tasks/{task}/" in f"{name}/" or name == task or name.endswith(f" {task}"):
            return k
    return None


def task_sorted(items: Sequence[T], name_of: Callable[[T], str], tasks: Sequence[str]) -> list[T]:
    """`items` grouped by task in the paper's task order (each task's own items keep their order),
    after the items of no task (overall numbers), which keep theirs; `name_of(item)` is its row name."""
    if not tasks:
        return list(items)

    def key(item: T) -> int:
        k = _task_of(name_of(item), tasks)
        return -1 if k is None else k

    return sorted(items, key=key)
