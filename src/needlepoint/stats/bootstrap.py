"""The seeded percentile bootstrap: draws of unit positions (within strata), and intervals; share
metrics a resampler declares (stats.shares) get the Wilson score interval instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from needlepoint.core.intervalsettings import DEFAULT_LEVEL, DEFAULT_RESAMPLES, CiSettings
from needlepoint.stats.resampler import Resampler
from needlepoint.stats.shares import SHARE_METHOD, share_counts_of, stratified_wilson

__all__ = ["Interval", "Intervals", "bootstrap_interval", "draw", "resampled"]

_CHUNK_CELLS = 4_000_000  # positions per batch of resamples: bounds memory for large runs


@dataclass(frozen=True)
class Interval:
    """An interval: `estimate` on all units, [`lo`, `hi`] at `level`; `method` "percentile" (over
    `resamples` draws) or stats.shares.SHARE_METHOD (a share metric: no draws, `resamples` 0)."""

    estimate: float
    lo: float
    hi: float
    level: float
    resamples: int
    method: str = "percentile"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"estimate": self.estimate, "lo": self.lo, "hi": self.hi}
        if self.method != "percentile":
            out["method"] = self.method
        return out


class Intervals(dict[str, "Interval | None"]):
    """Metric name -> Interval, or None where no interval exists; `reasons` says why for each None."""

    def __init__(self) -> None:
        super().__init__()
        self.reasons: dict[str, str] = {}
        self.estimates: dict[str, float | None] = {}

    def to_json(self) -> dict[str, Any]:
        """Per metric {estimate, lo, hi} or {estimate, none: reason}, JSON-ready."""
        out: dict[str, Any] = {}
        for name, iv in self.items():
            out[name] = iv.to_json() if iv is not None else {"estimate": self.estimates.get(name), "none": self.reasons[name]}
        return out


def draw(n: int, resamples: int, seed: int = 0, strata: list[str] | None = None) -> np.ndarray:
    """Unit positions for `resamples` bootstrap draws, shape (resamples, n), from numpy's PCG64
    seeded with `seed`. With `strata` each stratum's positions are drawn from that stratum only
    (its size kept), so a drawn row holds the same number of units of each stratum as the run, and
    column k always holds a unit of unit k's stratum (MM-NIAH's resampler refills unit k's place)."""
    rng = np.random.default_rng(seed)
    if strata is not None and len(set(strata)) <= 1:
        strata = None
    if strata is None:
        return rng.integers(0, n, size=(resamples, n), dtype=np.int64) if n else np.zeros((resamples, 0), np.int64)
    if len(strata) != n:
        raise ValueError(f"{len(strata)} strata for {n} units")
    names, labels = np.unique(np.asarray(strata, dtype=str), return_inverse=True)
    # one draw per position, scaled into its stratum: stratum k's sorted positions are
    # order[start[k]:start[k] + size[k]]
    order = np.argsort(labels, kind="stable")
    size = np.bincount(labels, minlength=len(names))
    start = np.cumsum(size) - size
    u = rng.random((resamples, n))
    pick = start[labels] + np.minimum((u * size[labels]).astype(np.int64), size[labels] - 1)
    drawn: np.ndarray = order[pick]
    return drawn


def bootstrap_interval(
    resampler: Resampler, resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL, seed: int = 0
) -> Intervals:
    """Intervals of every headline metric of `resampler`: the Wilson score interval for the share
    metrics it declares (stats.shares: it holds at 0% and 100%, where every draw is alike), the
    percentile bootstrap for the others.

    No percentile interval (None, with the reason) for a metric when the run has fewer than two units, when
    the metric does not exist on the whole run, when it is missing on more than half the draws, or
    when every draw gives the same value (all-equal scores): an interval [x, x] would claim a
    certainty the data cannot give.
    """
    CiSettings(resamples, level, seed)
    n = len(resampler.units)
    whole = resampler.metrics(np.arange(n, dtype=np.int64))
    out = Intervals()
    out.estimates = dict(whole)
    shares = _score_intervals(resampler, whole, level)
    if n < 2 or resamples < 1:
        reason = (
            f"one {resampler.unit} only: a single unit has no sampling spread"
            if n == 1
            else f"no {resampler.unit}s scored"
            if n == 0
            else "no resamples asked for"
        )
        for name in whole:
            out[name] = shares.get(name)
            if out[name] is None:
                out.reasons[name] = reason
        return out
    values = resampled(resampler, draw(n, resamples, seed, resampler.strata))
    q = (1.0 - level) / 2.0
    for name, estimate in whole.items():
        v = values.get(name)
        ok = v[~np.isnan(v)] if v is not None else np.zeros(0)
        if name in shares:
            out[name] = shares[name]
        elif estimate is None:
            out[name], out.reasons[name] = None, "the metric does not exist on this run"
        elif len(ok) * 2 < resamples:
            out[name], out.reasons[name] = None, f"the metric is missing on {resamples - len(ok)} of {resamples} resamples"
        else:
            lo, hi = np.quantile(ok, [q, 1.0 - q])
            if lo == hi:
                out[name], out.reasons[name] = None, f"all {len(ok)} resamples give {lo:.6g}: the scores do not vary"
            else:
                out[name] = Interval(float(estimate), float(lo), float(hi), level, int(len(ok)))
    return out


def _score_intervals(resampler: Resampler, whole: dict[str, float | None], level: float) -> dict[str, Interval]:
    """The Wilson score interval (stratified where the counts are) of each share metric the resampler
    declares (stats.shares.CountsShares), where its counts give the point estimate; the estimate
    itself is the resampler's, unchanged."""
    out: dict[str, Interval] = {}
    for name, counts in share_counts_of(resampler).items():
        estimate = whole.get(name)
        units = float(sum(u for _, u in counts))
        if estimate is None or units <= 0 or abs(float(sum(k for k, _ in counts)) / units - estimate) > 1e-9:
            continue  # counts that do not give the estimate are not this metric's: keep the bootstrap
        bounds = stratified_wilson(counts, level)
        if bounds is not None:
            out[name] = Interval(float(estimate), bounds[0], bounds[1], level, 0, SHARE_METHOD)
    return out


def resampled(resampler: Resampler, idx: np.ndarray) -> dict[str, np.ndarray]:
    """metrics_batch over all rows of `idx` (draws x positions), a few rows at a time (the intervals' and
    compare's paired draws)."""
    rows = max(1, _CHUNK_CELLS // max(1, idx.shape[1]))
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(idx), rows):
        for name, v in resampler.metrics_batch(idx[start : start + rows]).items():
            parts.setdefault(name, []).append(np.asarray(v, dtype=np.float64))
    return {name: np.concatenate(v) for name, v in parts.items()}
