"""Which samples a shard answers: `--shard I/N` picks a deterministic 1/N of a run's samples.

The rule depends only on the samples' ids and costs, never on the machine, the process or the
order the data lists them in, so every job of a cluster array computes the same partition on its
own, and `merge` can check that the shards together cover every sample exactly once.

Balanced by cost: samples are taken most expensive first (ties broken by a SHA-256 of the id, then
the id) and each goes to the shard with the least cost so far (ties: the lowest shard number).
This greedy rule keeps the shards within one sample's cost of each other even when documents vary
100-fold in length (MM-NIAH); with equal costs it deals the samples round-robin in hash order.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from needlepoint.core.errors import DataError

__all__ = ["Shard", "WeighsSamples", "assign", "parse_shard", "sample_cost", "select"]

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """`"I/N"` into a Shard; bad input raises DataError in one sentence."""
    m = _SPEC.match(text or "")
    if not m:
        raise DataError(f"--shard {text!r} is not of the form I/N; use e.g. --shard 1/4 for the first of four shards")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1 or not 1 <= index <= count:
        raise DataError(f"--shard {text} is out of range; I must be between 1 and N (e.g. 1/4 ... 4/4)")
    return Shard(index, count)


def _id_hash(sample_id: str) -> str:
    return hashlib.sha256(sample_id.encode("utf-8")).hexdigest()


@runtime_checkable
class WeighsSamples(Protocol):
    """A benchmark whose samples cost unequal work to answer (optional verb `cost`): what a sample
    costs relative to the others (MM-NIAH: its context length), for balancing `--shard`.

    Declared here, where it is used, because the core lies below the benchmark contract;
    `needlepoint.contract` re-exports it with the other verbs' protocols."""

    def cost(self, sample: Any) -> float:
        """The sample's cost to answer, in any unit shared by all samples (0 or more)."""
        ...


def sample_cost(bench: object) -> Callable[[Any], float]:
    """The benchmark's per-sample cost (`WeighsSamples.cost`), or 1 for every sample."""
    return bench.cost if isinstance(bench, WeighsSamples) else (lambda _sample: 1.0)


def assign(ids_costs: Sequence[tuple[str, float]], count: int) -> dict[str, int]:
    """Shard number (1-based) of each sample id, from (id, cost) pairs in any order."""
    order = sorted(ids_costs, key=lambda ic: (-float(ic[1]), _id_hash(ic[0]), ic[0]))
    heap = [(0.0, k) for k in range(1, count + 1)]
    out: dict[str, int] = {}
    for sample_id, cost in order:
        load, k = heapq.heappop(heap)
        out[sample_id] = k
        heapq.heappush(heap, (load + max(float(cost), 0.0), k))
    return out


def select(samples: Sequence[Any], shard: Shard, cost: Callable[[Any], float]) -> list[Any]:
    """The samples of `shard`, in their original order."""
    owner = assign([(s.id, cost(s)) for s in samples], shard.count)
    return [s for s in samples if owner[s.id] == shard.index]
