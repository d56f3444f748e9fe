"""Ref-Adv-s predictions in the authors' schema as a run (contract/predictions.py): one case per
row, its id the case's `row_idx` as a model run on the release names it, its first box the answer,
the IoU and hit the judgement a model run stores; the case's fields (distractors, flags, image
source) as the file gives them, so that `score` of these records is the authors' numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from needlepoint.benchmarks.ref_adv.data import RefAdvSample, read_box
from needlepoint.benchmarks.ref_adv.export import PREDICTIONS
from needlepoint.benchmarks.ref_adv.scoring import read_authors_predictions
from needlepoint.contract.base import Dataset
from needlepoint.contract.predictions import PredictionsRun
from needlepoint.core import status
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.jsonl import read_jsonl
from needlepoint.core.records import Record

__all__ = ["prediction_file", "predictions_run"]


def _text(row: dict[str, Any], key: str) -> str:
    """A string field of a row, "" when absent or not a string (a field scoring does not read)."""
    value = row.get(key)
    return value if isinstance(value, str) else ""


def prediction_file(predictions: Path) -> Path:
    """The prediction file to read: the given file, or a run folder's file in the authors' schema."""
    if predictions.is_dir() or predictions.name == "records.jsonl":
        folder = predictions if predictions.is_dir() else predictions.parent
        return folder / PREDICTIONS
    return predictions


def predictions_run(predictions: Path) -> PredictionsRun:
    """The cases and records of a prediction file in the authors' schema, or of a run folder's
    (validated as `read_authors_predictions` validates it: one model, one prompt mode, no
    repeated row)."""
    path = prediction_file(predictions)
    rows = read_authors_predictions(path)  # refuses a file of several models, repeated rows, bad fields
    samples: list[RefAdvSample] = []
    records: list[Record] = []
    models: set[str] = set()
    modes: set[str] = set()
    formats: set[str] = set()
    for i, ((where, raw), row) in enumerate(zip(read_jsonl(path), rows)):
        idx = raw.get("row_idx", i)
        pred = raw.get("pred_box_xyxy_first")
        box = list(read_box(pred, where, "pred_box_xyxy_first")) if pred else None
        file_name = _text(raw, "file_name")
        samples.append(
            RefAdvSample(
                id=str(idx),
                row_idx=int(idx),
                caption=_text(raw, "normal_caption"),
                gt=read_box(raw["gt_bbox_xyxy"], where, "gt_bbox_xyxy"),
                width=0.0,  # the authors' schema gives no image size; scoring needs none
                height=0.0,
                distractors=row["distractors"],
                image=ImageRef(key=file_name),
                file_name=file_name,
                image_source=row["image_source"],
                human_authored=row["human_authored"],
                use_negation=row["use_negation"],
            )
        )
        error = row["parse_error"]
        record: Record = {
            "id": str(idx),
            "status": status.DONE,
            "answer": [box] if box else None,
            "parse_error": error,
            "repair_used": bool(row["repair_used"]),
            "scores": {"iou": row["iou"], "hit": row["iou"] >= 0.5},
        }
        if error in status.FAILED:  # the authors' file records a failed request as its parse_error
            record["status"] = error
            record["parse_error"] = None
        records.append(record)
        models.update([raw["model_full_name"]] if raw.get("model_full_name") else [])
        modes.update([raw["prompt_id"]] if raw.get("prompt_id") else [])
        formats.update([raw["pred_box_expected_format"]] if isinstance(raw.get("pred_box_expected_format"), str) else [])
    ids = [s.id for s in samples]
    if len(set(ids)) < len(ids):
        raise DataError(
            f"{path} names a case twice: a row without `row_idx` takes its line's index, which another row gives "
            "as its `row_idx`; give every row its `row_idx`"
        )
    options: dict[str, Any] = {"prompt_mode": next(iter(modes))} if len(modes) == 1 else {}
    if len(formats) == 1:  # the box format the model was asked for, as a model run's identity names it
        options["box_format"] = next(iter(formats))
    return PredictionsRun(
        model=next(iter(models)) if len(models) == 1 else None,
        records=records,
        dataset=Dataset(samples),
        files={PREDICTIONS: path.read_bytes()},
        options=options,
    )
