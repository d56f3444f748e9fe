"""MM-NIAH metrics laid out for people: per-range scores per task (the paper's task order), the
figures beyond the official aggregate, the extended ranges and the RAG needle shares.

A context range without any sample shows "–", not the 0.0 the official aggregate scores it as, and
when a set lacks some ranges an "overall (present)" column beside the official overall averages
only the ranges that have samples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from needlepoint.benchmarks.mm_niah.rag_results import rag_tables
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_RANGES, PAPER_TASKS, paper_order
from needlepoint.contract.base import Table, percent
from needlepoint.contract.coverage import coverage_note, has_answers, no_answers_table

__all__ = ["niah_tables", "present_ranges"]

TITLE = "MM-NIAH (official per-range scores, %)"
PRESENT = "overall (present)"
EMPTY_NOTE = "–: no sample in that range (the official aggregate scores it 0 and averages it into overall); overall (present): the mean over the ranges with samples"


def present_ranges(block: dict[str, Any], width: int) -> list[bool]:
    """Per context range, whether `block` (a task's or the overall's metrics, with `counts` as depth
    rows by range columns) has any sample; all True when it holds no counts."""
    counts = block.get("counts")
    if not isinstance(counts, list) or not counts:
        return [True] * width
    return [any(isinstance(row, list) and i < len(row) and row[i] for row in counts) for i in range(width)]


def _range_rows(blocks: Sequence[tuple[str, dict[str, Any]]], width: int) -> tuple[list[list[Any]], bool]:
    """One row per block: its per-range scores ("–" where it has no sample), its official overall,
    and the overall over present ranges; whether any range was empty."""
    rows, gaps = [], False
    for name, block in blocks:
        scores = block.get("scores") or []
        here = present_ranges(block, width)
        gaps = gaps or not all(here)
        cells = [percent(v) if i < len(here) and here[i] else None for i, v in enumerate(scores)]
        kept = [v for v, h in zip(scores, here) if h and isinstance(v, (int, float))]
        rows.append([name, *cells, percent(block.get("overall")), percent(sum(kept) / len(kept)) if kept else None])
    return rows, gaps


def _range_table(title: str, ranges: Sequence[str], blocks: Sequence[tuple[str, dict[str, Any]]]) -> Table:
    rows, gaps = _range_rows(blocks, len(ranges))
    if not gaps:  # every range has samples: the present-range mean is the official overall
        return Table(title, ["task", *ranges, "overall"], [row[:-1] for row in rows])
    return Table(title, ["task", *ranges, "overall", PRESENT], rows)


def _blocks(section: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = section.get("tasks")
    tasks: dict[str, Any] = found if isinstance(found, dict) else {}
    blocks = [(t, tasks[t]) for t in paper_order(tasks) if isinstance(tasks[t], dict)]
    if isinstance(section.get("overall"), dict):
        blocks.append(("overall", section["overall"]))
    return blocks


def niah_tables(metrics: dict[str, Any]) -> list[Table]:
    """Per-range scores per task and overall, and the extra figures, tasks in the paper's order."""
    if metrics.get("note"):
        return [Table("MM-NIAH", ["note"], [[metrics["note"]]]), *_rag(metrics)]
    if "models" in metrics:
        tables = []
        for model, m in metrics["models"].items():
            for t in niah_tables(m):
                t.title = f"{model}: {t.title}"
                tables.append(t)
        return tables
    if not has_answers(metrics) or not isinstance(metrics.get("tasks"), dict):
        return [no_answers_table("MM-NIAH", metrics), *_rag(metrics)]
    note = coverage_note(metrics)
    ranges = metrics.get("context_ranges") or list(CONTEXT_RANGES)
    main = _range_table(f"{TITLE}; {note}" if note else TITLE, ranges, _blocks(metrics))
    extra = Table("MM-NIAH (beyond the official aggregate)", ["task", "rows", "micro acc %", "rows < 1k", "crash-prone"])
    for task, m in _blocks(metrics):
        if task != "overall":
            crashes: dict[str, int] = m["crashes"] if isinstance(m.get("crashes"), dict) else {}
            extra.rows.append(
                [task, m.get("rows"), percent(m.get("micro_accuracy")), m.get("rows_below_1k"), sum(crashes.values())]
            )
    tables = [main, extra]
    ext = metrics.get("extended")
    if isinstance(ext, dict):
        title = "MM-NIAH (extended ranges past 64k, not official; 64k ends at 128k, %)"
        tables.insert(1, _range_table(title, ext.get("context_ranges") or [], _blocks(ext)))
    if any(PRESENT in t.columns for t in tables):
        tables.append(Table("MM-NIAH ranges", ["note"], [[EMPTY_NOTE]]))
    if metrics.get("overall_note"):
        tables.append(Table("MM-NIAH overall", ["note"], [[metrics["overall_note"]]]))
    return tables + _rag(metrics)


def _rag(metrics: dict[str, Any]) -> list[Table]:
    """The RAG needle-share tables, their task rows in the paper's order."""
    tables = rag_tables(metrics)
    for t in tables:
        rank = {name: i for i, name in enumerate(paper_order([str(r[0]) for r in t.rows]))}
        t.rows.sort(key=lambda r: (str(r[0]) == "overall", rank.get(str(r[0]), len(PAPER_TASKS))))
    return tables
