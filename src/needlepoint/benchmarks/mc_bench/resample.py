"""MC-Bench resampling: the unit is a cluster of samples that share an image file (a sample is an
image pair with its description; the release's 2,000 samples form 1,459 such clusters, 43% of the
samples in one of 2 to 11), drawn within its prompt style (the paper's per-style columns), and every
Table 2 number of both protocols recomputed on each draw without rerunning the COCO-style
evaluation. Samples that show the same photo are not independent draws from the population of
pairs: resampling them one by one would count a shared photo's luck as many independent pieces of
evidence, and the intervals would be too narrow.

Matching is done once, as the scorers do it (official: the surviving regrouping, then COCOeval with
the id-0 artefact, on all samples and again on each style's samples; corrected: per-sample group
assignment, then COCOeval, its tie orders included). A detection's true/false-positive flag and a
ground-truth box's counting depend on its own image only, so a draw only changes how often each
sample's boxes count: precision and AP are accumulated from the matched, scored boxes with those
counts as weights, for all draws at once (numpy). A sample drawn twice counts its boxes twice, as
if its annotation and predictions were in the file twice under new ids; on all samples once, the
numbers are the scorers' to the last bit (tests/test_stats_mc_bench.py). The official regrouping is
the one found on the run's samples (a draw does not search it again).

Acc (official, corrected, per style) is a share of samples right, declared as such
(`McResampler.share_counts`, stats.shares) so that it gets a Wilson score interval, which holds at
0% and 100%. Its (successes, samples) per stratum are divided by the metric's design effect (the
clusters' variance of the share over the variance of independent samples, at least 1), so that a
shared photo's agreement shrinks the effective sample size as it widens the cluster bootstrap.
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

__all__ = ["ApTable", "McResampler", "McSamples", "design_effect", "image_clusters"]

_EPS = np.spacing(1)
ORDERS_PER_DRAW = 4
"""Tie orders averaged per bootstrap draw (the estimate averages all of corrected.TIE_ORDERS): a
draw costs 4 orders, not 32, and its AP50 carries a quarter of the spread between single orders
(sd 0.0044 for a tied run of the perturbed file), which widens the interval by 2 to 3%."""


class ApTable:
    """One matching's boxes, ready to give AP per category for any weights of the samples.

    Per category: the counted detections in accumulate()'s order (category, -score, image id,
    rank) with their true/false-positive flags and sample; per sample and category: the counted
    ground truth (the area range "all") and all ground-truth boxes (the weights of the weighted
    AP). `units` maps a sample of the matching's ground truth to a unit position."""

    def __init__(
        self, m: Matched, gt: GroundTruth, unit_of_sample: np.ndarray, n_units: int, keys: np.ndarray | None = None
    ) -> None:
        a = m.areas.index("all")
        image_unit = unit_of_sample[sample_index(gt, m.image_ids)] if len(m.image_ids) else np.zeros(0, np.int64)
        self.n_cats = len(m.category_ids)
        self.category_ids = m.category_ids
        # one list of per-category boxes per tie order (corrected.tie_keys), or pycocotools' order alone
        self._orders = [self._boxes(m, a, image_unit, key) for key in ([None] if keys is None else list(keys))]
        counted = m.g_counted[a]
        self._npig = np.zeros((n_units, self.n_cats))
        np.add.at(self._npig, (image_unit[m.g_image[counted]], m.g_category[counted]), 1.0)
        self.n_units = n_units

    def _boxes(self, m: Matched, a: int, image_unit: np.ndarray, key: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per category, the counted detections in accumulate()'s order (ties between images by
        `key`, else by image id): their units and true-positive flags (every other one counted is
        a false positive: `_ap`)."""
        d_image = m.d_image if key is None else key[m.d_image]
        order = np.lexsort((m.d_rank, d_image, -m.d_score, m.d_category))
        d_cat = m.d_category[order]
        d_unit = image_unit[m.d_image[order]]
        tp, fp = m.tp[a][order], m.fp[a][order]
        if (tp & fp).any():
            raise ValueError("a detection matched as both a true and a false positive")
        cats = []
        for k in range(self.n_cats):
            keep = (d_cat == k) & (tp | fp)  # neither (ignored): adds nothing to either sum
            cats.append((d_unit[keep], tp[keep].astype(np.float64)))
        return cats

    def only(self, units: np.ndarray) -> ApTable:
        """The same table over the units of a mask only (a prompt style): their boxes, fewer columns."""
        out = copy.copy(self)
        out._orders = [[(u[units[u]], tp[units[u]]) for u, tp in cats] for cats in self._orders]
        out._npig = self._npig * units[:, None]
        return out

    def aps(self, w: np.ndarray, every_order: bool = True) -> np.ndarray:
        """AP (101-point, as the MC-Bench evaluator averages it) per row of sample weights `w`
        (draws x units) and category, shape (draws, categories); NaN where a category has no
        counted ground truth on that draw. With tie orders: the mean over them
        (corrected.mean_over_orders' arithmetic), or with `every_order` False, row r's mean over
        ORDERS_PER_DRAW of them, the orders o with o = r modulo (orders / ORDERS_PER_DRAW) (a
        bootstrap draw at a few orders' cost)."""
        rows = len(w)
        npig = w @ self._npig
        with np.errstate(divide="ignore", invalid="ignore"):  # rows without ground truth: never read
            need = [_least_counts(npig[:, k]) for k in range(self.n_cats)]  # the same for every order
        if len(self._orders) == 1:
            out = np.full((rows, self.n_cats), np.nan)
            self._fill(out, w, npig, need, self._orders[0], np.arange(rows))
            return out
        every = every_order or len(self._orders) % ORDERS_PER_DRAW
        turns = 1 if every else len(self._orders) // ORDERS_PER_DRAW
        total = np.zeros((rows, self.n_cats))
        for o, cats in enumerate(self._orders):
            out = np.full((rows, self.n_cats), np.nan)
            mine = np.arange(o % turns, rows, turns)
            self._fill(out, w, npig, need, cats, mine)
            total[mine] = total[mine] + out[mine]
        mean: np.ndarray = total / (len(self._orders) // turns)
        return mean

    def _fill(
        self,
        out: np.ndarray,
        w: np.ndarray,
        npig: np.ndarray,
        need: list[np.ndarray],
        cats: list[tuple[np.ndarray, np.ndarray]],
        rows: np.ndarray,
    ) -> None:
        """AP per category of the rows `rows` of `w`, boxes in the order `cats` gives, into `out`
        (`need`: each category's `_least_counts` of every row)."""
        for k, (unit, tp) in enumerate(cats):
            has = rows[npig[rows, k] > 0]
            if len(has):
                out[has, k] = _ap(w[has][:, unit], tp, need[k][has])


def _ap(wd: np.ndarray, tp: np.ndarray, need: np.ndarray) -> np.ndarray:
    """cocoeval._curve's arithmetic with weighted counts, averaged over the 101 recall points;
    `need`: `_least_counts` of each row's ground-truth count.

    Every detection counted is a true or a false positive, never both (`_boxes` keeps those), and
    the counts are whole numbers, so fp_sum + tp_sum is the running sum of the weights itself,
    exactly. The recall point of threshold t is the first detection where recall tp_sum / npig
    reaches t; with whole-number counts that is where tp_sum reaches the least count k with
    k / npig >= t (the same float division), found for all rows and thresholds by one searchsorted."""
    rows, nd = wd.shape
    if not nd:
        return np.zeros(rows)
    tp_sum = np.cumsum(wd * tp, axis=1)
    pr = tp_sum / (np.cumsum(wd, axis=1) + _EPS)
    pr = np.maximum.accumulate(pr[:, ::-1], axis=1)[:, ::-1]
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


def image_clusters(gt: GroundTruth) -> np.ndarray:
    """Per sample of `gt`, its cluster: samples linked by a shared image file (the same
    `file_name`), directly or through others, form one; numbered 0, 1, ... in order of each
    cluster's first sample. The release's 2,000 samples use 3,345 files in 4,000 places and form
    1,459 clusters of 1 to 11 samples (samples 99 and 100 describe the same pair)."""
    n = len(gt.samples)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    position = {s.id: k for k, s in enumerate(gt.samples)}
    first_user: dict[str, int] = {}
    for im in gt.images:
        k = position[im.sample_id]
        other = first_user.setdefault(im.file_name, k)
        a, b = root(k), root(other)
        if a != b:
            parent[max(a, b)] = min(a, b)
    roots = [root(k) for k in range(n)]
    number: dict[int, int] = {}
    return np.array([number.setdefault(r, len(number)) for r in roots], dtype=np.int64)


class McResampler:
    """An MC-Bench run as bootstrap units: clusters of samples that share an image file
    (image_clusters), drawn within their prompt style (a cluster whose samples have several styles:
    among the clusters of the same styles), with every Table 2 number of both protocols.

    A drawn cluster counts each of its samples once (samples: the per-sample resampler, whose
    numbers these are). `restrict(ids)` takes sample ids, as a paired comparison pairs samples, and
    gives the per-sample resampler of those samples."""

    unit = "image cluster"

    def __init__(self, gt: GroundTruth, results: list[dict[str, Any]], sample_ids: Sequence[str]) -> None:
        self.samples = McSamples(gt, results, sample_ids)
        cluster = self.samples.cluster
        self._cluster = cluster
        n = int(cluster.max()) + 1 if len(cluster) else 0
        members: list[list[int]] = [[] for _ in range(n)]
        for k, c in enumerate(cluster.tolist()):
            members[c].append(k)
        ids = self.samples.units
        self.units = ["+".join(ids[k] for k in m) for m in members]
        styles = self.samples.strata
        self.strata: list[str] | None = None if styles is None else ["+".join(sorted({styles[k] for k in m})) for m in members]
        self.sizes = np.array([len(m) for m in members], dtype=np.int64)

    def metrics(self, idx: np.ndarray) -> dict[str, float | None]:
        counts = _counts(np.asarray(idx, dtype=np.int64)[None, :], len(self.units))
        return one_row(self.samples.metrics_weights(counts[:, self._cluster], every_order=True))

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """Every number per row of drawn cluster positions: each sample weighs as often as its
        cluster was drawn (tie orders: McSamples.metrics_weights)."""
        counts = _counts(idx, len(self.units))
        return self.samples.metrics_weights(counts[:, self._cluster])

    def share_counts(self) -> dict[str, list[tuple[float, float]]]:
        """Every Acc is a share of samples right: per draw stratum (a prompt style, or a mix of
        styles for a cluster that has several), (samples right, samples) over the metric's
        samples, both divided by the metric's design effect (design_effect: the share is
        unchanged, the effective sample size shrinks where a cluster's samples agree)."""
        strata = self.strata if self.strata is not None else [""] * len(self.units)
        sample_stratum = np.asarray([strata[c] for c in self._cluster.tolist()], dtype=str)
        out: dict[str, list[tuple[float, float]]] = {}
        for name, (right, mask) in self.samples.acc_rows().items():
            if not mask.any():
                continue
            d = design_effect(right[mask], self._cluster[mask], sample_stratum[mask])
            out[name] = [
                (float(right[mask & (sample_stratum == h)].sum()) / d, float((mask & (sample_stratum == h)).sum()) / d)
                for h in dict.fromkeys(sample_stratum[mask].tolist())
            ]
        return out

    def restrict(self, ids: Sequence[str]) -> Resampler:
        return self.samples.restrict(ids)


def design_effect(right: np.ndarray, cluster: np.ndarray, strata: np.ndarray) -> float:
    """The design effect of a share of samples right (`right`: per sample its successes, 0 or 1)
    drawn as clusters (`cluster`: per sample its cluster) within strata (`strata`: per sample its
    cluster's stratum): the variance of the share when the clusters are the units,
    sum_h sum_i (y_i - p_h m_i)^2 / n^2 (y_i successes of cluster i's m_i samples, p_h its
    stratum's share: what the cluster bootstrap's draws spread by), over the variance when the
    samples are, sum_h sum_j (y_j - p_h)^2 / n^2 (= sum_h n_h p_h (1 - p_h) / n^2, the binomial
    variance stats.shares.stratified_wilson takes), at least 1. It is 1 without shared images
    (the two sums are the same sum) and grows where a cluster's samples agree."""
    right = np.asarray(right, dtype=np.float64)
    if not len(right):
        return 1.0
    between = within = 0.0
    for h in dict.fromkeys(np.asarray(strata).tolist()):
        inside = np.asarray(strata) == h
        y, c = right[inside], np.asarray(cluster)[inside]
        p = float(y.mean())
        _, number = np.unique(c, return_inverse=True)
        y_i = np.bincount(number, weights=y)
        m_i = np.bincount(number).astype(np.float64)
        between += float(((y_i - p * m_i) ** 2).sum())
        within += float(((y - p) ** 2).sum())
    return 1.0 if within <= 0.0 else max(1.0, between / within)


def _counts(idx: np.ndarray, n: int) -> np.ndarray:
    """Per row of drawn positions, how often each of the n positions was drawn (rows x n, float)."""
    rows = len(idx)
    w = np.bincount((idx + n * np.arange(rows)[:, None]).ravel(), minlength=rows * n)
    counts: np.ndarray = w.reshape(rows, n).astype(np.float64)
    return counts


class McSamples:
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
        self.cluster = image_clusters(gt)  # per sample, its cluster of shared image files
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
        self._corrected = ApTable(ev.matched, gt, positions, n, ev.keys)
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
        return one_row(self.metrics_weights(_counts(np.asarray(idx, dtype=np.int64)[None, :], self._n), every_order=True))

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        return self.metrics_weights(_counts(idx, self._n))

    def metrics_weights(self, w: np.ndarray, every_order: bool = False) -> dict[str, np.ndarray]:
        """Every number per row of sample weights `w` (rows x samples: how often each counts).

        Where tied scores make the corrected AP depend on the image order (corrected.tie_keys),
        `every_order` gives the scorer's mean over the tie orders (the estimate); else each row
        is the mean over ORDERS_PER_DRAW of them, taken in turn (a bootstrap draw), so that draws
        cost a few orders each and their spread holds a little of the spread between orders."""
        out: dict[str, np.ndarray] = {}
        drawn = w.sum(axis=1)
        out["official/acc"] = _share(w @ self._official_right, drawn)
        out["official/ap50"] = self._official_ap(w, None)
        out["corrected/acc"] = _share(w @ self._corrected_right, drawn)
        out["corrected/ap50"] = _corrected_weighted(self._corrected.aps(w, every_order), w @ self._corrected_counts)
        for st, mask in self._styles.items():
            ws = w * mask
            in_style = ws.sum(axis=1)
            out[f"official/by_style/{st}/acc"] = _share(ws @ self._official_right, in_style)
            out[f"official/by_style/{st}/ap50"] = self._official_ap(w, st)
            out[f"analyses/by_style/{st}/acc"] = _share(ws @ self._corrected_right, in_style)
            out[f"analyses/by_style/{st}/ap50"] = _corrected_weighted(
                self._corrected_styles[st].aps(w, every_order), ws @ self._corrected_counts
            )
        return out

    def acc_rows(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per Acc metric (metrics_weights' names), per sample its successes and whether the
        metric counts it (all samples, or the style's): the counts behind the shares."""
        every = np.ones(self._n, dtype=bool)
        out = {"official/acc": (self._official_right, every), "corrected/acc": (self._corrected_right, every)}
        for st, mask in self._styles.items():
            out[f"official/by_style/{st}/acc"] = (self._official_right, mask)
            out[f"analyses/by_style/{st}/acc"] = (self._corrected_right, mask)
        return out

    def _official_ap(self, w: np.ndarray, style: str | None) -> np.ndarray:
        table, counts = self._official[style]
        return _official_weighted(table.aps(w), w @ counts)

    def restrict(self, ids: Sequence[str]) -> Resampler:
        return Restricted(self, ids)


def _share(count: np.ndarray, total: np.ndarray) -> np.ndarray:
    share: np.ndarray = np.divide(count, total, out=np.full(len(count), np.nan), where=total > 0)
    return share
