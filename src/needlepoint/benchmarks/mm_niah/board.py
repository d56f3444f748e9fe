"""MM-NIAH on a leaderboard (`needlepoint report`): by context range and by task, as the paper's
tables; the authors' response files are `response_files.py`."""

from __future__ import annotations

from collections.abc import Sequence

from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_RANGES, EXTENDED_RANGES, PAPER_TASKS
from needlepoint.benchmarks.mm_niah.tables import present_ranges
from needlepoint.contract.boards import Board, BoardRow, PublishedRow, Run, at, obj, pct
from needlepoint.stats.tables import plus_minus

__all__ = ["boards", "published_by_task"]


def boards(runs: Sequence[Run]) -> list[Board]:
    """By context range and by task (official aggregate, tasks in the paper's order; a range without
    samples is an empty cell, not the 0 the official aggregate scores it); a third board by
    extended range when a run went past 64k. Published rows (one per task) are merged into one row per model on the
    by-task board (`published_by_task`)."""
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
    for run in sorted(runs, key=lambda r: -(pct(at(r.metrics, "overall", "overall")) or -1)):
        m = run.metrics
        labels = [run.label, str(m.get("split") or run.option("split") or "")]
        overall = obj(m.get("overall"))
        # The run's own range labels, if it stored them, say which score belongs to which column.
        stored = m.get("context_ranges")
        range_names = stored if isinstance(stored, list) else list(CONTEXT_RANGES)
        here = present_ranges(overall, len(range_names))
        by_range = [
            pct(at(overall, "scores", range_names.index(r))) if r in range_names and here[range_names.index(r)] else None
            for r in CONTEXT_RANGES
        ]
        spread = [plus_minus(m, f"overall/scores/{r}") for r in CONTEXT_RANGES] + [plus_minus(m, "overall/overall")]
        ranges.rows.append(BoardRow(labels, [*by_range, pct(overall.get("overall"))], str(run.dir), spreads=spread))
        by_task = [pct(at(m, "tasks", t, "overall")) for t in PAPER_TASKS]
        spread = [plus_minus(m, f"tasks/{t}/overall") for t in PAPER_TASKS] + [plus_minus(m, "overall/overall")]
        tasks.rows.append(BoardRow(labels, [*by_task, pct(overall.get("overall"))], str(run.dir), spreads=spread))
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


def published_by_task(rows: Sequence[PublishedRow]) -> list[PublishedRow]:
    """MM-NIAH's published rows (one per task) laid out as the by-task board: one row per source,
    split and model, each task's `overall` cell under the task's name."""
    merged: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in rows:
        key = (r.source, r.cells.get("split", ""), r.cells["model"])
        cells = merged.setdefault(key, {k: r.cells[k] for k in ("model", "split") if k in r.cells})
        cells[r.cells["task"]] = r.cells["overall"]
    return [PublishedRow("mm_niah", cells, source) for (source, _, _), cells in merged.items()]
