"""The exact McNemar test of two paired right/wrong outcomes: a two-sided binomial test on the
discordant pairs (samples exactly one of the two runs got right), with p = 1/2 under no difference.

Computed with integers (math.comb), so the p-value is exact to float rounding for any run size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb
from typing import Any

__all__ = ["McNemar", "exact_p", "mcnemar"]


@dataclass(frozen=True)
class McNemar:
    """Counts of the paired outcomes and the test's two-sided p-value: `only_a` samples A got right
    and B wrong, `only_b` the reverse, `both` and `neither` the concordant ones."""

    only_a: int
    only_b: int
    both: int
    neither: int
    p: float

    @property
    def samples(self) -> int:
        return self.only_a + self.only_b + self.both + self.neither

    def to_json(self) -> dict[str, Any]:
        return {"only_a": self.only_a, "only_b": self.only_b, "both": self.both, "neither": self.neither, "p": self.p}


def exact_p(b: int, c: int) -> float:
    """Two-sided exact p-value of `b` against `c` discordant pairs: twice the smaller binomial tail
    of Bin(b + c, 1/2), capped at 1 (1 when there is no discordant pair)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(b, c) + 1))
    return min(1.0, 2 * tail / (1 << n))


def mcnemar(a: Sequence[bool], b: Sequence[bool]) -> McNemar:
    """The exact McNemar test of two runs' right/wrong outcomes on the same samples, in one order."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} outcomes against {len(b)}: pair the runs on the same samples first")
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    both = sum(1 for x, y in zip(a, b) if x and y)
    return McNemar(only_a, only_b, both, len(a) - only_a - only_b - both, exact_p(only_a, only_b))
