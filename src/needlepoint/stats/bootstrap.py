"""The seeded percentile bootstrap: draws of unit positions (within strata), and intervals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from needlepoint.core.intervalsettings import DEFAULT_LEVEL, DEFAULT_RESAMPLES, CiSettings
from needlepoint.stats.resampler import Resampler

__all__ = ["Interval", "Intervals", "bootstrap_interval", "draw", "resampled"]

_CHUNK_CELLS = 4_000_000  # positions per batch of resamples: bounds memory for large runs


@dataclass(frozen=True)
class Interval:
    """A percentile interval: `estimate` on all units, [`lo`, `hi`] at `level` over `resamples`."""

    estimate: float
    lo: float
    hi: float
    level: float
    resamples: int

    def to_json(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "lo": self.lo, "hi": self.hi}


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
    (its size kept), so a drawn row holds the same number of units of each stratum as the run."""
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
    """Percentile intervals of every headline metric of `resampler`.

    No interval (None, with the reason) for a metric when the run has fewer than two units, when
    the metric does not exist on the whole run, when it is missing on more than half the draws, or
    when every draw gives the same value (all-equal scores): an interval [x, x] would claim a
    certainty the data cannot give.
    """
    CiSettings(resamples, level, seed)
    n = len(resampler.units)
    whole = resampler.metrics(np.arange(n, dtype=np.int64))
    out = Intervals()
    out.estimates = dict(whole)
    if n < 2 or resamples < 1:
        reason = (
            f"one {resampler.unit} only: a single unit has no sampling spread"
            if n == 1
            else f"no {resampler.unit}s scored"
            if n == 0
            else "no resamples asked for"
        )
        for name in whole:
            out[name] = None
            out.reasons[name] = reason
        return out
    values = resampled(resampler, draw(n, resamples, seed, resampler.strata))
    q = (1.0 - level) / 2.0
    for name, estimate in whole.items():
        v = values.get(name)
        ok = v[~np.isnan(v)] if v is not None else np.zeros(0)
        if estimate is None:
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


def resampled(resampler: Resampler, idx: np.ndarray) -> dict[str, np.ndarray]:
    """metrics_batch over all rows of `idx` (draws x positions), a few rows at a time (the intervals' and
    compare's paired draws)."""
    rows = max(1, _CHUNK_CELLS // max(1, idx.shape[1]))
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(idx), rows):
        for name, v in resampler.metrics_batch(idx[start : start + rows]).items():
            parts.setdefault(name, []).append(np.asarray(v, dtype=np.float64))
    return {name: np.concatenate(v) for name, v in parts.items()}
