"""MC-Bench scoring entry point: COCO results in, official + corrected metrics and analyses out.

Also reads and writes COCO results files (`[{image_id, category_id, bbox, score}]`), the format
the authors' `eval_mc_bench.py` accepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from needlepoint.benchmarks.mc_bench.cocoeval import Detections
from needlepoint.benchmarks.mc_bench.corrected import evaluate_corrected
from needlepoint.benchmarks.mc_bench.groundtruth import STYLES, GroundTruth
from needlepoint.benchmarks.mc_bench.official import score_official
from needlepoint.benchmarks.mc_bench.parse import GROUP_MAX
from needlepoint.contract.base import DataError
from needlepoint.core.files import json_text, write_atomic
from needlepoint.core.jsonl import read_json
from needlepoint.core.numeric import integer
from needlepoint.core.numeric import is_finite as is_number
from needlepoint.core.text import writable


def score_results(gt: GroundTruth, results: list[dict[str, Any]], sample_ids: Iterable[str] | None = None) -> dict[str, Any]:
    """Score COCO results against the ground truth, optionally on a subset of samples.

    With `sample_ids` (description ids as strings) the ground truth is cut to those samples, as if
    the authors' evaluator were given an annotation file of those samples only, and predictions
    on the other images are left out. The official protocol is also run on each prompt style's
    samples alone (the paper's per-style columns). Returns JSON-ready
    `{"official": {...}, "corrected": {...}, "analyses": {...}, "counts": {...}}`.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # boxes near float's limit: inf areas, no warnings
        return _score(gt, detections(results, gt), sample_ids)


def _score(gt: GroundTruth, dt: Detections, sample_ids: Iterable[str] | None) -> dict[str, Any]:
    if sample_ids is not None:
        gt, dt = _restrict(gt, dt, sample_ids)
    corrected = evaluate_corrected(gt, dt)
    official = score_official(gt, dt)
    official["by_style"] = {}
    for style in STYLES:
        ids = [s.id for s in gt.samples if s.style == style]
        if ids:
            official["by_style"][style] = {"samples": len(ids), **_headline(score_official(*_restrict(gt, dt, ids)))}
    groups = {c for c, _ in gt.categories}
    with_gt = {b.image_id for b in gt.boxes}
    positive = sum(1 for s in gt.samples if s.image_ids[0] in with_gt or s.image_ids[1] in with_gt)
    return {
        "official": official,
        "corrected": {**corrected.scores(), "unassigned_groups": corrected.unassigned_groups},
        "analyses": corrected.analyses(),
        "counts": {
            "samples": len(gt.samples),
            "positive_samples": positive,
            "negative_samples": len(gt.samples) - positive,
            "images": len(gt.images),
            "gt_boxes": len(gt.boxes),
            "predictions": len(dt),
            "predictions_outside_groups": int(np.count_nonzero(~np.isin(dt.category_id, list(groups)))),
        },
    }


def _restrict(gt: GroundTruth, dt: Detections, sample_ids: Iterable[str]) -> tuple[GroundTruth, Detections]:
    """The ground truth of some samples and the detections on their images: what the authors'
    evaluator sees when given an annotation file of those samples only."""
    gt = gt.subset(sample_ids)
    return gt, dt.take(np.isin(dt.image_id, [im.id for im in gt.images]))


def _headline(official: dict[str, Any]) -> dict[str, Any]:
    return {"acc": official["acc"], "ap50": official["ap50"], "regrouping": official["regrouping"]}


def detections(results: Sequence[dict[str, Any]], gt: GroundTruth) -> Detections:
    """Validated results as columns; every image id must be one of the ground truth's."""
    checked = check_results(results)
    n = len(checked)
    dt = Detections(
        image_id=np.fromiter((r["image_id"] for r in checked), np.int64, n),
        category_id=np.fromiter((r["category_id"] for r in checked), np.int64, n),
        bbox=np.array([r["bbox"] for r in checked], dtype=np.float64).reshape(n, 4),
        score=np.fromiter((r["score"] for r in checked), np.float64, n),
    )
    known = np.isin(dt.image_id, [im.id for im in gt.images])
    if not known.all():
        i = int(np.flatnonzero(~known)[0])
        raise DataError(
            f"prediction {i} names image id {int(dt.image_id[i])}, which is not in the ground truth "
            f"({gt.source}); predictions must use the image ids of that annotation file"
        )
    return dt


CATEGORY_MAX = 100
"""The largest `category_id` a COCO results file may hold (docs/evaluating.md: 1 to 100). MC-Bench's
ground truth uses groups 1 to 7 and a pair shows a handful; a file with `category_id: 1000000` is no
answer to it. A model's own reply is bounded by parse.GROUP_MAX only (a group number no ground
truth has is a false positive, never the run's error)."""


def check_results(results: Any, source: str = "the results", category_max: int = GROUP_MAX) -> list[dict[str, Any]]:
    """Validated copies of COCO results entries (score defaults to 1.0); DataError on a bad one.
    `category_max`: the largest group accepted (a file read from disk: CATEGORY_MAX)."""
    if not isinstance(results, list):
        raise DataError(f"{source} is not a JSON list of predictions; write [{{image_id, category_id, bbox, score}}, ...]")
    out = []
    for i, r in enumerate(results):
        where = f"prediction {i} in {source}"
        if not isinstance(r, dict):
            raise DataError(f"{where} is not a JSON object; each entry needs image_id, category_id and bbox")
        if "image_id" not in r or not _is_int(r["image_id"]):
            raise DataError(f"{where} has image_id {_shown(r.get('image_id'))}, which is not an integer; fix or drop that entry")
        if "category_id" not in r:
            raise DataError(f"{where} has no category_id (its group, 1..{category_max}); fix or drop that entry")
        integer(
            r["category_id"],
            where,
            "category_id (the group)",
            f"groups are numbered from 1 to {category_max}; fix or drop that entry",
            1,
            category_max,
        )
        bbox = r.get("bbox")
        if not isinstance(bbox, (list, tuple)) or len(bbox) != 4 or not all(is_number(v) for v in bbox):
            raise DataError(
                f"{where} has bbox {_shown(bbox)}, which is not four finite numbers [x, y, w, h]; fix or drop that entry"
            )
        score = r.get("score", 1.0)
        if not is_number(score):
            raise DataError(f"{where} has score {_shown(score)}, which is not a finite number; fix it or leave it out (1.0)")
        out.append(
            {
                "image_id": int(r["image_id"]),
                "category_id": int(r["category_id"]),
                "bbox": [_plain(v) for v in bbox],
                "score": _plain(score),
            }
        )
    return out


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a COCO results JSON file."""
    path = Path(path)
    return check_results(read_json(path, "give the path of a COCO results JSON file"), str(path), CATEGORY_MAX)


def write_results(path: str | Path, results: Sequence[dict[str, Any]]) -> None:
    """Write COCO results that the authors' eval_mc_bench.py accepts.

    That script cannot read an empty list (it looks at the first entry), so a run without a single
    box raises DataError instead of writing a file that would crash it.
    """
    checked = check_results(list(results), str(path))
    if not checked:
        raise DataError(
            f"no results file written to {path}: the run has no boxes at all, and the authors' "
            "eval_mc_bench.py cannot read an empty results list"
        )
    write_atomic(path, json_text(checked), fsync=True)


def _shown(v: Any) -> str:
    """A refused value as a message quotes it: writable, shortened."""
    text = writable(repr(v))
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(v: Any) -> int | float:
    """A JSON-writable Python number (numpy scalars unwrapped, type kept)."""
    return v.item() if isinstance(v, (np.integer, np.floating)) else v


def _is_int(v: Any) -> bool:
    """An integer id; an integral float (12.0) counts, as it does for pycocotools' dict lookups."""
    if isinstance(v, float):
        return v.is_integer() and -(2**63) <= v < 2**63
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and bool(-(2**63) <= v < 2**63)
