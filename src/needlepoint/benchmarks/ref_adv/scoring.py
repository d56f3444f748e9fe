"""Ref-Adv-s scores: Acc@0.5/0.75/0.9, the distractor bins, the breakdowns and the failure counts,
from neutral rows built from a run's records or read from a prediction file in the authors' schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.ref_adv.data import RefAdvSample, read_box
from needlepoint.contract.base import DataError, answer_faults
from needlepoint.core import status
from needlepoint.core.geometry import iou
from needlepoint.core.jsonl import read_jsonl
from needlepoint.core.numeric import boolean, integer
from needlepoint.core.records import Record, scores

THRESHOLDS = (0.5, 0.75, 0.9)
BINS = (("2-3", 2, 3), ("4-6", 4, 6), (">=7", 7, None))


def _rate(rows: Sequence[dict[str, Any]], threshold: float = 0.5) -> float:
    return sum(r["iou"] >= threshold for r in rows) / len(rows) if rows else 0.0


def _breakdown(rows: Sequence[dict[str, Any]], field: str) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(str(r[field]).lower(), []).append(r)
    return {k: {"n": len(v), "acc@0.5": _rate(v)} for k, v in sorted(groups.items())}


def score_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Metrics from neutral rows: iou, distractors, parse_error, repair_used, status, and the
    breakdown fields use_negation, human_authored, image_source."""
    n = len(rows)
    metrics: dict[str, Any] = {"n": n}
    for t in THRESHOLDS:
        metrics[f"acc@{t}"] = _rate(rows, t)
        metrics[f"hits@{t}"] = sum(r["iou"] >= t for r in rows)
    metrics["bins"] = {}
    for label, lo, hi in BINS:
        in_bin = [r for r in rows if r["distractors"] >= lo and (hi is None or r["distractors"] <= hi)]
        metrics["bins"][label] = {"n": len(in_bin), "acc@0.5": _rate(in_bin)}
    metrics.update(answer_faults(r["parse_error"] for r in rows))  # failed requests apart from parse failures
    metrics["backend_errors"] = metrics["failures"].get(status.BACKEND_ERROR, 0)
    metrics["repair_used"] = sum(bool(r["repair_used"]) for r in rows)
    metrics["repair_share"] = metrics["repair_used"] / n if n else 0.0
    metrics["by_negation"] = _breakdown(rows, "use_negation")
    metrics["by_human_authored"] = _breakdown(rows, "human_authored")
    metrics["by_image_source"] = _breakdown(rows, "image_source")
    return metrics


def _text_field(rec: dict[str, Any], key: str, where: str) -> str:
    """A string field of a prediction row ("" when absent or null); DataError for another type."""
    value = rec.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: `{key}` is {value!r}, not a string; fix the file")
    return value


def _one_kind(path: Path, values: Sequence[str], key: str) -> None:
    """Refuse a file whose rows name more than one value of `key` (another model, another prompt
    mode): their numbers averaged together describe no run. Rows that leave `key` out count apart."""
    counts: dict[str, int] = {}
    for value in values:
        if value:
            counts[value] = counts.get(value, 0) + 1
    if len(counts) > 1:
        listed = ", ".join(f"{v!r}: {n} rows" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        raise DataError(f"{path} mixes rows of {len(counts)} values of `{key}` ({listed}); score one run's file at a time")


def read_authors_predictions(path: Path) -> list[dict[str, Any]]:
    """Rows of a prediction JSONL in the authors' schema, as neutral scoring rows.

    `first_iou` is recomputed from `gt_bbox_xyxy` and `pred_box_xyxy_first`. Every field has one
    rule (numeric.py): `distractor_count` a whole number from 0, the flags true or false (or
    absent), the labels strings. A file that mixes models or prompt modes, or repeats a `row_idx`,
    is refused with the counts: its numbers would describe no single run.
    """
    rows: list[dict[str, Any]] = []
    kinds: dict[str, list[str]] = {"model_full_name": [], "prompt_id": []}
    first_line: dict[int, str] = {}
    repeated: list[str] = []
    fix = "fix the file"
    for where, rec in read_jsonl(path):
        missing = [k for k in ("gt_bbox_xyxy", "pred_box_xyxy_first", "distractor_count", "parse_error") if k not in rec]
        if missing:
            raise DataError(f"{where} lacks {', '.join(missing)}; is this a Ref-Adv prediction file?")
        pred = read_box(rec["pred_box_xyxy_first"], where, "pred_box_xyxy_first") if rec["pred_box_xyxy_first"] else None
        gt = read_box(rec["gt_bbox_xyxy"], where, "gt_bbox_xyxy")
        if "row_idx" in rec:
            idx = integer(rec["row_idx"], where, "`row_idx`", fix)
            line = where.rpartition(" ")[2]
            if idx in first_line:
                repeated.append(f"line {line} repeats row_idx {idx} of line {first_line[idx]}")
            first_line.setdefault(idx, line)
        for key, seen in kinds.items():
            seen.append(_text_field(rec, key, where))
        error = rec["parse_error"]
        if error is not None and not isinstance(error, str):
            raise DataError(f"{where}: `parse_error` is {error!r}, not a string (empty when none); {fix}")
        rows.append(
            {
                "iou": iou(pred, gt) if pred else 0.0,
                "distractors": integer(rec["distractor_count"], where, "`distractor_count`", fix),
                "parse_error": error or None,
                "repair_used": boolean(rec.get("retry_followup_used"), where, "`retry_followup_used`", fix),
                "use_negation": boolean(rec.get("use_negation"), where, "`use_negation`", fix),
                "human_authored": boolean(rec.get("human_authored"), where, "`human_authored`", fix),
                "image_source": _text_field(rec, "image_source", where),
            }
        )
    if not rows:
        raise DataError(f"{path} holds no predictions")
    if repeated:
        raise DataError(
            f"{path} holds {len(repeated)} duplicate row(s) ({repeated[0]}); remove them: each would count again in every number"
        )
    for key, seen in kinds.items():
        _one_kind(path, seen, key)
    return rows


def final_error(record: Record) -> str | None:
    """What stands in for a record's answer: the kind of request failure (status.FAILED) when the
    request failed, else the parse error (None when the answer parsed)."""
    if record.get("status") in status.FAILED:
        return str(record["status"])
    return record.get("parse_error")


def sample_rows(samples: Sequence[RefAdvSample], records: Sequence[Record]) -> list[dict[str, Any]]:
    """Neutral scoring rows (score_rows) of a run's records, with the samples' fields."""
    by_id = {s.id: s for s in samples}
    rows = []
    for rec in records:
        s = by_id[rec["id"]]
        rows.append(
            {
                "iou": scores(rec).get("iou", 0.0),
                "distractors": s.distractors,
                "parse_error": final_error(rec),
                "repair_used": rec.get("repair_used", False),
                "use_negation": s.use_negation,
                "human_authored": s.human_authored,
                "image_source": s.image_source,
            }
        )
    return rows


def bin_label(distractors: int) -> str:
    """The distractor bin (BINS) a case falls in; "<2" below the first."""
    return next((b for b, lo, hi in BINS if distractors >= lo and (hi is None or distractors <= hi)), "<2")
