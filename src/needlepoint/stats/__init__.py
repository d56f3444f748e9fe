"""Intervals for headline numbers: a seeded bootstrap over a benchmark's own unit.

A benchmark that can resample a run offers `resampler(dataset, records) -> Resampler`
(optional verb, see contract/base.py); `bootstrap_interval` turns a Resampler into
percentile intervals, and `interval_block` into metrics.json's `intervals` block
(docs/statistics.md). The numerics load on first use, so that the run configuration can
hold CiSettings without importing numpy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from needlepoint.core.intervalsettings import DEFAULT_LEVEL, DEFAULT_RESAMPLES, CiSettings

if TYPE_CHECKING:
    from needlepoint.stats.bootstrap import Interval, Intervals, bootstrap_interval, draw
    from needlepoint.stats.resampler import Resampler, Restricted, restrict_positions
    from needlepoint.stats.run import interval_block, resampler_of

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_RESAMPLES",
    "CiSettings",
    "Interval",
    "Intervals",
    "Resampler",
    "Restricted",
    "bootstrap_interval",
    "draw",
    "interval_block",
    "resampler_of",
    "restrict_positions",
]

_WHERE = {
    "Interval": "bootstrap",
    "Intervals": "bootstrap",
    "bootstrap_interval": "bootstrap",
    "draw": "bootstrap",
    "Resampler": "resampler",
    "Restricted": "resampler",
    "restrict_positions": "resampler",
    "interval_block": "run",
    "resampler_of": "run",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"needlepoint.stats.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'needlepoint.stats' has no attribute {name!r}")
