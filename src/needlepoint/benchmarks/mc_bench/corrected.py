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
- Tied scores do not depend on image numbering. pycocotools takes detections of equal score in
  image-id order, so with every box at score 1.0 (a chat model's answers) the AP depends on how the
  images happen to be numbered: the release order puts the negative samples last. Where two images'
  detections of one category share a score, every AP (overall, per style, per size,
  group-agnostic) is the mean over TIE_ORDERS random orders of the images (seed TIE_SEED, keyed
  on each image's sample id and place in the pair, so renumbering the ids changes nothing); the
  spread over those orders, and the AP50 in image-id order, are reported beside it. Without such
  ties every order gives the same AP, and it is computed once.

Analyses all use the corrected protocol: per prompt style (the protocol on that style's samples),
group-agnostic AP50 (all groups one category), AP50 by object size (weights: each group's share
of the GT boxes in that size range), and counts of predicted groups and boxes. Positive and
negative samples are told apart by their GT boxes, not the release flag.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from needlepoint.benchmarks.mc_bench.cocoeval import (
    Detections,
    GtBoxes,
    Matched,
    average_precision,
    has_cross_image_ties,
    match,
    precision,
    weighted_ap,
)
from needlepoint.benchmarks.mc_bench.groundtruth import STYLES, GroundTruth
from needlepoint.core.assignment import linear_sum_assignment
from needlepoint.core.geometry import iou_matrix

SIZES: tuple[str, ...] = ("small", "medium", "large")
TIE_ORDERS = 32
"""Random image orders over which a tied AP is averaged (the module docstring)."""
TIE_SEED = 0


def tie_keys(gt: GroundTruth, m: Matched) -> np.ndarray | None:
    """Per random tie order, a key per entry of `m.image_ids` (shape TIE_ORDERS x images), None
    where no score ties two images. An image's key depends on its sample's id, its place in the
    pair and the order's number only, never on its image id or on which other samples are scored:
    renumbering the images changes nothing, and a subset of samples is ordered as the whole set
    orders them (so a bootstrap draw without repeats is the evaluation of the drawn samples)."""
    if not has_cross_image_ties(m):
        return None
    image = gt.image_by_id
    base = np.array(
        [
            int.from_bytes(
                hashlib.blake2b(f"{image[i].sample_id}/{image[i].position}".encode(), digest_size=8).digest(), "little"
            )
            for i in m.image_ids.tolist()
        ],
        dtype=np.uint64,
    )
    return np.stack(
        [_mix(base + np.uint64((k + 1 + TIE_SEED * TIE_ORDERS) * 0x9E3779B97F4A7C15 % 2**64)) for k in range(TIE_ORDERS)]
    )


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a well-mixed 64-bit number from each 64-bit number (wrapping)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        mixed: np.ndarray = x ^ (x >> np.uint64(31))
    return mixed


def tie_order_aps(m: Matched, keys: np.ndarray | None, images: np.ndarray | None = None) -> np.ndarray:
    """AP per area range and category (NaN: no counted ground truth), shape (orders, areas,
    categories): one row in pycocotools' order when `keys` is None, else one per tie order."""
    rows = [None] if keys is None else list(keys)
    out = np.full((len(rows), len(m.areas), len(m.category_ids)), np.nan)
    for k, key in enumerate(rows):
        curves = precision(m, images, key)
        for a in range(len(m.areas)):
            for c in range(len(m.category_ids)):
                ap = average_precision(curves[a, c])
                if ap is not None:
                    out[k, a, c] = ap
    return out


def mean_over_orders(aps: np.ndarray) -> np.ndarray:
    """The mean over tie orders (axis 0), summed left to right as the resampler sums them; one
    order is returned as it is."""
    if len(aps) == 1:
        one: np.ndarray = aps[0]
        return one
    total = np.zeros(aps.shape[1:])
    for row in aps:
        total = total + row
    mean: np.ndarray = total / len(aps)
    return mean


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
    keys: np.ndarray | None  # tie_keys(): None where no score ties two images

    def scores(self) -> dict[str, Any]:
        """Weighted AP50, Acc and AP50 per group over all samples; with ties between images, the
        AP50 of each tie order summed up (`ap50_tie_orders`)."""
        ap50, per_group = self._ap(None)
        out = {"ap50": ap50, "acc": self._acc(self.gt.samples), "ap50_per_group": per_group}
        if self.keys is not None:
            out["ap50_tie_orders"] = self._spread()
        return out

    def _spread(self) -> dict[str, Any]:
        """The tie orders' AP50s: how many, their sd, least and greatest, and the AP50 in image-id
        order (pycocotools' order, the official protocol's)."""
        cats = self.matched.category_ids
        g = self.gt.arrays
        counts = [int(np.count_nonzero(g.category_id == c)) for c in cats]
        each = tie_order_aps(self.matched, self.keys)[:, self.matched.areas.index("all")]
        id_order = tie_order_aps(self.matched, None)[0, self.matched.areas.index("all")]
        values = np.array([_weighted(_listed(row), counts) for row in each], dtype=np.float64)
        return {
            "orders": len(values),
            "seed": TIE_SEED,
            "sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
            "min": float(values.min()),
            "max": float(values.max()),
            "image_id_order": _weighted(_listed(id_order), counts),
        }

    def analyses(self) -> dict[str, Any]:
        """The paper's section 4.4 analyses, JSON-ready."""
        gt, raw = self.gt, self.raw
        by_style = {}
        for style in STYLES:
            samples = [s for s in gt.samples if s.style == style]
            if samples:
                images = np.array([i for s in samples for i in s.image_ids], dtype=np.int64)
                by_style[style] = {"samples": len(samples), "acc": self._acc(samples), "ap50": self._ap(images)[0]}
        aps = mean_over_orders(tie_order_aps(self.matched, self.keys))
        sizes = {}
        for name in SIZES:
            a = self.matched.areas.index(name)
            counts = np.bincount(self.matched.g_category[self.matched.g_counted[a]], minlength=len(self.matched.category_ids))
            sizes[name] = _weighted(_listed(aps[a]), counts.tolist())
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
            "group_agnostic_ap50": _none_if_nan(mean_over_orders(tie_order_aps(merged, tie_keys(gt, merged)))[0, 0]),
            "ap50_by_size": sizes,
            "mean_groups_per_positive_sample": _mean(per_sample_groups[positive]),
            "mean_boxes_per_sample": _mean(per_sample_boxes),
            "mean_boxes_per_negative_sample": _mean(per_sample_boxes[~positive]),
        }

    def _ap(self, images: np.ndarray | None) -> tuple[float | None, dict[str, float | None]]:
        cats = self.matched.category_ids
        all_aps = mean_over_orders(tie_order_aps(self.matched, self.keys, images))
        aps = _listed(all_aps[self.matched.areas.index("all")])
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
    return CorrectedEvaluation(gt, dt, relabelled, matched, unassigned, tie_keys(gt, matched))


def _weighted(aps: list[float | None], counts: list[int]) -> float | None:
    """Weighted AP, or None where no group has GT boxes to score against."""
    return weighted_ap(aps, counts) if any(ap is not None for ap in aps) else None


def _listed(aps: np.ndarray) -> list[float | None]:
    """APs as floats, None for NaN (no counted ground truth)."""
    return [_none_if_nan(v) for v in aps.tolist()]


def _none_if_nan(v: float) -> float | None:
    return None if np.isnan(v) else float(v)


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None
