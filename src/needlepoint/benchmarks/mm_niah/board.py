"""MM-NIAH on a leaderboard (`needlepoint report`): by context range and by task, as the paper's
tables; the authors' response files are `response_files.py`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from needlepoint.benchmarks.mm_niah.grid import full_grid, measured_mean, measured_overall
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_RANGES, EXTENDED_RANGES, PAPER_TASKS
from needlepoint.benchmarks.mm_niah.tables import present_ranges
from needlepoint.contract.boards import Board, BoardRow, PublishedRow, Run, at, ci_level, interval, obj, pct

__all__ = ["MEASURED", "boards", "published_by_task"]

MEASURED = "†"  # marks a cell that is a mean over the measured cells only (a run over part of the grid)


def boards(runs: Sequence[Run]) -> list[Board]:
    """By context range and by task (official aggregate, tasks in the paper's order; a range without
    samples is an empty cell, not the 0 the official aggregate scores it); a third board by
    extended range when a run went past 64k. Published rows (one per task) are merged into one row per model on the
    by-task board (`published_by_task`). A run over part of the grid (`grid.full_grid` false, e.g. a
    person's small plan) shows means over the cells holding a sample, marked MEASURED and noted under
    the boards, instead of the authors' aggregate that scores its empty cells 0."""
    ranges = Board(
        "mm_niah_ranges",
        "MM-NIAH by context range (%, mean of the six tasks; official aggregate)",
        ["model", "split"],
        [*CONTEXT_RANGES, "overall"],
        headline="overall",
    )
    tasks = Board(
        "mm_niah_tasks",
        "MM-NIAH by task (%, mean over the context ranges; official aggregate)",
        ["model", "split"],
        [*PAPER_TASKS, "overall"],
        lay_published=published_by_task,
        headline="overall",
    )
    partial: list[str] = []
    for run in sorted(runs, key=lambda r: -(_official(r.metrics) or -1)):
        m = run.metrics
        labels = [run.label, str(m.get("split") or run.option("split") or "")]
        if _measured_row(m):
            partial.append(_partial_rows(run, labels, ranges, tasks))
            continue
        overall = obj(m.get("overall"))
        # The run's own range labels, if it stored them, say which score belongs to which column.
        range_names = _range_names(m)
        here = present_ranges(overall, len(range_names))
        by_range = [
            pct(at(overall, "scores", range_names.index(r))) if r in range_names and here[range_names.index(r)] else None
            for r in CONTEXT_RANGES
        ]
        found = [interval(m, f"overall/scores/{r}") for r in CONTEXT_RANGES] + [interval(m, "overall/overall")]
        level = ci_level(m)
        ranges.rows.append(BoardRow(labels, [*by_range, pct(overall.get("overall"))], str(run.dir), intervals=found, level=level))
        by_task = [pct(at(m, "tasks", t, "overall")) for t in PAPER_TASKS]
        found = [interval(m, f"tasks/{t}/overall") for t in PAPER_TASKS] + [interval(m, "overall/overall")]
        tasks.rows.append(BoardRow(labels, [*by_task, pct(overall.get("overall"))], str(run.dir), intervals=found, level=level))
    if partial:
        note = (
            f"{MEASURED}: a run whose plan leaves a task or context range without samples ({'; '.join(partial)}): "
            "each cell is the mean over the task x range x depth cells that hold a sample, empty where none; "
            "the authors' aggregate (an empty cell scores 0) is shown only where every task and range has samples."
        )
        ranges.note = tasks.note = note
        for board in (ranges, tasks):  # the papers' captions (report --format) carry the title, not the note
            board.title = f"{board.title[:-1]}; {MEASURED}: mean over the measured cells only, a run over part of the grid)"
    boards = [ranges, tasks]
    extended = [r for r in runs if isinstance(r.metrics.get("extended"), dict)]
    if extended:  # sets built past 64k: the 64k range split at 128k, 256k, 512k, 1M, beside the official board
        wide = Board(
            "mm_niah_ranges_extended",
            "MM-NIAH by context range, extended past 64k (%, mean of the six tasks; not official: 64k ends at 128k)",
            ["model", "split"],
            [*EXTENDED_RANGES, "overall"],
            headline="overall",
        )
        for run in extended:
            ext = obj(obj(run.metrics["extended"]).get("overall"))
            labels = [run.label, str(run.metrics.get("split") or run.option("split") or "")]
            here = present_ranges(ext, len(EXTENDED_RANGES))
            wide.rows.append(
                BoardRow(
                    labels,
                    [
                        *(pct(at(ext, "scores", i)) if here[i] else None for i in range(len(EXTENDED_RANGES))),
                        pct(ext.get("overall")),
                    ],
                    str(run.dir),
                )
            )
        boards.insert(1, wide)
    return boards


def _official(metrics: dict[str, Any]) -> float | None:
    """The authors' overall (%) where it stands (a full grid), else None: a run over part of the
    grid ranks after those that have one."""
    return None if _measured_row(metrics) else pct(at(metrics, "overall", "overall"))


def _range_names(metrics: dict[str, Any]) -> list[str]:
    stored = metrics.get("context_ranges")
    return [str(r) for r in stored] if isinstance(stored, list) else list(CONTEXT_RANGES)


def _measured_row(metrics: dict[str, Any]) -> bool:
    """Whether the run's row shows means over measured cells: its grid is not full (`grid.full_grid`)
    and it records which cells hold samples (a run without per-cell counts keeps the stored figures)."""
    return not full_grid(metrics) and measured_overall(metrics)[2] > 0


def _marked(value: float | None) -> str | None:
    """A mean over measured cells as the board shows it: the percentage with its mark, None (empty) for none."""
    return None if value is None else f"{100 * value:.1f}{MEASURED}"


def _partial_rows(run: Run, labels: list[str], ranges: Board, tasks: Board) -> str:
    """The rows of a run over part of the grid: per range and per task the mean over the cells
    holding a sample (marked, empty where none), and the overall over them; no intervals (those
    stored are the authors' aggregate's). Returns the run's entry for the boards' note."""
    m = run.metrics
    names = _range_names(m)
    overall, n, size = measured_overall(m)
    by_range = [_marked(measured_mean(m, range_index=names.index(r))) if r in names else None for r in CONTEXT_RANGES]
    ranges.rows.append(BoardRow(labels, [*by_range, _marked(overall)], str(run.dir)))
    by_task = [_marked(measured_mean(m, task=t)) for t in PAPER_TASKS]
    tasks.rows.append(BoardRow(labels, [*by_task, _marked(overall)], str(run.dir)))
    return f"{run.label}: {n} of {size} cells measured"


def published_by_task(rows: Sequence[PublishedRow]) -> list[PublishedRow]:
    """MM-NIAH's published rows (one per task) laid out as the by-task board: one row per source,
    split and model, each task's `overall` cell under the task's name."""
    merged: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in rows:
        key = (r.source, r.cells.get("split", ""), r.cells["model"])
        cells = merged.setdefault(key, {k: r.cells[k] for k in ("model", "split") if k in r.cells})
        cells[r.cells["task"]] = r.cells["overall"]
    return [PublishedRow("mm_niah", cells, source) for (source, _, _), cells in merged.items()]
