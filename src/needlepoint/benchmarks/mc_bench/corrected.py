"""MC-Bench's corrected metrics, as the paper describes them, and the paper's analyses (4.4).

The corrected protocol differs from the official one in three ways only:

- Groups are assigned per sample (image pair): Hungarian assignment between the predicted groups
  and the GT groups, where pairing predicted group p with GT group g is worth the sum, over the two
  images, of the IoUs of the Hungarian box matching between p's and g's boxes. Every predicted
  category id on the pair is a group; predicted groups are ordered by their first box in the
  results list, so renumbering them changes nothing.
- Unassigned predicted groups (more predicted than GT groups) become false positives, never
  dropped: they take, in that order, the ids within the GT's category ids (1..7) that the sample's
  GT does not use, smallest first, starting over when they run out. A sample without GT boxes
  thus sends its groups to 1, 2, ...; an extra group beside GT group 1 goes to 2, where the
  official protocol would also count it. If the sample's GT uses every id (no free id), they
  cycle over all ids.
- COCO AP50 scores every match (no annotation-id-0 artefact), and Acc pairs each description's
  own two images.

Analyses all use the corrected protocol: per prompt style (the protocol on that style's samples),
group-agnostic AP50 (all groups one category), AP50 by object size (weights: each group's share
of the GT boxes in that size range), and counts of predicted groups and boxes. Positive and
negative samples are told apart by their GT boxes, not the release flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from needlepoint.benchmarks.mc_bench.cocoeval import (
    Detections,
    GtBoxes,
    Matched,
    average_precision,
    match,
    precision,
    weighted_ap,
)
from needlepoint.benchmarks.mc_bench.groundtruth import STYLES, GroundTruth
from needlepoint.core.geometry import iou_matrix

SIZES: tuple[str, ...] = ("small", "medium", "large")


def sample_index(gt: GroundTruth, image_id: np.ndarray) -> np.ndarray:
    """The position in `gt.samples` of the sample that owns each image id."""
    owner = {i: k for k, s in enumerate(gt.samples) for i in s.image_ids}
    return np.array([owner[i] for i in image_id.tolist()], dtype=np.int64)


def relabel_groups(gt: GroundTruth, dt: Detections) -> tuple[np.ndarray, int]:
    """Each detection's category under the per-sample group assignment (rule in the module
    docstring), and how many predicted groups were left without a GT group."""
    if not len(dt):
        return dt.category_id.copy(), 0
    d_sample = sample_index(gt, dt.image_id)
    # predicted groups: distinct (sample, category), ordered by sample, then first box in the file
    key = np.lexsort((dt.category_id, d_sample))
    ks, kc = d_sample[key], dt.category_id[key]
    start = np.r_[True, (ks[1:] != ks[:-1]) | (kc[1:] != kc[:-1])]
    first = np.minimum.reduceat(key, np.flatnonzero(start))
    canon = np.lexsort((first, ks[start]))
    rank = np.empty_like(canon)
    rank[canon] = np.arange(len(canon))
    group_of_dt = np.empty(len(dt), np.int64)
    group_of_dt[key] = rank[np.cumsum(start) - 1]
    g_sample = ks[start][canon]

    gtb = gt.arrays
    targets_of: dict[int, set[int]] = {}
    for s, c in zip(sample_index(gt, gtb.image_id).tolist(), gtb.category_id.tolist(), strict=True):
        targets_of.setdefault(s, set()).add(c)
    ids = sorted(c for c, _ in gt.categories)

    new_cat = np.empty(len(g_sample), np.int64)
    unassigned = 0
    bounds = np.flatnonzero(np.r_[True, g_sample[1:] != g_sample[:-1], True])
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        sample = gt.samples[int(g_sample[lo])]
        targets = sorted(targets_of.get(int(g_sample[lo]), ()))
        if not targets:
            assigned: dict[int, int] = {}
        elif hi - lo == 1 and len(targets) == 1:
            assigned = {0: targets[0]}
        else:
            gain = _group_gain(dt, gtb, group_of_dt - lo, hi - lo, targets, sample.image_ids)
            rows, cols = linear_sum_assignment(-gain)
            assigned = {int(r): targets[c] for r, c in zip(rows, cols, strict=True)}
        free = [c for c in ids if c not in targets] or ids
        j = 0
        for i in range(hi - lo):
            if i in assigned:
                new_cat[lo + i] = assigned[i]
            else:
                new_cat[lo + i] = free[j % len(free)]
                j += 1
        unassigned += j
    return new_cat[group_of_dt], unassigned


def _group_gain(
    dt: Detections,
    gtb: GtBoxes,
    local_group: np.ndarray,
    n_groups: int,
    targets: Sequence[int],
    image_ids: Sequence[int],
) -> np.ndarray:
    """(predicted group x GT group) sums of the Hungarian-matched box IoUs over the pair's images."""
    gain = np.zeros((n_groups, len(targets)))
    for image in image_ids:
        d_rows, g_rows = np.flatnonzero(dt.image_id == image), np.flatnonzero(gtb.image_id == image)
        if not len(d_rows) or not len(g_rows):
            continue
        m = iou_matrix(dt.bbox[d_rows], gtb.bbox[g_rows], fmt="xywh")
        groups, cats = local_group[d_rows], gtb.category_id[g_rows]
        for p in np.unique(groups).tolist():
            for j, c in enumerate(targets):
                sub = m[groups == p][:, cats == c]
                if sub.size:
                    r, k = linear_sum_assignment(-sub)
                    gain[p, j] += sub[r, k].sum()
    return gain


@dataclass(frozen=True)
class CorrectedEvaluation:
    """The corrected protocol's matching, done once, read by the scores and the analyses."""

    gt: GroundTruth
    raw: Detections
    relabelled: Detections
    matched: Matched
    unassigned_groups: int

    def scores(self) -> dict[str, Any]:
        """Weighted AP50, Acc and AP50 per group over all samples."""
        ap50, per_group = self._ap(None)
        return {"ap50": ap50, "acc": self._acc(self.gt.samples), "ap50_per_group": per_group}

    def analyses(self) -> dict[str, Any]:
        """The paper's section 4.4 analyses, JSON-ready."""
        gt, raw = self.gt, self.raw
        by_style = {}
        for style in STYLES:
            samples = [s for s in gt.samples if s.style == style]
            if samples:
                images = np.array([i for s in samples for i in s.image_ids], dtype=np.int64)
                by_style[style] = {"samples": len(samples), "acc": self._acc(samples), "ap50": self._ap(images)[0]}
        curves = precision(self.matched)
        sizes = {}
        for name in SIZES:
            a = self.matched.areas.index(name)
            counts = np.bincount(self.matched.g_category[self.matched.g_counted[a]], minlength=len(self.matched.category_ids))
            sizes[name] = _weighted([average_precision(c) for c in curves[a]], counts.tolist())
        merged = match(
            gt.arrays.replace_categories(np.ones(len(gt.boxes), np.int64)),
            self.relabelled.replace_categories(np.ones(len(raw), np.int64)),
            [im.id for im in gt.images],
            [1],
            ("all",),
            id0_artefact=False,
        )
        per_sample_boxes, per_sample_groups, positive = self._per_sample()
        return {
            "by_style": by_style,
            "group_agnostic_ap50": average_precision(precision(merged)[0, 0]),
            "ap50_by_size": sizes,
            "mean_groups_per_positive_sample": _mean(per_sample_groups[positive]),
            "mean_boxes_per_sample": _mean(per_sample_boxes),
            "mean_boxes_per_negative_sample": _mean(per_sample_boxes[~positive]),
        }

    def _ap(self, images: np.ndarray | None) -> tuple[float | None, dict[str, float | None]]:
        cats = self.matched.category_ids
        aps = [average_precision(c) for c in precision(self.matched, images)[self.matched.areas.index("all")]]
        g = self.gt.arrays
        on = np.ones(len(g.image_id), bool) if images is None else np.isin(g.image_id, images)
        counts = [int(np.count_nonzero(on & (g.category_id == c))) for c in cats]
        return _weighted(aps, counts), {str(c): ap for c, ap in zip(cats.tolist(), aps, strict=True)}

    def _acc(self, samples: Sequence[Any]) -> float:
        """Share of samples whose two images each have a prediction exactly when they have GT."""
        pairs = np.array([s.image_ids for s in samples], dtype=np.int64).reshape(-1, 2)
        agree = np.isin(pairs, self.gt.arrays.image_id) == np.isin(pairs, self.raw.image_id)
        return int(np.count_nonzero(agree.all(axis=1))) / len(samples)

    def _per_sample(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per sample: predicted boxes, distinct predicted groups, and whether it has GT boxes."""
        n = len(self.gt.samples)
        d_sample = sample_index(self.gt, self.raw.image_id)
        boxes = np.bincount(d_sample, minlength=n).astype(np.float64)
        groups = np.zeros(n)
        for s, _ in set(zip(d_sample.tolist(), self.raw.category_id.tolist(), strict=True)):
            groups[s] += 1
        positive = np.zeros(n, bool)
        positive[sample_index(self.gt, self.gt.arrays.image_id)] = True
        return boxes, groups, positive


def evaluate_corrected(gt: GroundTruth, dt: Detections) -> CorrectedEvaluation:
    """Assign groups per sample, then match once for all area ranges (no id-0 artefact)."""
    cats, unassigned = relabel_groups(gt, dt)
    relabelled = dt.replace_categories(cats)
    matched = match(
        gt.arrays,
        relabelled,
        [im.id for im in gt.images],
        [c for c, _ in gt.categories],
        ("all", *SIZES),
        id0_artefact=False,
    )
    return CorrectedEvaluation(gt, dt, relabelled, matched, unassigned)


def _weighted(aps: list[float | None], counts: list[int]) -> float | None:
    """Weighted AP, or None where no group has GT boxes to score against."""
    return weighted_ap(aps, counts) if any(ap is not None for ap in aps) else None


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None
