"""The plan of a human baseline: which samples a person answers, in which order, stratified and
seeded so that every annotator with the same seed gets the same samples (their rows compare).

The strata and the pick are run/strata.py's (each benchmark's `stratum`: MC-Bench by prompt style x
positive/negative, Ref-Adv-s by distractor bin, MM-NIAH by task x context range x needle depth,
RefCOCO by split), shared with
`eval --sample N --seed S`, which so answers the same samples as a plan of the same N and seed;
`gold` samples come from outside the scored ones.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlepoint.contract.base import Benchmark, Dataset
from needlepoint.core.errors import DataError
from needlepoint.human.kinds import human_options
from needlepoint.run.strata import pick

__all__ = ["Plan", "human_benchmark", "load_plan_data", "make_plan", "plan_of"]


@dataclass(frozen=True)
class Plan:
    """The samples one annotator answers: `ids` scored, in presentation order; `gold_ids` shown
    with their answer after submission (training) and left out of the scores; `strata` maps every
    sample id of the plan (gold too) to its stratum label."""

    ids: list[str]
    gold_ids: list[str] = field(default_factory=list)
    seed: int = 0
    size: int | None = None
    strata: dict[str, str] = field(default_factory=dict)

    def order(self) -> list[str]:
        """Every sample in the order the page presents it: the scored ones with the gold ones
        spread evenly among them (the first gold sample comes first, to learn the task)."""
        out = list(self.ids)
        k = len(self.gold_ids)
        for i, gid in enumerate(self.gold_ids):
            out.insert(round(i * (len(out) + 1) / k) if k else 0, gid)
        return out

    def is_gold(self, sample_id: str) -> bool:
        return sample_id in set(self.gold_ids)

    def identity(self) -> dict[str, Any]:
        """What names the plan in a run's identity: its settings and a hash of its ids."""
        digest = hashlib.sha256(json.dumps([self.ids, self.gold_ids]).encode()).hexdigest()[:16]
        return {"seed": self.seed, "size": self.size, "gold": len(self.gold_ids), "ids": digest}


def human_benchmark(bench_name: str) -> Benchmark:
    """The benchmark as a person takes it: its defaults and its declaration's `human_options`
    (for the box benchmarks, boxes in image pixels, as the page gives them)."""
    from needlepoint.contract.registry import make

    return make(bench_name, **human_options(bench_name))


def load_plan_data(bench_name: str, data: Path) -> tuple[Benchmark, Dataset[Any]]:
    """The benchmark and its samples (DataError when the folder holds none)."""
    bench = human_benchmark(bench_name)
    dataset = bench.load(data)
    if not len(dataset):
        raise DataError(f"{data} holds no samples for {bench_name}; point --data at the release folder")
    return bench, dataset


def make_plan(bench_name: str, data: Path, size: int | None, seed: int, gold: int = 0) -> Plan:
    """A seeded stratified plan of `size` scored samples (all samples when None) and `gold`
    training samples from the rest. The same arguments give the same plan on every machine."""
    _, dataset = load_plan_data(bench_name, data)
    return plan_of(bench_name, dataset, size, seed, gold)


def plan_of(bench_name: str, dataset: Dataset[Any], size: int | None, seed: int, gold: int = 0) -> Plan:
    """make_plan over samples already loaded."""
    picked = pick(human_benchmark(bench_name), dataset, size, seed, gold)
    return Plan(ids=picked.ids, gold_ids=picked.gold_ids, seed=seed, size=size, strata=picked.strata)
