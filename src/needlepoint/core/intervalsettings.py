"""How intervals are computed (--resamples, --ci-level, --no-ci); no numpy here, so that the run
configuration can hold them without importing the numerics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from needlepoint.core.errors import DataError

__all__ = ["DEFAULT_LEVEL", "DEFAULT_RESAMPLES", "CiSettings", "add_ci_flags", "ci_settings"]

DEFAULT_RESAMPLES = 1000
DEFAULT_LEVEL = 0.95


@dataclass(frozen=True)
class CiSettings:
    """How intervals are computed: `resamples` 0 means none (--no-ci)."""

    resamples: int = DEFAULT_RESAMPLES
    level: float = DEFAULT_LEVEL
    seed: int = 0

    def __post_init__(self) -> None:
        if self.resamples < 0:
            raise DataError(f"--resamples is {self.resamples}; give 0 or more (0: no intervals), e.g. 1000")
        if not 0.0 < self.level < 1.0:
            raise DataError(f"--ci-level is {self.level}; give a level between 0 and 1, e.g. 0.95")

    @property
    def enabled(self) -> bool:
        return self.resamples > 0


def add_ci_flags(parser: Any, resamples: bool = True) -> None:
    """--resamples, --ci-level and --no-ci on a subcommand (`resamples=False`: the level and the
    switch only, for a command that reads stored intervals)."""
    if resamples:
        parser.add_argument(
            "--resamples",
            type=int,
            default=DEFAULT_RESAMPLES,
            help=f"bootstrap resamples per interval (default {DEFAULT_RESAMPLES})",
        )
    parser.add_argument("--ci-level", type=float, default=DEFAULT_LEVEL, help="interval level (default 0.95)")
    parser.add_argument("--no-ci", action="store_true", help="no intervals")


def ci_settings(ns: Any) -> CiSettings:
    """The CiSettings of parsed flags (add_ci_flags); DataError for a bad value, in one sentence."""
    resamples = getattr(ns, "resamples", DEFAULT_RESAMPLES)
    return CiSettings(0 if ns.no_ci else resamples, ns.ci_level)
