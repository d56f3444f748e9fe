"""RefCOCO metrics laid out for people: one row per split and the mean over the splits (the
model cards' average), each figure under both readings side by side; then what the official
reading did that the corrected one does not (zero boxes for failed parses, 0-1 reads)."""

from __future__ import annotations

from typing import Any

from needlepoint.benchmarks.refcoco.scoring import READINGS, THRESHOLDS
from needlepoint.contract import Table, coverage_note, has_answers, no_answers_table, percent, run_counts

__all__ = ["refcoco_tables"]

TITLE = "RefCOCO / RefCOCO+ / RefCOCOg"
FIGURES = (*(f"acc@{t}" for t in THRESHOLDS), "mean_iou")
LABELS = {"acc@0.5": "Acc@0.5", "acc@0.75": "Acc@0.75", "acc@0.9": "Acc@0.9", "mean_iou": "mIoU"}


def _pct(value: Any) -> float | None:
    return percent(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _cells(block: Any) -> list[float | None]:
    block = block if isinstance(block, dict) else {}
    return [_pct((block.get(r) or {}).get(f)) if isinstance(block.get(r), dict) else None for f in FIGURES for r in READINGS]


def refcoco_tables(metrics: dict[str, Any]) -> list[Table]:
    """The splits table (an incomplete run's title says how much was answered; a run with nothing
    answered gets a sentence instead), then the readings' counts."""
    if not has_answers(metrics):
        return [no_answers_table(TITLE, metrics)]
    note = coverage_note(metrics)
    columns = ["split", "n", *(f"{LABELS[f]} {r}" for f in FIGURES for r in READINGS), "parse fail"]
    main = Table(f"{TITLE} (%, first box; {note})" if note else f"{TITLE} (%, first box)", columns)
    found = metrics.get("splits")
    splits: dict[str, Any] = found if isinstance(found, dict) else {}
    for name, block in splits.items():
        if isinstance(block, dict):
            main.rows.append([name, block.get("n"), *_cells(block), block.get("parse_fail")])
    main.rows.append([f"avg of {len(splits)}", metrics.get("n"), *_cells(metrics), metrics.get("parse_fail")])
    counts = run_counts(metrics)
    readings = Table(
        "RefCOCO readings",
        ["official: zero boxes (failed parses)", "official: read as 0-1 (sum < 4)", "corrected: parse errors", "failed requests"],
        [
            [
                metrics.get("official_zero_box"),
                metrics.get("official_unit_scale"),
                metrics.get("parse_fail"),
                counts[1] if counts is not None else metrics.get("failed"),
            ]
        ],
    )
    return [main, readings]
