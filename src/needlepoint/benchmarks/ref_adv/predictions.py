"""Ref-Adv-s predictions in the authors' schema as the records of a run (predictions_run.py): one
record per case, its id the case's `row_idx` as a model run on the release names it, its first box
the answer, the IoU and hit the judgement a model run stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from needlepoint.benchmarks.ref_adv.data import read_box
from needlepoint.benchmarks.ref_adv.export import PREDICTIONS
from needlepoint.benchmarks.ref_adv.scoring import read_authors_predictions
from needlepoint.contract.predictions import PublishedRun
from needlepoint.core import status
from needlepoint.core.errors import DataError
from needlepoint.core.jsonl import read_jsonl
from needlepoint.core.records import Record


def published_run(predictions: Path) -> PublishedRun:
    """The records of an authors' prediction file (validated as `score` validates it)."""
    if predictions.is_dir() or predictions.name == "records.jsonl":
        raise DataError(f"--predictions {predictions} is a run folder already; give the authors' prediction file to write a run")
    rows = read_authors_predictions(predictions)  # refuses a file of several models, repeated rows, bad fields
    records: list[Record] = []
    models: set[str] = set()
    modes: set[str] = set()
    formats: set[str] = set()
    for i, ((where, raw), row) in enumerate(zip(read_jsonl(predictions), rows)):
        idx = raw.get("row_idx", i)
        pred = raw.get("pred_box_xyxy_first")
        box = list(read_box(pred, where, "pred_box_xyxy_first")) if pred else None
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
    options: dict[str, Any] = {"prompt_mode": next(iter(modes))} if len(modes) == 1 else {}
    if len(formats) == 1:  # the box format the model was asked for, as a model run's identity names it
        options["box_format"] = next(iter(formats))
    return PublishedRun(
        model=next(iter(models)) if len(models) == 1 else None,
        records=records,
        files={PREDICTIONS: predictions.read_bytes()},
        options=options,
    )
