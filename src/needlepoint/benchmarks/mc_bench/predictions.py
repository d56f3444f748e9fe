"""An MC-Bench COCO results file (the authors' format) as a run (contract/predictions.py): one
record per description of the annotation file, its id the description id a model run uses, its
answer the boxes on the pair's two images as a parsed reply holds them.

Each box also keeps the file's own [x, y, w, h] (`bbox_xywh`), which `score` scores as given
(benchmark.results_from_records): a box converted to corners and back is not always the same
floats (x + w - x is not always w), and the file's numbers must be the authors' to the last digit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mc_bench.groundtruth import GroundTruth
from needlepoint.benchmarks.mc_bench.scoring import detections, read_results
from needlepoint.core import status
from needlepoint.core.errors import DataError
from needlepoint.core.geometry import xywh_to_xyxy
from needlepoint.core.records import Record
from needlepoint.core.store import RECORDS, read_records

__all__ = ["read_predictions", "records_of"]


def read_predictions(
    predictions: Path, gt: GroundTruth, ids: list[str] | None, results_file: str
) -> tuple[list[dict[str, Any]], list[str] | None]:
    """The validated results of a COCO results file, or of a run folder (its `results_file`, over
    the samples the run answered, as its metrics.json scores them), and the samples they answer
    (None: every sample of `gt`; `ids` narrows them, e.g. to --styles). Every image id must be
    one of `gt`'s."""
    if predictions.is_dir():
        answered = read_records(predictions / RECORDS)
        if not answered:
            raise DataError(f"{predictions} holds no answered samples; is it a run folder of mc_bench?")
        ids = [s.id for s in gt.samples if s.id in answered and (ids is None or s.id in ids)]
        predictions = predictions / results_file
        results = read_results(predictions) if predictions.exists() else []
    else:
        results = read_results(predictions)
    detections(results, gt)  # refuses an image id the annotation file lacks
    return results, ids


def records_of(results: list[dict[str, Any]], gt: GroundTruth, ids: list[str] | None) -> list[Record]:
    """One record per sample of `gt` (the samples `ids` only, when given), in the file's order,
    with the boxes of `results` on its two images."""
    by_image: dict[int, list[dict[str, Any]]] = {}
    for r in results:
        by_image.setdefault(int(r["image_id"]), []).append(r)
    wanted = set(ids) if ids is not None else None
    records: list[Record] = []
    for s in gt.samples:
        if wanted is not None and s.id not in wanted:
            continue
        boxes = [
            {
                "image": position,
                "group": int(r["category_id"]),
                "bbox": xywh_to_xyxy(r["bbox"]),
                "score": float(r["score"]),
                "bbox_xywh": list(r["bbox"]),
            }
            for position, image_id in enumerate(s.image_ids)
            for r in by_image.get(image_id, [])
        ]
        records.append(
            {
                "id": s.id,
                "status": status.DONE,
                "answer": boxes,
                "parse_error": None,
                "scores": {"boxes": len(boxes), "groups": len({b["group"] for b in boxes})},
            }
        )
    return records
