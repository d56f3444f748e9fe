"""RefCOCO on a leaderboard (`needlepoint report`): the model cards' layout, Acc@0.5 per split and
their mean, one row per run and reading (`official`, `corrected`), best corrected mean first."""

from __future__ import annotations

from collections.abc import Sequence

from needlepoint.benchmarks.refcoco import SPLIT_COLUMNS
from needlepoint.benchmarks.refcoco.data import SPLITS
from needlepoint.contract.boards import Board, BoardRow, PublishedRow, Run, answer_label, at, ci_level, count, interval, pct

__all__ = ["COLUMNS", "boards"]

COLUMNS = SPLIT_COLUMNS
"""Each split's column: "RefCOCO val", "RefCOCO+ testA", "RefCOCOg test" (the published CSV's too)."""


def _setting(run: Run) -> str:
    """The run's prompt and answer convention: the family when one was named (its prompt, syntax
    and scale), else the JSON ask in the run's box format and any other answer syntax."""
    family = run.option("model_family")
    return str(family) if family else answer_label(f"json, {run.option('box_format') or '?'}", run)


def lay_published(rows: Sequence[PublishedRow]) -> list[PublishedRow]:
    """The published rows on the board's labels: `prompt` as the family whose prompt produced them
    (as a run's row names it), `reading` as the evaluator that scored them, and each row's own
    table as its source (the CSV keeps the full wording of both)."""
    out = []
    for row in rows:
        cells = {k: v for k, v in row.cells.items() if k not in ("reported_in", "evaluator", "prompt")}
        prompt = row.cells.get("prompt", "")
        cells["prompt"] = (
            "internvl"
            if prompt.startswith("Please provide")
            else "qwen3-vl"
            if prompt.startswith("Locate every")
            else "not stated"
        )
        evaluator = "InternVL's evaluator" if "evaluate_grounding" in row.cells.get("evaluator", "") else "the team's own scorer"
        cells["reading"] = f"published ({evaluator})"
        out.append(PublishedRow(row.benchmark, cells, row.cells.get("reported_in") or row.source))
    return out


def boards(runs: Sequence[Run]) -> list[Board]:
    """One board: per run, the official reading's row and the corrected reading's."""
    board = Board(
        "refcoco",
        "RefCOCO / RefCOCO+ / RefCOCOg (Acc@0.5 %, first box; avg: the mean of the splits)",
        ["model", "prompt", "reading"],
        ["n", *COLUMNS.values(), "avg", "parse fail"],
        counts=frozenset({"n", "parse fail"}),
        headline="avg",
        lay_published=lay_published,
    )
    for run in sorted(runs, key=lambda r: -(pct(at(r.metrics, "corrected", "acc@0.5")) or -1)):
        m = run.metrics
        for reading in ("official", "corrected"):
            values = [
                count(m.get("n")),
                *(pct(at(m, "splits", s, reading, "acc@0.5")) for s in SPLITS),
                pct(at(m, reading, "acc@0.5")),
                count(m.get("parse_fail")) if reading == "corrected" else count(m.get("official_zero_box")),
            ]
            names = [None, *(f"splits/{s}/{reading}/acc@0.5" for s in SPLITS), f"{reading}/acc@0.5", None]
            found = [interval(m, n) if n else None for n in names]
            labels = [run.label, _setting(run), reading]
            board.rows.append(BoardRow(labels, values, str(run.dir), intervals=found, level=ci_level(m)))
    return [board]
