"""RefCOCO scores: per split and per reading (`official`, `corrected`), Acc@0.5 (the headline),
Acc@0.75, Acc@0.9 and the mean IoU; over the splits, their plain mean as the model cards print it
("avg"); the parse failures and the official reading's quirks counted.

A scoring row is neutral: split, the corrected IoU, the official IoU, whether the official box was
the zero box of a failed parse or was read on the 0-1 scale, the parse error, the repair mark.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from needlepoint.benchmarks.refcoco.data import SPLITS, RefCocoSample
from needlepoint.contract import Record, answer_faults, scores, status

__all__ = ["READINGS", "THRESHOLDS", "final_error", "sample_rows", "score_rows", "split_block"]

THRESHOLDS = (0.5, 0.75, 0.9)
READINGS = ("official", "corrected")
IOU_KEY = {"official": "official_iou", "corrected": "iou"}


def _finite(value: Any) -> float:
    """A stored IoU as a number (NaN, from the official reading's empty union, or junk: 0)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else 0.0


def reading_block(rows: Sequence[dict[str, Any]], reading: str) -> dict[str, Any]:
    """Acc@t (and the hits behind it) and the mean IoU of one reading over `rows`."""
    ious = [_finite(r[IOU_KEY[reading]]) for r in rows]
    n = len(ious)
    block: dict[str, Any] = {}
    for t in THRESHOLDS:
        hits = sum(v >= t for v in ious)
        block[f"acc@{t}"] = hits / n if n else 0.0
        block[f"hits@{t}"] = hits
    block["mean_iou"] = sum(ious) / n if n else 0.0
    return block


def split_block(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One split's numbers: n, each reading's block, its parse failures and official quirks."""
    return {
        "n": len(rows),
        **{reading: reading_block(rows, reading) for reading in READINGS},
        "parse_fail": sum(bool(r["parse_error"]) for r in rows),
        "official_zero_box": sum(bool(r["official_zero"]) for r in rows),
        "official_unit_scale": sum(bool(r["official_unit"]) for r in rows),
    }


def score_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Metrics from neutral rows (see the module's note): `splits` (each split's block, in the
    cards' order), then per reading the mean over the splits present of each split figure
    (`official/acc@0.5` is the cards' average); `acc@0.5` etc. at the top are the corrected
    reading's, the headline a comparison is about."""
    by_split: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_split.setdefault(r["split"], []).append(r)
    splits = {s: split_block(by_split[s]) for s in SPLITS if s in by_split}
    metrics: dict[str, Any] = {"n": len(rows), "splits": splits}
    for reading in READINGS:
        block: dict[str, Any] = {"splits": len(splits)}
        for key in (*(f"acc@{t}" for t in THRESHOLDS), "mean_iou"):
            values = [b[reading][key] for b in splits.values()]
            block[key] = sum(values) / len(values) if values else 0.0
        metrics[reading] = block
    for t in THRESHOLDS:
        metrics[f"acc@{t}"] = metrics["corrected"][f"acc@{t}"]
    metrics.update(answer_faults(r["parse_error"] for r in rows))
    metrics["official_zero_box"] = sum(bool(r["official_zero"]) for r in rows)
    metrics["official_unit_scale"] = sum(bool(r["official_unit"]) for r in rows)
    metrics["repair_used"] = sum(bool(r["repair_used"]) for r in rows)
    return metrics


def final_error(record: Record) -> str | None:
    """What stands in for a record's answer: the request failure's kind, else the parse error."""
    if record.get("status") in status.FAILED:
        return str(record["status"])
    error = record.get("parse_error")
    return str(error) if error else None


def sample_rows(samples: Sequence[RefCocoSample], records: Sequence[Record]) -> list[dict[str, Any]]:
    """Neutral scoring rows of a run's records, in the records' order."""
    by_id = {s.id: s for s in samples}
    rows = []
    for rec in records:
        got = scores(rec)
        rows.append(
            {
                "split": by_id[rec["id"]].split,
                "iou": got.get("iou", 0.0),
                "official_iou": got.get("official_iou", 0.0),
                "official_zero": got.get("official_zero_box", False),
                "official_unit": got.get("official_unit_scale", False),
                "parse_error": final_error(rec),
                "repair_used": rec.get("repair_used", False),
            }
        )
    return rows
