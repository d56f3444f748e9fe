"""Ref-Adv-s metrics laid out for people: the authors' results table, then the breakdowns."""

from __future__ import annotations

from typing import Any

from needlepoint.contract.base import Table, percent
from needlepoint.contract.coverage import coverage_note, has_answers, no_answers_table, run_counts

__all__ = ["BIN_LABELS", "ref_tables"]

BIN_LABELS = ("2-3", "4-6", ">=7")  # the distractor-count bins of ref_adv.scoring.BINS
TITLE = "Ref-Adv-s"


def _get(metrics: dict[str, Any], *keys: str) -> Any:
    value: Any = metrics
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _pct(value: Any) -> float | None:
    return percent(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def ref_tables(metrics: dict[str, Any]) -> list[Table]:
    """The authors' table, then the extra breakdowns; an incomplete run's title says how many
    requested samples were answered, and a run with nothing answered gets a sentence instead."""
    if not has_answers(metrics):
        return [no_answers_table(TITLE, metrics)]
    note = coverage_note(metrics)
    main = Table(
        f"{TITLE}; {note}" if note else TITLE,
        ["n", "Acc@0.5", "Acc@0.75", "Acc@0.9", *BIN_LABELS, "parse fail", "repair turns", "failed requests"],
        [
            [
                metrics.get("n"),
                *(_pct(metrics.get(f"acc@{t}")) for t in ("0.5", "0.75", "0.9")),
                *(_pct(_get(metrics, "bins", b, "acc@0.5")) for b in BIN_LABELS),
                metrics.get("parse_fail"),
                metrics.get("repair_used"),
                _failed(metrics),
            ]
        ],
    )
    extra = Table("Ref-Adv-s breakdowns (Acc@0.5)", ["by", "value", "n", "Acc@0.5"])
    for name in ("by_negation", "by_human_authored", "by_image_source"):
        block = metrics.get(name)
        for value, cell in block.items() if isinstance(block, dict) else ():
            extra.rows.append([name[3:], value, _get(cell, "n"), _pct(_get(cell, "acc@0.5"))])
    return [main, extra]


def _failed(metrics: dict[str, Any]) -> Any:
    """Failed requests: the run block's count (failed samples are not scored, so the scores' own
    count is 0); older metrics.json files kept it beside the scores."""
    counts = run_counts(metrics)
    return counts[1] if counts is not None else metrics.get("failed", metrics.get("backend_errors"))
