"""MC-Bench's official metrics, exactly as the authors' `eval_mc_bench.py` computes them.

That script (1) regroups the predictions of one image pair, (2) runs COCOeval ("bbox") and takes a
weighted AP50, (3) counts image-level accuracy over pairs. Its quirks are kept on purpose, so that
numbers agree with published ones to the last digit:

- Regrouping visits every image with a `group 2` box in `list(set(...))` order, but re-reads the
  results file before each relabelling, so only the relabelling of the LAST image visited
  survives (with the released annotations: images 505 and 504). Only that one is computed here.
- Predicted groups are taken to be numbered 1..n (n = number of distinct predicted ids on the
  pair); group i is compared with, then renamed to, the i-th GT group of the best permutation,
  one renaming after another, so a box renamed early can be renamed again (chained).
- COCOeval treats a match to the GT box with annotation id 0 as no match (see cocoeval.py).
- AP of the k-th category in the file's category list is read from the k-th row of COCOeval's
  (id-sorted) precision array, and weighted by that category's share of all GT boxes.
- Acc pairs the GT images in list order, two at a time.

Where the script crashes (no image with a `group 2` box; an empty results list), we score
instead: regrouping is reported as "none", and an empty list gets AP 0 and the accuracy of
answering nothing.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from needlepoint.benchmarks.mc_bench.cocoeval import Detections, average_precision, match, precision, weighted_ap
from needlepoint.benchmarks.mc_bench.groundtruth import GroundTruth
from needlepoint.core.assignment import linear_sum_assignment
from needlepoint.core.geometry import iou_matrix


@dataclass(frozen=True)
class Regrouping:
    """The relabelling that survives: on `image_id` and its pair, predicted group `old` becomes
    `new` for each (old, new) in `relabel`, applied in order."""

    image_id: int
    pair_image_id: int
    relabel: tuple[tuple[int, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {"image_id": self.image_id, "pair_image_id": self.pair_image_id, "relabel": [list(r) for r in self.relabel]}


def regroup_images(gt: GroundTruth) -> list[int]:
    """The image ids the authors' loop visits, in its order:
    `coco.getImgIds(catIds=coco.getCatIds('group 2'))` rebuilt with the same set operations."""
    cat_ids = [c for c, name in gt.categories if name == "group 2"]
    if not cat_ids:
        return [im.id for im in gt.images]  # pycocotools: no category ids selects every image
    ids: set[int] = set()
    for i, cat in enumerate(cat_ids):
        images = [b.image_id for b in gt.boxes if b.category_id == cat]  # catToImgs order
        if i == 0 and not ids:
            ids = set(images)
        else:
            ids &= set(images)
    return list(ids)


def find_regrouping(gt: GroundTruth, dt: Detections) -> Regrouping | None:
    """The surviving relabelling, or None where no image has a `group 2` box."""
    visited = regroup_images(gt)
    if not visited:
        return None
    image = visited[-1]
    pair = gt.pair_image_id(image)
    g = gt.arrays
    gt_cats = [b.category_id for b in gt.boxes if b.image_id == image]
    gt_cats += [b.category_id for b in gt.boxes if b.image_id == pair]
    gt_cats = list(set(gt_cats))
    on_pair = (dt.image_id == image) | (dt.image_id == pair)
    n_groups = len(set(dt.category_id[on_pair].tolist()))
    evaluated = {c for c, _ in gt.categories}

    matched: dict[tuple[int, int, int], list[float]] = {}

    def ious(group: int, gt_cat: int, img: int) -> list[float]:
        """IoUs of the Hungarian matching of `group`'s predicted boxes to `gt_cat`'s on `img`."""
        key = (group, gt_cat, img)
        if key not in matched:
            d = dt.bbox[(dt.image_id == img) & (dt.category_id == group)] if group in evaluated else ()
            b = g.bbox[(g.image_id == img) & (g.category_id == gt_cat)]
            out: list[float] = []
            if len(d) and len(b):
                m = iou_matrix(d, b, fmt="xywh")
                rows, cols = linear_sum_assignment(-m)
                out = m[rows, cols].tolist()
            matched[key] = out
        return matched[key]

    perms = list(itertools.permutations(gt_cats, n_groups))
    best: tuple[int, ...] = ()
    best_score = -np.inf
    for perm in perms:
        values: list[float] = []
        for group, gt_cat in enumerate(perm, start=1):
            values += ious(group, gt_cat, image)
            values += ious(group, gt_cat, pair)
        total = 0.0
        for v in values:  # the authors' sum(), left to right
            total += v
        score = total / len(values) if values else 0.0
        if score > best_score:  # the first maximum wins
            best, best_score = perm, score
    return Regrouping(image, pair, tuple((old, new) for old, new in enumerate(best, start=1)))


def apply_regrouping(dt: Detections, regrouping: Regrouping) -> Detections:
    """Rename the groups on the regrouped pair, one (old, new) after another (chained)."""
    cats = dt.category_id.copy()
    on_pair = (dt.image_id == regrouping.image_id) | (dt.image_id == regrouping.pair_image_id)
    for old, new in regrouping.relabel:
        cats[on_pair & (cats == old)] = new
    return dt.replace_categories(cats)


def image_accuracy(gt: GroundTruth, dt: Detections) -> float:
    """The official Acc: GT images in list order two at a time; a pair is right when each image
    has a prediction (of any category) exactly when it has a GT box."""
    ids = np.array([im.id for im in gt.images], dtype=np.int64)
    agree = np.isin(ids, gt.arrays.image_id) == np.isin(ids, dt.image_id)
    correct = int(np.count_nonzero(agree[0::2] & agree[1::2]))
    return correct / (len(ids) / 2)


def score_official(gt: GroundTruth, dt: Detections) -> dict[str, Any]:
    """Weighted AP50, Acc, AP50 per group and the regrouping applied, as JSON-ready values."""
    regrouping = find_regrouping(gt, dt)
    if regrouping is not None:
        dt = apply_regrouping(dt, regrouping)
    file_cats = [c for c, _ in gt.categories]
    sorted_cats = sorted(file_cats)
    m = match(gt.arrays, dt, [im.id for im in gt.images], sorted_cats, ("all",), id0_artefact=True)
    curves = precision(m)[0]
    aps = [average_precision(curves[k]) for k in range(len(sorted_cats))]
    counts = [int(np.count_nonzero(gt.arrays.category_id == c)) for c in file_cats]
    return {
        "ap50": weighted_ap(aps, counts),  # aps by sorted position, counts by file position
        "acc": image_accuracy(gt, dt),
        "ap50_per_group": {str(c): ap for c, ap in zip(sorted_cats, aps, strict=True)},
        "regrouping": "none" if regrouping is None else regrouping.to_json(),
    }
