"""What a benchmark gives the bootstrap: its units, their strata, and its headline metrics on any
multiset of units (positions drawn with repetition).

Metric names are paths into metrics.json joined by "/" (e.g. `acc@0.5`, `bins/2-3/acc@0.5`,
`official/ap50`, `tasks/retrieval-text/scores/1k`), so a name says where its point estimate lives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from needlepoint.core.errors import DataError

__all__ = ["Resampler", "Restricted", "restrict_positions"]


@runtime_checkable
class Resampler(Protocol):
    """One run's scored units, able to recompute every headline metric on a resample.

    `units`: the bootstrap unit ids (a Ref-Adv-s case, an MC-Bench sample, an MM-NIAH sample), in a
    fixed order; positions index this list. `strata`: one label per unit where the bootstrap draws
    within strata (the authors aggregate by them), else None. `unit`: what a unit is, for people.
    """

    units: list[str]
    strata: list[str] | None
    unit: str

    def metrics(self, idx: np.ndarray) -> dict[str, float | None]:
        """Every headline metric on the units at positions `idx` (1-D, repetition allowed);
        None where a metric does not exist on that draw."""
        ...

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """`metrics` for each row of a 2-D `idx` (resamples x units), NaN where None.

        A row of `stats.draw` holds in column k a unit of unit k's stratum; a resampler may read
        it as unit k's place refilled (MM-NIAH's keeps each cell's count so, see its module)."""
        ...

    def restrict(self, ids: Sequence[str]) -> Resampler:
        """The resampler over the units `ids` only, in that order (a paired comparison restricts two
        runs to the samples both answered, so that position i is the same unit in both)."""
        ...


def restrict_positions(units: Sequence[str], ids: Iterable[str], what: str = "the run") -> np.ndarray:
    """Positions in `units` of `ids`, in the order of `ids`; DataError naming an unknown id."""
    where = {u: i for i, u in enumerate(units)}
    out = []
    for i in ids:
        if i not in where:
            raise DataError(f"unit {i!r} is not among the {len(units)} scored units of {what}; restrict to ids it answered")
        out.append(where[i])
    return np.asarray(out, dtype=np.int64)


class Restricted:
    """A resampler over a subset of another's units: a draw over the subset is the same draw's
    positions in the parent, so the parent's metrics serve unchanged."""

    def __init__(self, parent: Resampler, ids: Sequence[str]) -> None:
        self.parent = parent
        self.positions = restrict_positions(parent.units, ids)
        self.units = [parent.units[p] for p in self.positions.tolist()]
        self.strata = None if parent.strata is None else [parent.strata[p] for p in self.positions.tolist()]
        self.unit = parent.unit

    def metrics(self, idx: np.ndarray) -> dict[str, float | None]:
        return self.parent.metrics(self.positions[np.asarray(idx, dtype=np.int64)])

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        return self.parent.metrics_batch(self.positions[np.asarray(idx, dtype=np.int64)])

    def restrict(self, ids: Sequence[str]) -> Resampler:
        return Restricted(self, ids)


def one_row(batch: dict[str, np.ndarray]) -> dict[str, float | None]:
    """The single row of a metrics_batch result as plain floats (None for NaN)."""
    out: dict[str, float | None] = {}
    for name, values in batch.items():
        v = float(values[0])
        out[name] = None if np.isnan(v) else v
    return out
