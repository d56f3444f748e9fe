"""Ref-Adv-s predictions in the authors' schema (AUTHORS_FIELDS), one row per answered case, so
their scripts and `needlepoint score` read a run like one of theirs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from needlepoint.benchmarks.ref_adv.data import RefAdvSample
from needlepoint.benchmarks.ref_adv.scoring import final_error
from needlepoint.core.files import AtomicFile, json_text
from needlepoint.core.records import Record, scores

PREDICTIONS = "predictions_ref_adv.jsonl"
AUTHORS_FIELDS = (
    "row_idx",
    "file_name",
    "normal_caption",
    "image_source",
    "human_authored",
    "use_negation",
    "distractor_count",
    "gt_bbox_xyxy",
    "pred_box_xyxy_first",
    "first_iou",
    "first_hit",
    "parse_error",
    "retry_followup_used",
    "model_full_name",
    "prompt_id",
    "pred_box_expected_format",
)


def write_predictions(
    run_dir: Path,
    samples: Iterable[RefAdvSample],
    records: Sequence[Record],
    model: str,
    prompt_mode: str,
    box_format: str | None,
) -> Path:
    """Write run_dir/predictions_ref_adv.jsonl atomically, in the samples' order; cases without a
    record are left out."""
    by_id = {r["id"]: r for r in records}
    path = run_dir / PREDICTIONS
    with AtomicFile(path) as fh:
        for s in samples:
            rec = by_id.get(s.id)
            if rec is None:
                continue
            boxes = rec.get("answer") or []
            row = {
                "row_idx": s.row_idx,
                "file_name": s.file_name,
                "normal_caption": s.caption,
                "image_source": s.image_source,
                "human_authored": s.human_authored,
                "use_negation": s.use_negation,
                "distractor_count": s.distractors,
                "gt_bbox_xyxy": list(s.gt),
                "pred_box_xyxy_first": list(boxes[0]) if boxes else [],
                "first_iou": scores(rec).get("iou", 0.0),
                "first_hit": bool(scores(rec).get("hit")),
                "parse_error": final_error(rec) or "",
                "retry_followup_used": bool(rec.get("repair_used")),
                "model_full_name": model,
                "prompt_id": prompt_mode,
                "pred_box_expected_format": box_format,
            }
            fh.write(json_text(row) + "\n")
    return path
