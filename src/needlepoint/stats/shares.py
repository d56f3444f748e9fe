"""Score intervals for share metrics (a share of units right: Acc@t, MC-Bench Acc, "samples right").

A percentile bootstrap of a share is too narrow near 0% and 100% and vanishes when every unit is
right (every draw gives 1). A resampler that declares its share metrics (`CountsShares`: per metric
the (successes, units) of each stratum) gets the Wilson score interval on them instead, which holds
at the edges: 39/40 gives [87.1, 99.6] at 95%, 40/40 gives [91.2, 100].

Stratified designs: the variance of the overall share with the strata's sizes fixed is
sum_h n_h p_h (1 - p_h) / n^2; the Wilson interval is taken at the effective sample size
p (1 - p) / variance (Korn and Graubard's approach for complex samples), capped at n so that the
strata never make the interval narrower than plain Wilson on all n units (at the edges a stratum all
right has no variance, and an uncapped effective size would bring the narrowness back).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import NormalDist
from typing import Protocol, runtime_checkable

__all__ = ["SHARE_METHOD", "CountsShares", "share_counts_of", "stratified_wilson", "wilson"]

SHARE_METHOD = "Wilson score"

# (successes, units) per stratum (one pair where unstratified); floats allowed, e.g. a clustered
# design's counts divided by its design effect (the share, successes / units, unchanged)
Counts = Sequence[tuple[float, float]]


@runtime_checkable
class CountsShares(Protocol):
    """A resampler whose share metrics are declared: metric name -> (successes, units) per stratum,
    on all its units (the counts behind the point estimate: successes / units summed equals it)."""

    def share_counts(self) -> dict[str, list[tuple[float, float]]]: ...


def share_counts_of(resampler: object) -> dict[str, list[tuple[float, float]]]:
    """The resampler's declared share metrics ({} for one that declares none)."""
    if isinstance(resampler, CountsShares):
        return dict(resampler.share_counts())
    return {}


def _z(level: float) -> float:
    return NormalDist().inv_cdf(1.0 - (1.0 - level) / 2.0)


def wilson(successes: float, n: float, level: float) -> tuple[float, float]:
    """The Wilson score interval of `successes` out of `n` at `level` (n may be an effective size)."""
    if n <= 0:
        raise ValueError("a share of no units has no interval")
    z = _z(level)
    p = min(1.0, max(0.0, successes / n))
    z2n = z * z / n
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z * ((p * (1.0 - p) / n + z2n / (4.0 * n)) ** 0.5) / (1.0 + z2n)
    lo, hi = centre - half, centre + half
    # exact at the edges: all right gives hi = 1, none right lo = 0 (no rounding below/above)
    return (0.0 if successes <= 0 else max(0.0, lo)), (1.0 if successes >= n else min(1.0, hi))


def stratified_wilson(counts: Counts, level: float) -> tuple[float, float] | None:
    """Wilson at the stratified design's effective sample size (capped at n); None without units."""
    n = float(sum(u for _, u in counts))
    if n <= 0:
        return None
    s = float(sum(k for k, _ in counts))
    p = s / n
    var = sum(u * (k / u) * (1.0 - k / u) for k, u in counts if u > 0) / (n * n)
    n_eff = n if var <= 0.0 or p in (0.0, 1.0) else min(n, p * (1.0 - p) / var)
    return wilson(p * n_eff, n_eff, level)
