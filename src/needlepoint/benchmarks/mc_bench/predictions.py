"""An MC-Bench COCO results file (the authors' format) as the records of a run
(predictions_run.py): one record per description of the annotation file, its id the description
id a model run uses, its answer the boxes on the pair's two images as a parsed reply holds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mc_bench.groundtruth import GroundTruth
from needlepoint.benchmarks.mc_bench.scoring import check_results, detections, read_results
from needlepoint.contract.predictions import PublishedRun
from needlepoint.core import status
from needlepoint.core.errors import DataError
from needlepoint.core.files import json_text
from needlepoint.core.geometry import xywh_to_xyxy
from needlepoint.core.records import Record


def published_run(predictions: Path, gt: GroundTruth, ids: list[str] | None, results_file: str) -> PublishedRun:
    """The records of a COCO results file over `gt` (the samples `ids` only, when given); the
    file is kept as `results_file`, where `score` of a run folder reads it."""
    if predictions.is_dir():
        raise DataError(f"--predictions {predictions} is a folder; give a COCO results file to write a run")
    results = check_results(read_results(predictions), str(predictions))
    detections(results, gt)  # refuses an image id the annotation file lacks, as `score` does
    by_image: dict[int, list[dict[str, Any]]] = {}
    for r in results:
        by_image.setdefault(int(r["image_id"]), []).append(r)
    wanted = set(ids) if ids is not None else None
    records: list[Record] = []
    for s in gt.samples:
        if wanted is not None and s.id not in wanted:
            continue
        boxes = [
            {"image": position, "group": int(r["category_id"]), "bbox": xywh_to_xyxy(r["bbox"]), "score": float(r["score"])}
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
    return PublishedRun(model=None, records=records, files={results_file: json_text(results) + "\n"})
