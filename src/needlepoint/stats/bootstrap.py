"""The seeded percentile bootstrap: draws of unit positions (within strata), and intervals; share
metrics a resampler declares (stats.shares) get the Wilson score interval instead.

Draws are made and scored a block of resamples at a time (`draws`, `block_rows`), never as one
resamples x units matrix: the intervals hold a few MB at any run size (a 25,600-case run's matrix
was 205 MB of int64 positions, with as much again of uniform numbers beside it when stratified).
The blocks take the same numbers from the same seeded stream, so the intervals are those of the
whole matrix. A run whose metrics are all shares (Ref-Adv-s) draws nothing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from needlepoint.core.intervalsettings import DEFAULT_LEVEL, DEFAULT_RESAMPLES, CiSettings
from needlepoint.stats.resampler import Resampler
from needlepoint.stats.scoring import scored_blocks
from needlepoint.stats.shares import SHARE_METHOD, share_counts_of, stratified_wilson

__all__ = ["Interval", "Intervals", "block_rows", "bootstrap_interval", "draw", "draws", "percentile_bounds", "resampled"]

BLOCK_CELLS = 1 << 18  # positions drawn and scored at once: what the intervals hold grows with it, not with the run
BLOCK_STEP = 32  # blocks are whole multiples of this many resamples, so that a resampler that varies
# its work by a draw's row within a block (MC-Bench's tie orders, row modulo 8) treats row r alike


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


def block_rows(n: int, resamples: int) -> int:
    """How many resamples are drawn and scored at once for `n` units: about BLOCK_CELLS positions,
    a multiple of BLOCK_STEP rows (at least BLOCK_STEP), so that a run's intervals cost a bounded
    amount of memory at any size."""
    rows = max(BLOCK_STEP, BLOCK_CELLS // max(1, n) // BLOCK_STEP * BLOCK_STEP)
    return max(1, min(rows, resamples))


def draws(n: int, resamples: int, seed: int = 0, strata: list[str] | None = None) -> Iterator[np.ndarray]:
    """`draw`'s rows, a block of `block_rows` at a time (int64), the same numbers: each block
    takes the next values of one PCG64 stream, as the whole matrix took them at once."""
    rng = np.random.default_rng(seed)
    if strata is not None and len(set(strata)) <= 1:
        strata = None
    if strata is not None and len(strata) != n:
        raise ValueError(f"{len(strata)} strata for {n} units")
    step = block_rows(n, resamples)
    if strata is None:
        for start in range(0, resamples, step):
            rows = min(step, resamples - start)
            yield rng.integers(0, n, size=(rows, n), dtype=np.int64) if n else np.zeros((rows, 0), np.int64)
        return
    text = [str(s) for s in strata]
    names = sorted(set(text))  # np.unique's order, without its import of numpy.ma (percentile_bounds)
    number = {name: k for k, name in enumerate(names)}
    labels = np.fromiter((number[s] for s in text), dtype=np.intp, count=n)
    # one draw per position, scaled into its stratum: stratum k's sorted positions are
    # order[start[k]:start[k] + size[k]]
    order = np.argsort(labels, kind="stable")
    size = np.bincount(labels, minlength=len(names))
    first = (np.cumsum(size) - size)[labels]
    room = size[labels]
    last = room - 1
    for start in range(0, resamples, step):
        rows = min(step, resamples - start)
        pick = rng.random((rows, n))
        pick *= room
        picked = np.minimum(pick.astype(np.int64), last)
        del pick
        picked += first
        yield order[picked]


def draw(n: int, resamples: int, seed: int = 0, strata: list[str] | None = None) -> np.ndarray:
    """Unit positions for `resamples` bootstrap draws, shape (resamples, n), from numpy's PCG64
    seeded with `seed`, in the smallest unsigned integer type that holds n - 1 (a paired
    comparison keeps them all). With `strata` each stratum's positions are drawn from that stratum
    only (its size kept), so a drawn row holds the same number of units of each stratum as the run,
    and column k always holds a unit of unit k's stratum (MM-NIAH's resampler refills unit k's
    place). Drawn a block at a time (`draws`): the int64 matrix of all of them is never made."""
    out = np.empty((resamples, n), dtype=np.min_scalar_type(max(n - 1, 0)))
    start = 0
    for block in draws(n, resamples, seed, strata):
        out[start : start + len(block)] = block
        start += len(block)
    return out


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
    drawn = any(name not in shares and estimate is not None for name, estimate in whole.items())
    # share metrics only (Ref-Adv-s): their score intervals need no draws, so none are made
    values = scored_blocks(resampler, lambda: draws(n, resamples, seed, resampler.strata)) if drawn else {}
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
            lo, hi = percentile_bounds(ok, level)
            if lo == hi:
                out[name], out.reasons[name] = None, f"all {len(ok)} resamples give {lo:.6g}: the scores do not vary"
            else:
                out[name] = Interval(float(estimate), float(lo), float(hi), level, int(len(ok)))
    return out


def percentile_bounds(values: np.ndarray, level: float) -> tuple[float, float]:
    """The (1 - level) / 2 and (1 + level) / 2 quantiles of `values` (no NaN, at least one), as
    `np.quantile`'s default ("linear", Hyndman and Fan's type 7) gives them, bit for bit: at the
    virtual index h = (n - 1) q between the sorted values a and b at floor(h) and the next, with
    t = h - floor(h), a + (b - a) t below t = 0.5, else b - (b - a) (1 - t). Written out because
    `np.quantile` sorts through `np.unique`, whose first call imports numpy.ma: 15 ms of a run's end."""
    ordered = np.sort(values)
    q = (1.0 - level) / 2.0
    h = (len(ordered) - 1) * np.array([q, 1.0 - q])
    below = np.floor(h)
    t = h - below
    at = below.astype(np.intp)
    a, b = ordered[at], ordered[np.minimum(at + 1, len(ordered) - 1)]
    step = b - a
    lo, hi = np.where(t >= 0.5, b - step * (1 - t), a + step * t).tolist()
    return lo, hi


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
    """metrics_batch over all rows of `idx` (draws x positions), a block of rows at a time (the
    intervals' and compare's paired draws)."""
    step = block_rows(idx.shape[1], len(idx))
    return scored_blocks(resampler, lambda: (idx[start : start + step] for start in range(0, len(idx), step)))
