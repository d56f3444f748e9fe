"""MC-Bench resampling: a sample (an image pair with its description) is the unit, drawn within its
prompt style (the paper's per-style columns), and every Table 2 number of both protocols
recomputed on each draw without rerunning the COCO-style evaluation.

Matching is done once, as the scorers do it (official: the surviving regrouping, then COCOeval with
the id-0 artefact, on all samples and again on each style's samples; corrected: per-sample group
assignment, then COCOeval). A detection's true/false-positive flag and a ground-truth box's
counting depend on its own image only, so a draw only changes how often each sample's boxes count:
precision and AP are accumulated from the matched, scored boxes with those counts as weights, for
all draws at once (numpy). A sample drawn twice counts its boxes twice, as if its annotation and
predictions were in the file twice under new ids; on all samples once, the numbers are the
scorers' to the last bit (tests/test_stats_mc_bench.py). The official regrouping is the one found
on the run's samples (a draw does not search it again).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from needlepoint.benchmarks.mc_bench.cocoeval import REC_THRS, Detections, Matched, match
from needlepoint.benchmarks.mc_bench.corrected import evaluate_corrected, sample_index
from needlepoint.benchmarks.mc_bench.groundtruth import STYLES, GroundTruth
from needlepoint.benchmarks.mc_bench.official import apply_regrouping, find_regrouping
from needlepoint.benchmarks.mc_bench.scoring import detections
from needlepoint.stats.resampler import Resampler, Restricted, one_row

__all__ = ["ApTable", "McResampler"]

_EPS = np.spacing(1)


class ApTable:
    """One matching's boxes, ready to give AP per category for any weights of the samples.

    Per category: the counted detections in accumulate()'s order (category, -score, image id,
    rank) with their true/false-positive flags and sample; per sample and category: the counted
    ground truth (the area range "all") and all ground-truth boxes (the weights of the weighted
    AP). `units` maps a sample of the matching's ground truth to a unit position."""

    def __init__(self, m: Matched, gt: GroundTruth, unit_of_sample: np.ndarray, n_units: int) -> None:
        a = m.areas.index("all")
        order = np.lexsort((m.d_rank, m.d_image, -m.d_score, m.d_category))
        image_unit = unit_of_sample[sample_index(gt, m.image_ids)] if len(m.image_ids) else np.zeros(0, np.int64)
        d_cat = m.d_category[order]
        self.n_cats = len(m.category_ids)
        self.category_ids = m.category_ids
        d_unit = image_unit[m.d_image[order]]
        tp, fp = m.tp[a][order], m.fp[a][order]
        self._cats = []
        for k in range(self.n_cats):
            sel = d_cat == k
            keep = sel & (tp | fp)  # neither (ignored): adds nothing to either sum
            self._cats.append((d_unit[keep], tp[keep].astype(np.float64), fp[keep].astype(np.float64)))
        counted = m.g_counted[a]
        self._npig = np.zeros((n_units, self.n_cats))
        np.add.at(self._npig, (image_unit[m.g_image[counted]], m.g_category[counted]), 1.0)
        self.n_units = n_units

    def only(self, units: np.ndarray) -> ApTable:
        """The same table over the units of a mask only (a prompt style): their boxes, fewer columns."""
        out = copy.copy(self)
        out._cats = [(u[units[u]], tp[units[u]], fp[units[u]]) for u, tp, fp in self._cats]
        out._npig = self._npig * units[:, None]
        return out

    def aps(self, w: np.ndarray) -> np.ndarray:
        """AP (101-point, as the MC-Bench evaluator averages it) per row of sample weights `w`
        (draws x units) and category, shape (draws, categories); NaN where a category has no
        counted ground truth on that draw."""
        rows = len(w)
        npig = w @ self._npig
        out = np.full((rows, self.n_cats), np.nan)
        for k, (unit, tp, fp) in enumerate(self._cats):
            has = npig[:, k] > 0
            if not has.any():
                continue
            out[has, k] = _ap(w[has][:, unit], tp, fp, npig[has, k])
        return out


def _ap(wd: np.ndarray, tp: np.ndarray, fp: np.ndarray, npig: np.ndarray) -> np.ndarray:
    """cocoeval._curve's arithmetic with weighted counts, averaged over the 101 recall points.

    The recall point of threshold t is the first detection where recall tp_sum / npig reaches t;
    with whole-number counts that is where tp_sum reaches the least count k with k / npig >= t
    (the same float division), found for all rows and thresholds by one searchsorted."""
    rows, nd = wd.shape
    if not nd:
        return np.zeros(rows)
    tp_sum = np.cumsum(wd * tp, axis=1)
    fp_sum = np.cumsum(wd * fp, axis=1)
    pr = tp_sum / (fp_sum + tp_sum + _EPS)
    pr = np.maximum.accumulate(pr[:, ::-1], axis=1)[:, ::-1]
    need = _least_counts(npig)
    top = tp_sum[:, -1].max() + 1  # rows laid end to end: each row's counts lifted above the previous row's
    lift = np.arange(rows)[:, None] * top
    inds = np.searchsorted((tp_sum + lift).ravel(), (need + lift).ravel(), side="left").reshape(rows, -1)
    inds -= np.arange(rows)[:, None] * nd
    ok = inds < nd
    q = np.zeros((rows, len(REC_THRS)))
    q[ok] = np.take_along_axis(pr, np.where(ok, inds, 0), axis=1)[ok]
    mean: np.ndarray = q.mean(axis=1)
    return mean


def _least_counts(npig: np.ndarray) -> np.ndarray:
    """Per row and recall threshold t: the least whole k with k / npig >= t in float arithmetic
    (the division accumulate() does), shape (rows, 101)."""
    n = npig[:, None]
    k = np.ceil(REC_THRS[None, :] * n)
    for _ in range(2):  # the product's rounding is off by at most one either way
        k = np.where((k > 0) & ((k - 1) / n >= REC_THRS), k - 1, k)
        k = np.where(k / n < REC_THRS, k + 1, k)
    least: np.ndarray = k
    return least


def _official_weighted(aps: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """cocoeval.weighted_ap per row, with the official script's pairing (AP by sorted category
    position, counts by file position), left to right; 0.0 where no category has an AP."""
    total = counts.sum(axis=1)
    out = np.zeros(len(aps))
    for j in range(aps.shape[1]):
        valid = ~np.isnan(aps[:, j])
        share = np.divide(counts[:, j], total, out=np.zeros(len(aps)), where=total > 0)
        out = np.where(valid, out + share * np.where(valid, aps[:, j], 0.0), out)
    return out


def _corrected_weighted(aps: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """corrected._weighted per row: NaN (None) where no category has an AP."""
    out = _official_weighted(aps, counts)
    out[np.isnan(aps).all(axis=1)] = np.nan
    return out


class McResampler:
    """An MC-Bench run's samples as bootstrap units, with every Table 2 number of both protocols."""

    unit = "sample"

    def __init__(self, gt: GroundTruth, results: list[dict[str, Any]], sample_ids: Sequence[str]) -> None:
        with np.errstate(over="ignore", invalid="ignore"):
            full_dt = detections(results, gt)
            gt = gt.subset(sample_ids)
            dt = full_dt.take(np.isin(full_dt.image_id, [im.id for im in gt.images]))
            self._build(gt, dt)

    def _build(self, gt: GroundTruth, dt: Detections) -> None:
        n = len(gt.samples)
        self.units = [s.id for s in gt.samples]
        styles = [s.style for s in gt.samples]
        self.strata: list[str] | None = [str(s) for s in styles] if all(s is not None for s in styles) else None
        self._n = n
        self._styles = {st: np.array([s == st for s in styles]) for st in STYLES if st in styles}
        positions = np.arange(n, dtype=np.int64)

        # Acc: whether each image has a prediction exactly when it has ground truth
        ids = np.array([im.id for im in gt.images], dtype=np.int64)
        agree = np.isin(ids, gt.arrays.image_id) == np.isin(ids, dt.image_id)
        # official: images in list order two at a time, each pair counted for the sample of its first image
        self._official_right = np.zeros(n)
        if len(ids):
            np.add.at(self._official_right, sample_index(gt, ids[0::2]), (agree[0::2] & agree[1::2]).astype(np.float64))
        pairs = np.array([s.image_ids for s in gt.samples], dtype=np.int64).reshape(-1, 2)
        with_gt = np.isin(pairs, gt.arrays.image_id) == np.isin(pairs, dt.image_id)
        self._corrected_right = with_gt.all(axis=1).astype(np.float64)

        # official: all samples, then each style's samples alone (own regrouping, as score_results)
        self._official: dict[str | None, tuple[ApTable, np.ndarray]] = {None: self._official_table(gt, dt, positions)}
        for st, mask in self._styles.items():
            sub = gt.subset([s.id for s, m in zip(gt.samples, mask.tolist(), strict=True) if m])
            sub_dt = dt.take(np.isin(dt.image_id, [im.id for im in sub.images]))
            self._official[st] = self._official_table(sub, sub_dt, positions[mask])

        # corrected: one matching; a style is its samples' weights
        ev = evaluate_corrected(gt, dt)
        self._corrected = ApTable(ev.matched, gt, positions, n)
        self._corrected_styles = {st: self._corrected.only(mask) for st, mask in self._styles.items()}
        g = gt.arrays
        self._corrected_counts = np.zeros((n, self._corrected.n_cats))
        cat_pos = np.searchsorted(self._corrected.category_ids, g.category_id)
        known = (cat_pos < self._corrected.n_cats) & (
            self._corrected.category_ids[np.minimum(cat_pos, self._corrected.n_cats - 1)] == g.category_id
        )
        np.add.at(self._corrected_counts, (sample_index(gt, g.image_id[known]), cat_pos[known]), 1.0)

    def _official_table(self, gt: GroundTruth, dt: Detections, units: np.ndarray) -> tuple[ApTable, np.ndarray]:
        """score_official's matching of `gt` (its regrouping applied), and per unit and file
        category the ground-truth boxes (the weights of its weighted AP)."""
        regrouping = find_regrouping(gt, dt)
        if regrouping is not None:
            dt = apply_regrouping(dt, regrouping)
        file_cats = [c for c, _ in gt.categories]
        m = match(gt.arrays, dt, [im.id for im in gt.images], sorted(file_cats), ("all",), id0_artefact=True)
        unit_of_sample = units
        table = ApTable(m, gt, unit_of_sample, self._n)
        counts = np.zeros((self._n, len(file_cats)))
        owner = unit_of_sample[sample_index(gt, gt.arrays.image_id)] if len(gt.boxes) else np.zeros(0, np.int64)
        for j, c in enumerate(file_cats):
            np.add.at(counts[:, j], owner[gt.arrays.category_id == c], 1.0)
        return table, counts

    def metrics(self, idx: np.ndarray) -> dict[str, float | None]:
        return one_row(self.metrics_batch(np.asarray(idx, dtype=np.int64)[None, :]))

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        rows = len(idx)
        w = np.bincount((idx + self._n * np.arange(rows)[:, None]).ravel(), minlength=rows * self._n)
        w = w.reshape(rows, self._n).astype(np.float64)
        out: dict[str, np.ndarray] = {}
        drawn = w.sum(axis=1)
        out["official/acc"] = _share(w @ self._official_right, drawn)
        out["official/ap50"] = self._official_ap(w, None)
        out["corrected/acc"] = _share(w @ self._corrected_right, drawn)
        out["corrected/ap50"] = _corrected_weighted(self._corrected.aps(w), w @ self._corrected_counts)
        for st, mask in self._styles.items():
            ws = w * mask
            in_style = ws.sum(axis=1)
            out[f"official/by_style/{st}/acc"] = _share(ws @ self._official_right, in_style)
            out[f"official/by_style/{st}/ap50"] = self._official_ap(w, st)
            out[f"analyses/by_style/{st}/acc"] = _share(ws @ self._corrected_right, in_style)
            out[f"analyses/by_style/{st}/ap50"] = _corrected_weighted(
                self._corrected_styles[st].aps(w), ws @ self._corrected_counts
            )
        return out

    def _official_ap(self, w: np.ndarray, style: str | None) -> np.ndarray:
        table, counts = self._official[style]
        return _official_weighted(table.aps(w), w @ counts)

    def restrict(self, ids: Sequence[str]) -> Resampler:
        return Restricted(self, ids)


def _share(count: np.ndarray, total: np.ndarray) -> np.ndarray:
    share: np.ndarray = np.divide(count, total, out=np.full(len(count), np.nan), where=total > 0)
    return share
