"""InternVL's saved answers as a run (contract/predictions.py): `evaluate_grounding.py` writes each
split's outputs as `{split}_{yymmddHHMMSS}.json`, a JSON list of {"answer", "gt_bbox", "hw"}, and
a needlepoint run exports the same as `internvl_{split}.json`. Each answer is read as a model's
reply (both readings), against the target and image size the file carries, so that `needlepoint
score refcoco --predictions DIR --model-family internvl` gives the evaluator's own "Precision @ 1"
per split under `official`, with the corrected reading beside it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.refcoco.data import SPLITS, RefCocoSample, image_side, target_box
from needlepoint.contract import DataError, Dataset, ImageRef, Parsed, PredictionsRun, Record, read_json, status

__all__ = ["prediction_files", "predictions_run"]

_NAME = re.compile(r"^(?:internvl_)?(?P<split>refcoco(?:\+|g)?_(?:val|testA|testB|test))(?:_\d{12})?\.json$")


def prediction_files(predictions: Path) -> dict[str, Path]:
    """The saved answers of each split: a file named for its split, or a folder of them (a split
    saved twice, the newest file name, InternVL's time stamp, wins)."""
    files = sorted(predictions.iterdir()) if predictions.is_dir() else [predictions]
    found: dict[str, Path] = {}
    for path in files:
        match = _NAME.match(path.name)
        if match and match["split"] in SPLITS and path.is_file():
            found[match["split"]] = path
    if not found:
        raise DataError(
            f"{predictions} holds no saved RefCOCO answers (refcoco_val_<time>.json as InternVL's evaluator names them, "
            "or internvl_refcoco_val.json in a run folder)"
        )
    return found


def predictions_run(
    predictions: Path, parse: Callable[[RefCocoSample, str], Parsed], judge: Callable[..., dict[str, Any]]
) -> PredictionsRun:
    """The samples and records of the saved answers, read with the benchmark's `parse` and
    `judge` (a run's own path from reply to scores)."""
    samples: list[RefCocoSample] = []
    records: list[Record] = []
    files: dict[str, str | bytes] = {}
    found = prediction_files(predictions)
    for split in SPLITS:
        path = found.get(split)
        if path is None:
            continue
        rows = read_json(path, "point --predictions at InternVL's saved answers")
        if not isinstance(rows, list):
            raise DataError(f"{path} holds no list of answers; is it a file evaluate_grounding.py saved?")
        for i, row in enumerate(rows):
            where = f"{path} item {i}"
            if not isinstance(row, dict) or not {"answer", "gt_bbox", "hw"} <= set(row):
                raise DataError(
                    f"{where} is not an object with answer, gt_bbox and hw; is it a file evaluate_grounding.py saved?"
                )
            hw = row["hw"]
            if not isinstance(hw, list) or len(hw) != 2:
                raise DataError(f"{where}: `hw` must be [height, width]; fix the file")
            sample = RefCocoSample(
                id=f"{split}/{i}",
                split=split,
                index=i,
                caption="",
                gt=target_box(row["gt_bbox"], where, "gt_bbox"),
                width=image_side(hw[1], where, "hw"),
                height=image_side(hw[0], where, "hw"),
                image=ImageRef(key=""),
            )
            text = row["answer"] if isinstance(row["answer"], str) else ""
            parsed = parse(sample, text)
            samples.append(sample)
            records.append(
                {
                    "id": sample.id,
                    "status": status.DONE,
                    "answer": parsed.answer,
                    "parse_error": parsed.error,
                    "repair_used": False,
                    "scores": judge(sample, parsed),
                }
            )
        files[f"internvl_{split}.json"] = path.read_bytes()
    return PredictionsRun(model=None, records=records, dataset=Dataset(samples), files=files)
