"""A run's intervals: the benchmark's resampler (optional verb `resampler`, contract.base.Resamples),
bootstrapped into metrics.json's `intervals` block, kept apart from the point estimates so those stay
exactly as they were."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from needlepoint.contract.base import Dataset, Resamples
from needlepoint.core.intervalsettings import CiSettings
from needlepoint.core.records import Record
from needlepoint.stats.bootstrap import bootstrap_interval
from needlepoint.stats.resampler import Resampler
from needlepoint.stats.shares import SHARE_METHOD, share_counts_of

__all__ = ["interval_block", "resampler_of"]


def resampler_of(bench: object, dataset: Dataset[Any], records: Sequence[Record]) -> Resampler | None:
    """The benchmark's resampler of these records (`Resamples.resampler(dataset, records)`), or
    None for a benchmark without one or a run with nothing to resample."""
    if not isinstance(bench, Resamples) or not records:
        return None
    return bench.resampler(dataset, records)


def interval_block(resampler: Resampler | None, settings: CiSettings) -> dict[str, Any] | None:
    """metrics.json's `intervals` block: how they were drawn (`share_method` for the share metrics
    that get a score interval, each marked `"method"`), and per metric name (a "/"-joined path
    into metrics.json) {estimate, lo, hi} or {estimate, none: reason}. None when intervals are off
    or the benchmark has no resampler."""
    if resampler is None or not settings.enabled:
        return None
    intervals = bootstrap_interval(resampler, settings.resamples, settings.level, settings.seed)
    shares = [name for name, iv in intervals.items() if iv is not None and iv.method == SHARE_METHOD]
    block: dict[str, Any] = {
        "method": "percentile bootstrap",
        "level": settings.level,
        "resamples": settings.resamples,
        "seed": settings.seed,
        "unit": resampler.unit,
        "units": len(resampler.units),
        "stratified": resampler.strata is not None,
        "metrics": intervals.to_json(),
    }
    if share_counts_of(resampler):
        # the share metrics (each marked "method" in its entry) get the score interval instead
        block["share_method"] = f"{SHARE_METHOD} (stratified: effective sample size, capped at the units)"
        block["share_metrics"] = shares
    return block
