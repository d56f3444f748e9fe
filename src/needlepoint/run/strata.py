"""Stratified, seeded subsets of a benchmark's samples: the human baseline's plans (`needlepoint
human --plan N --seed S`) and the model runs' `eval --sample N --seed S` take the same samples for
the same data, N and seed, so a human row and the models' rows compare on one subset.

A benchmark names a sample's stratum with its optional verb `stratum` (`Stratifies`: MC-Bench by
prompt style x positive/negative, Ref-Adv-s by distractor bin, MM-NIAH by task x context range x
needle depth); without it every sample is in one stratum. A subset of N samples is a systematic
sample of the samples sorted by stratum (seeded order within each), so each stratum, and each level
of a nested one, gets its share of N within one sample; `gold` samples (the human page's training
samples) come from outside the chosen ones.

Here, in run/, because eval uses it; human/ (a layer above) builds its plans on it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from needlepoint.contract.base import Dataset, Stratifies
from needlepoint.core.errors import DataError

__all__ = ["Picked", "pick", "sample_subset", "stratum"]


def stratum(bench: object, dataset: Dataset[Any], sample: Any) -> str:
    """The stratum label of a sample: the benchmark's (`Stratifies`), else "all"."""
    return bench.stratum(dataset, sample) if isinstance(bench, Stratifies) else "all"


@dataclass(frozen=True)
class Picked:
    """A stratified pick: `ids` chosen (in a seeded presentation order, or the release's order when
    every sample is taken), `gold_ids` from the rest, and the stratum of each of them."""

    ids: list[str]
    gold_ids: list[str]
    strata: dict[str, str]


def pick(bench: object, dataset: Dataset[Any], size: int | None, seed: int, gold: int = 0, flag: str = "--plan") -> Picked:
    """A seeded stratified pick of `size` samples (all samples when None) and `gold` more from the
    rest; the same arguments give the same pick on every machine. `flag` names the size's flag in
    the sentence that refuses a bad size."""
    n = len(dataset)
    if size is not None and size < 1:
        raise DataError(f"{flag} must be a positive number of samples, not {size}")
    if gold < 0:
        raise DataError(f"--gold must be 0 or more samples, not {gold}")
    scored_n = n - gold if size is None else size
    if scored_n + gold > n or scored_n < 1:
        if flag == "--plan":
            raise DataError(f"the plan asks for {scored_n} scored and {gold} gold samples, but the data holds {n}; ask for fewer")
        raise DataError(f"{flag} {scored_n} asks for more samples than the data holds ({n}); ask for fewer")
    strata = {s.id: stratum(bench, dataset, s) for s in dataset}
    rng = random.Random(seed)
    by_stratum: dict[str, list[str]] = {}
    for s in dataset:
        by_stratum.setdefault(strata[s.id], []).append(s.id)
    for label in sorted(by_stratum):
        rng.shuffle(by_stratum[label])
    # Systematic sampling over the samples sorted by stratum (a seeded order within each): every
    # stratum, and every level of a nested one (task, then range, then depth), gets its share
    # of the pick within one sample.
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
    return Picked(ids=ids, gold_ids=gold_ids, strata={i: strata[i] for i in strata if i in kept})


def sample_subset(bench: object, dataset: Dataset[Any], size: int | None, seed: int) -> Dataset[Any]:
    """`eval --sample N --seed S`: the N samples a human plan of the same N and seed answers, in
    the dataset's order (the whole dataset when `size` is None)."""
    if size is None:
        return dataset
    return dataset.subset(pick(bench, dataset, size, seed, flag="--sample").ids)
