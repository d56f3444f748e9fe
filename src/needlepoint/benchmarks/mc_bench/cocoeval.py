"""pycocotools' COCOeval for boxes at IoU 0.5 and maxDets 100, vectorised with numpy.

Gives the same precision arrays as `COCOeval(gt, dt, "bbox")` followed by `evaluate()` and
`accumulate()`, to the last bit, for the first IoU threshold (0.5), the last maxDets (100) and the
area ranges all / small / medium / large, several times faster. Bit-identical means: per
(image, category) cell, detections ranked by -score with a stable sort (ties in input order) and
cut to maxDets; greedy matching as in `evaluateImg` (ground truth with the ignore flag last, best
IoU >= min(t, 1 - 1e-10), the later box on a tie, a detection that matched a non-ignored box
never moves on to an ignored one); then, per category, all images' detections in image-id order
stably sorted by -score, cumulative sums, `np.spacing(1)`, the monotone precision envelope and
`searchsorted` on 101 recall thresholds; -1 for a category with no counted ground truth.

pycocotools records a match as the ground truth's annotation id, and an id of 0 reads as "no
match" in `accumulate`: a detection matched to the box with id 0 counts as a false positive while
that box is still used up. `id0_artefact=True` reproduces this; False scores the match.

Crowd boxes are handled in the matching (ignored, reusable), but their IoU is pycocotools'
intersection over detection area, which `geometry.iou_matrix` does not compute; the MC-Bench
loaders reject crowd boxes, so none reach this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from needlepoint.core.geometry import iou_matrix

REC_THRS: np.ndarray = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
"""COCO's 101 recall thresholds, built exactly as pycocotools builds them."""

AREA_RANGES: dict[str, tuple[float, float]] = {
    "all": (0.0, 1e5**2),
    "small": (0.0, 32.0**2),
    "medium": (32.0**2, 96.0**2),
    "large": (96.0**2, 1e5**2),
}
"""COCO's object-size ranges on box area (ground truth: the file's `area`; detections: w * h)."""

_CHUNK = 256  # boxes per IoU block: keeps the blocks small when pairing boxes within cells


@dataclass(frozen=True)
class GtBoxes:
    """Ground-truth boxes as columns: COCO [x, y, w, h] boxes, the file's areas and ids."""

    ann_id: np.ndarray
    image_id: np.ndarray
    category_id: np.ndarray
    bbox: np.ndarray
    area: np.ndarray
    iscrowd: np.ndarray

    def replace_categories(self, category_id: np.ndarray) -> GtBoxes:
        """The same boxes under other category ids (e.g. all groups merged into one)."""
        return GtBoxes(self.ann_id, self.image_id, category_id, self.bbox, self.area, self.iscrowd)


@dataclass(frozen=True)
class Detections:
    """Predicted boxes as columns, in results-file order (the order breaks score ties)."""

    image_id: np.ndarray
    category_id: np.ndarray
    bbox: np.ndarray
    score: np.ndarray

    @staticmethod
    def empty() -> Detections:
        i = np.zeros(0, np.int64)
        return Detections(i, i, np.zeros((0, 4)), np.zeros(0))

    def __len__(self) -> int:
        return len(self.image_id)

    def take(self, rows: np.ndarray) -> Detections:
        """The detections at `rows` (indices or a mask), order kept."""
        return Detections(self.image_id[rows], self.category_id[rows], self.bbox[rows], self.score[rows])

    def replace_categories(self, category_id: np.ndarray) -> Detections:
        """The same boxes under other category ids."""
        return Detections(self.image_id, category_id, self.bbox, self.score)


@dataclass(frozen=True)
class Matched:
    """The outcome of COCO's per-image matching, kept per detection so that precision can be
    accumulated over any subset of images (a prompt style) without matching again.

    `d_*` describe the detections that survive the maxDets cut, `g_*` the ground truth in the
    evaluated images and categories; image and category fields are ranks into `image_ids` and
    `category_ids`; `tp`, `fp`, `g_counted` have one row per area range.
    """

    areas: tuple[str, ...]
    image_ids: np.ndarray
    category_ids: np.ndarray
    d_image: np.ndarray
    d_category: np.ndarray
    d_score: np.ndarray
    d_rank: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    g_image: np.ndarray
    g_category: np.ndarray
    g_counted: np.ndarray


def match(
    gt: GtBoxes,
    dt: Detections,
    image_ids: Sequence[int] | np.ndarray,
    category_ids: Sequence[int] | np.ndarray,
    areas: Sequence[str] = ("all",),
    *,
    id0_artefact: bool = True,
    iou_threshold: float = 0.5,
    max_dets: int = 100,
) -> Matched:
    """COCOeval.evaluate() for boxes, restricted to one IoU threshold and one maxDets."""
    img = np.unique(np.asarray(image_ids, dtype=np.int64))
    cat = np.unique(np.asarray(category_ids, dtype=np.int64))
    n_cat = len(cat)

    g_rows = np.flatnonzero(np.isin(gt.image_id, img) & np.isin(gt.category_id, cat))
    g_img = np.searchsorted(img, gt.image_id[g_rows])
    g_cat = np.searchsorted(cat, gt.category_id[g_rows])
    g_order = np.argsort(g_img * n_cat + g_cat, kind="stable")  # by cell, file order within
    g_rows, g_img, g_cat = g_rows[g_order], g_img[g_order], g_cat[g_order]
    g_cell = g_img * n_cat + g_cat

    d_rows = np.flatnonzero(np.isin(dt.image_id, img) & np.isin(dt.category_id, cat))
    d_img = np.searchsorted(img, dt.image_id[d_rows])
    d_cat = np.searchsorted(cat, dt.category_id[d_rows])
    d_order = np.lexsort((-dt.score[d_rows], d_cat, d_img))  # by cell, -score, ties in file order
    d_cell = d_img[d_order] * n_cat + d_cat[d_order]
    rank = _rank_in_group(d_cell)
    keep = d_order[rank < max_dets]
    d_rows, d_img, d_cat = d_rows[keep], d_img[keep], d_cat[keep]
    d_cell, rank = d_cell[rank < max_dets], rank[rank < max_dets]

    pd, pg, piou = _cell_pairs(dt.bbox[d_rows], d_cell, gt.bbox[g_rows], g_cell)
    ok = piou >= min(iou_threshold, 1 - 1e-10)
    pd, pg, piou = pd[ok], pg[ok], piou[ok]

    crowd = gt.iscrowd[g_rows].astype(bool)
    g_area = gt.area[g_rows]
    d_area = dt.bbox[d_rows, 2] * dt.bbox[d_rows, 3]  # pycocotools' loadRes: w * h
    g_id_zero = gt.ann_id[g_rows] == 0
    n_a, n_d = len(areas), len(d_rows)
    tp = np.zeros((n_a, n_d), bool)
    fp = np.zeros((n_a, n_d), bool)
    counted = np.zeros((n_a, len(g_rows)), bool)
    for a, name in enumerate(areas):
        lo, hi = AREA_RANGES[name]
        g_ign = crowd | (g_area < lo) | (g_area > hi)
        d_match = _greedy(pd, pg, piou, rank, g_ign, crowd, n_d, len(g_rows))
        matched = d_match >= 0
        hit = matched.copy()
        if id0_artefact:
            hit[matched] = ~g_id_zero[d_match[matched]]
        ignored = np.zeros(n_d, bool)
        ignored[matched] = g_ign[d_match[matched]]
        ignored |= ~hit & ((d_area < lo) | (d_area > hi))
        tp[a] = hit & ~ignored
        fp[a] = ~hit & ~ignored
        counted[a] = ~g_ign
    return Matched(tuple(areas), img, cat, d_img, d_cat, dt.score[d_rows], rank, tp, fp, g_img, g_cat, counted)


def precision(m: Matched, images: np.ndarray | None = None, image_key: np.ndarray | None = None) -> np.ndarray:
    """COCOeval.accumulate()'s precision, shape (areas, categories, 101), over all evaluated
    images or only `images` (image ids); -1 where a category has no counted ground truth.

    `image_key` (one number per entry of `m.image_ids`) replaces the image-id order that breaks
    score ties: detections of equal score are taken in the order of their images' keys (a random
    tie order, corrected.py); None keeps pycocotools' order."""
    n_a, n_k = len(m.areas), len(m.category_ids)
    out = -np.ones((n_a, n_k, len(REC_THRS)))
    d_sel = np.arange(len(m.d_image))
    g_sel = np.ones(len(m.g_image), bool)
    if images is not None:
        wanted = np.isin(m.image_ids, images)
        d_sel = d_sel[wanted[m.d_image]]
        g_sel = wanted[m.g_image]
    # pycocotools concatenates the images in id order, then sorts stably by -score
    d_image = m.d_image if image_key is None else image_key[m.d_image]
    order = d_sel[np.lexsort((m.d_rank[d_sel], d_image[d_sel], -m.d_score[d_sel], m.d_category[d_sel]))]
    cats = m.d_category[order]
    lo = np.searchsorted(cats, np.arange(n_k), side="left")
    hi = np.searchsorted(cats, np.arange(n_k), side="right")
    for a in range(n_a):
        npig = np.bincount(m.g_category[g_sel & m.g_counted[a]], minlength=n_k)
        tp, fp = m.tp[a][order], m.fp[a][order]
        for k in np.flatnonzero(npig):
            out[a, k] = _curve(tp[lo[k] : hi[k]], fp[lo[k] : hi[k]], int(npig[k]))
    return out


def has_cross_image_ties(m: Matched) -> bool:
    """Whether the AP depends on how the images are numbered: in some area range, detections of
    one category at one score lie on two or more images and hold both a true and a false positive
    (pycocotools takes such ties in image-id order). Ties of true positives only, or of false
    positives only, give the same curve in every order."""
    for a in range(len(m.areas)):
        counted = np.flatnonzero(m.tp[a] | m.fp[a])
        if len(counted) < 2:
            continue
        order = counted[np.lexsort((m.d_score[counted], m.d_category[counted]))]
        c, s = m.d_category[order], m.d_score[order]
        starts = np.flatnonzero(np.r_[True, (c[1:] != c[:-1]) | (s[1:] != s[:-1])])
        img, tp = m.d_image[order], m.tp[a][order].astype(np.int64)
        several = np.minimum.reduceat(img, starts) != np.maximum.reduceat(img, starts)
        mixed = np.minimum.reduceat(tp, starts) != np.maximum.reduceat(tp, starts)
        if np.any(several & mixed):
            return True
    return False


def average_precision(curve: np.ndarray) -> float | None:
    """Mean of a precision curve's valid points, as the MC-Bench evaluator takes it; None if absent."""
    valid = curve[curve > -1]
    return float(np.mean(valid)) if valid.size else None


def weighted_ap(aps: Sequence[float | None], counts: Sequence[int]) -> float:
    """Sum of AP x (that category's share of the ground-truth boxes), skipping absent categories."""
    total = sum(counts)
    out = 0.0
    for ap, n in zip(aps, counts, strict=True):
        if ap is not None:
            out += (n / total) * ap
    return out


def _curve(tp: np.ndarray, fp: np.ndarray, npig: int) -> np.ndarray:
    """One category's 101-point interpolated precision, with accumulate()'s arithmetic."""
    tp_sum = np.cumsum(tp).astype(np.float64)
    fp_sum = np.cumsum(fp).astype(np.float64)
    nd = len(tp_sum)
    rc = tp_sum / npig
    pr = tp_sum / (fp_sum + tp_sum + np.spacing(1))
    if nd:
        pr = np.maximum.accumulate(pr[::-1])[::-1]
    inds = np.searchsorted(rc, REC_THRS, side="left")
    q = np.zeros(len(REC_THRS))
    ok = inds < nd
    q[ok] = pr[inds[ok]]
    return q


def _rank_in_group(keys: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal values of a sorted array."""
    idx = np.arange(len(keys))
    if not len(keys):
        return idx
    start = np.r_[True, keys[1:] != keys[:-1]]
    return idx - np.maximum.accumulate(np.where(start, idx, 0))


def _cell_pairs(
    d_box: np.ndarray, d_cell: np.ndarray, g_box: np.ndarray, g_cell: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (detection, ground truth) pair that shares a cell, with its IoU.

    Both inputs are sorted by cell. IoUs come from geometry.iou_matrix on blocks of a few cells at
    a time, so that no large all-against-all matrix is built.
    """
    both = np.intersect1d(d_cell, g_cell)
    empty = np.zeros(0, np.int64)
    if not both.size:
        return empty, empty, np.zeros(0)
    d_in = np.flatnonzero(np.isin(d_cell, both))
    g_in = np.flatnonzero(np.isin(g_cell, both))
    dc, gc = d_cell[d_in], g_cell[g_in]
    size = (np.searchsorted(dc, both, "right") - np.searchsorted(dc, both, "left")) + (
        np.searchsorted(gc, both, "right") - np.searchsorted(gc, both, "left")
    )
    block = (np.cumsum(size) - size) // _CHUNK
    first = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
    last = np.r_[first[1:], len(both)] - 1
    d_lo, d_hi = np.searchsorted(dc, both[first], "left"), np.searchsorted(dc, both[last], "right")
    g_lo, g_hi = np.searchsorted(gc, both[first], "left"), np.searchsorted(gc, both[last], "right")
    out_d, out_g, out_iou = [], [], []
    for a, b, c, d in zip(d_lo, d_hi, g_lo, g_hi, strict=True):
        rows, cols = d_in[a:b], g_in[c:d]
        ii, jj = np.nonzero(d_cell[rows][:, None] == g_cell[cols][None, :])
        out_d.append(rows[ii])
        out_g.append(cols[jj])
        out_iou.append(iou_matrix(d_box[rows], g_box[cols], fmt="xywh")[ii, jj])
    return np.concatenate(out_d), np.concatenate(out_g), np.concatenate(out_iou)


def _greedy(
    pd: np.ndarray,
    pg: np.ndarray,
    piou: np.ndarray,
    rank: np.ndarray,
    g_ign: np.ndarray,
    crowd: np.ndarray,
    n_d: int,
    n_g: int,
) -> np.ndarray:
    """evaluateImg's greedy matching for every cell at once; returns each detection's ground truth
    (index) or -1.

    The candidate pairs (IoU above the threshold) are taken round by round: round r holds the
    r-th best detection of every cell, and cells never share boxes, so a round is one vectorised
    step. Within a detection's candidates that are still free (or crowd), pycocotools' loop picks a
    non-ignored box before an ignored one, then the highest IoU, then the later box: the last pair
    after sorting by (ignore flag reversed, IoU, box order).
    """
    d_match = np.full(n_d, -1, np.int64)
    if not len(pd):
        return d_match
    order = np.lexsort((pg, piou, ~g_ign[pg], pd, rank[pd]))
    rounds = rank[pd[order]]
    cuts = np.flatnonzero(np.r_[True, rounds[1:] != rounds[:-1], True])
    used = np.zeros(n_g, bool)
    for s, e in zip(cuts[:-1], cuts[1:], strict=True):
        sl = order[s:e]
        g = pg[sl]
        sl = sl[~used[g] | crowd[g]]
        if not len(sl):
            continue
        d = pd[sl]
        pick = sl[np.r_[d[1:] != d[:-1], True]]
        d_match[pd[pick]] = pg[pick]
        used[pg[pick]] = True
    return d_match
