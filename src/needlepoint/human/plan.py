"""The plan of a human baseline: which samples a person answers, in which order, stratified and
seeded so that every annotator with the same seed gets the same samples (their rows compare).

Strata: MC-Bench by prompt style x positive/negative (does the pair hold a target), Ref-Adv-s by
distractor bin, MM-NIAH by task x context range x needle depth. A plan of N samples is a systematic
sample of the samples sorted by stratum (seeded order within each), so each stratum gets its
share of N within one sample; `gold` samples come from outside the scored ones.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlepoint.contract.base import Benchmark, Dataset
from needlepoint.core.errors import DataError

__all__ = ["HUMAN_OPTIONS", "Plan", "human_benchmark", "load_plan_data", "make_plan", "stratum"]

# Answers from the page are in image pixels: the box benchmarks are made with this format.
HUMAN_OPTIONS: dict[str, dict[str, Any]] = {"mc_bench": {"box_format": "abs_xyxy"}, "ref_adv_s": {"box_format": "abs_xyxy"}}


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
    """The benchmark as a person takes it: its defaults, boxes in image pixels."""
    from needlepoint.contract.registry import make

    return make(bench_name, **HUMAN_OPTIONS.get(bench_name, {}))


def load_plan_data(bench_name: str, data: Path) -> tuple[Benchmark, Dataset[Any]]:
    """The benchmark and its samples (DataError when the folder holds none)."""
    bench = human_benchmark(bench_name)
    dataset = bench.load(data)
    if not len(dataset):
        raise DataError(f"{data} holds no samples for {bench_name}; point --data at the release folder")
    return bench, dataset


def stratum(bench_name: str, dataset: Dataset[Any], sample: Any) -> str:
    """The stratum label of a sample (one string, e.g. "Reasoning/positive", "4-6", "counting-text/8k/0.2")."""
    if bench_name == "mc_bench":
        truth = dataset.truth
        gt = truth.sample_by_id.get(sample.id) if truth is not None else None
        positive = getattr(gt, "positive", None)
        if positive is None and truth is not None:  # the COCO layout has no flag: a box in the pair
            positive = any(b.image_id in sample.image_ids for b in truth.boxes)
        sign = "?" if positive is None else "positive" if positive else "negative"
        return f"{sample.style or 'unknown'}/{sign}"
    if bench_name == "ref_adv_s":
        from needlepoint.benchmarks.ref_adv.scoring import bin_label

        return bin_label(sample.distractors)
    if bench_name == "mm_niah":
        from needlepoint.benchmarks.mm_niah.aggregate import context_bin, depth_bin
        from needlepoint.benchmarks.mm_niah.ranges import EXTENDED_EDGES, EXTENDED_RANGES

        b = context_bin(sample.context_length, EXTENDED_EDGES)
        rng = EXTENDED_RANGES[b - 1] if b > 0 else "<1k"
        return f"{sample.task}/{rng}/depth{depth_bin(sample.placed_depth)}"
    return "all"


def make_plan(bench_name: str, data: Path, size: int | None, seed: int, gold: int = 0) -> Plan:
    """A seeded stratified plan of `size` scored samples (all samples when None) and `gold`
    training samples from the rest. The same arguments give the same plan on every machine."""
    _, dataset = load_plan_data(bench_name, data)
    return plan_of(bench_name, dataset, size, seed, gold)


def plan_of(bench_name: str, dataset: Dataset[Any], size: int | None, seed: int, gold: int = 0) -> Plan:
    """make_plan over samples already loaded."""
    n = len(dataset)
    if size is not None and size < 1:
        raise DataError(f"--plan must be a positive number of samples, not {size}")
    if gold < 0:
        raise DataError(f"--gold must be 0 or more samples, not {gold}")
    scored_n = n - gold if size is None else size
    if scored_n + gold > n or scored_n < 1:
        raise DataError(f"the plan asks for {scored_n} scored and {gold} gold samples, but the data holds {n}; ask for fewer")
    strata = {s.id: stratum(bench_name, dataset, s) for s in dataset}
    rng = random.Random(seed)
    by_stratum: dict[str, list[str]] = {}
    for s in dataset:
        by_stratum.setdefault(strata[s.id], []).append(s.id)
    for label in sorted(by_stratum):
        rng.shuffle(by_stratum[label])
    # Systematic sampling over the samples sorted by stratum (a seeded order within each): every
    # stratum, and every level of a nested one (task, then range, then depth), gets its share
    # of the plan within one sample.
    line = [i for label in sorted(by_stratum) for i in by_stratum[label]]
    step = n / scored_n
    start = rng.random() * step
    picked = {min(n - 1, int(start + k * step)) for k in range(scored_n)}
    chosen = {line[k] for k in picked}
    rest = [i for k, i in enumerate(line) if k not in picked]
    rng.shuffle(rest)
    gold_ids = rest[:gold]
    if size is None:  # the whole set (less any gold): in the release's order
        ids = [s.id for s in dataset if s.id in chosen]
    else:
        ids = sorted(chosen, key=lambda i: (strata[i], i))
        rng.shuffle(ids)
    kept = set(ids) | set(gold_ids)
    return Plan(ids=ids, gold_ids=gold_ids, seed=seed, size=size, strata={i: strata[i] for i in strata if i in kept})
