"""The paired comparison of runs, metric by metric: each run's value on the paired samples, the
difference against the first run, its paired-bootstrap interval and p-value, and for metrics that
are a share of samples right, the exact McNemar test.

Paired means one draw for all runs: the benchmark's stats.Resampler of each run is restricted to
the paired samples (in one order), and the same array of drawn positions (stats.draw, within the
benchmark's strata) is scored by every run's resampler, so each resample holds the same samples
in every run. The p-value is the two-sided bootstrap test of no difference: the share of resampled
differences at least as far from the observed difference as that lies from zero (the resampled
differences, centred on the observed one, stand for those under no difference). Identical runs
give a difference of 0 on every resample, hence the interval [0, 0] and p = 1.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from needlepoint.compare.mcnemar import McNemar, mcnemar
from needlepoint.compare.runs import Pairing
from needlepoint.core.errors import DataError
from needlepoint.stats import DEFAULT_LEVEL, DEFAULT_RESAMPLES, CiSettings, Resampler, draw, resampler_of
from needlepoint.stats.bootstrap import resampled

__all__ = ["Comparison", "Contrast", "MetricDiff", "compare_runs", "is_share_metric"]

NOT_A_SHARE = re.compile(r"^ap")  # the last part of a metric name that is no share of samples (AP50, AP per group)


@dataclass
class MetricDiff:
    """One metric of one contrast (a run against the first): both values, the difference
    (other - first), its interval and p-value (None with `note` where none exists), and McNemar
    where the metric is a share of samples right."""

    name: str
    base: float | None
    other: float | None
    diff: float | None
    lo: float | None = None
    hi: float | None = None
    p: float | None = None
    mcnemar: McNemar | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "metric": self.name,
            "first": self.base,
            "other": self.other,
            "difference": self.diff,
            "interval": None if self.lo is None else [self.lo, self.hi],
            "p": self.p,
        }
        if self.mcnemar is not None:
            out["mcnemar"] = self.mcnemar.to_json()
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Contrast:
    """Run `other` (an index into the comparison's runs) against the first run."""

    other: int
    rows: list[MetricDiff] = field(default_factory=list)


@dataclass
class Comparison:
    """The result of `compare_runs`."""

    pairing: Pairing
    level: float
    resamples: int
    seed: int
    unit: str
    values: list[dict[str, float | None]]  # per run: every metric on the paired samples
    outcomes: list[dict[str, np.ndarray]]  # per run: per-sample 0/1 (NaN: not counted) of the share metrics
    contrasts: list[Contrast]

    def to_json(self) -> dict[str, Any]:
        """The comparison as `--json` prints it."""
        p = self.pairing
        return {
            "benchmark": p.runs[0].benchmark,
            "runs": [
                {"name": r.name, "dir": str(r.dir), "answered": len(r.records), "failed": r.failed, "left_out": n}
                for r, n in zip(p.runs, p.left_out)
            ],
            "paired": len(p.ids),
            "unit": self.unit,
            "bootstrap": {
                "method": "paired percentile bootstrap",
                "level": self.level,
                "resamples": self.resamples,
                "seed": self.seed,
            },
            "values": [dict(v) for v in self.values],
            "contrasts": [
                {"first": p.runs[0].name, "other": p.runs[c.other].name, "metrics": [m.to_json() for m in c.rows]}
                for c in self.contrasts
            ],
        }


def _resampler(pairing: Pairing, k: int) -> Resampler:
    run = pairing.runs[k]
    found = resampler_of(run.bench, pairing.dataset(run), pairing.records(run))
    if found is None:
        raise DataError(
            f"{run.benchmark} offers no resampler, so its runs cannot be compared by bootstrap; compare runs of mc_bench, ref_adv_s or mm_niah"
        )
    return found.restrict(pairing.ids)


def is_share_metric(name: str, whole: float | None, per_sample: np.ndarray) -> bool:
    """Whether a metric is a share of samples right: each sample alone scores 0 or 1 (or has no
    value: not counted by this metric), the metric on all samples is their mean, and it is no AP."""
    if whole is None or NOT_A_SHARE.match(name.rsplit("/", 1)[-1].lower()):
        return False
    counted = per_sample[~np.isnan(per_sample)]
    if not len(counted) or not np.isin(counted, (0.0, 1.0)).all():
        return False
    return bool(abs(float(counted.mean()) - whole) < 1e-9)


VERDICT = "samples right"  # the name of the rows of the run report's verdicts


def _share(drawn: np.ndarray) -> np.ndarray:
    """Per row of drawn 0/1/NaN outcomes, the share of ones among the counted (NaN: none counted)."""
    counted = (~np.isnan(drawn)).sum(axis=1)
    right = np.nansum(drawn, axis=1)
    share: np.ndarray = np.divide(right, counted, out=np.full(len(drawn), np.nan), where=counted > 0)
    return share


def verdict_rows(pairing: Pairing, known: Sequence[dict[str, np.ndarray]]) -> list[tuple[str, list[np.ndarray]]]:
    """The run report's right/wrong verdict of each paired sample (`ReportItem.correct`: MC-Bench
    every GT box found and no extra, MM-NIAH full credit) as share metrics: over all samples and per
    value of the benchmark's first filter (bin, style, task). Left out where a headline metric
    already is that verdict (Ref-Adv-s: Acc@0.5), or where no sample has one."""
    items = [pairing.items(k) for k in range(len(pairing.runs))]
    per_run = []
    for by_id in items:
        verdicts = [by_id[i].correct if i in by_id else None for i in pairing.ids]
        per_run.append(np.array([np.nan if v is None else float(bool(v)) for v in verdicts]))
    if all(np.isnan(v).all() for v in per_run):
        return []
    first = items[0]
    keys = [k for it in first.values() for k in it.filters][:1]
    groups: list[tuple[str, np.ndarray]] = [(VERDICT, np.ones(len(pairing.ids), bool))]
    for key in keys:
        labels = np.array([str(first[i].filters.get(key, "")) if i in first else "" for i in pairing.ids], dtype=object)
        for value in dict.fromkeys(labels.tolist()):
            groups.append((f"{VERDICT}, {key} {value}", labels == value))
    out = []
    for name, mask in groups:
        masked = [np.where(mask, v, np.nan) for v in per_run]
        if any(np.array_equal(m, k.get(other, np.zeros(0)), equal_nan=True) for m, k in zip(masked, known) for other in k):
            continue
        out.append((name, masked))
    return out


def _interval(
    d: np.ndarray, resamples: int, level: float, estimate: float
) -> tuple[float | None, float | None, float | None, str]:
    """The percentile interval of the resampled differences `d`, and the two-sided bootstrap
    p-value of no difference: the share of resamples whose difference lies at least as far from
    the observed one as the observed one lies from zero (the resampled differences centred on the
    observed one stand for the differences under no difference)."""
    ok = d[~np.isnan(d)]
    if len(ok) * 2 < resamples or not len(ok):
        return None, None, None, f"the metric is missing on {resamples - len(ok)} of {resamples} resamples"
    q = (1.0 - level) / 2.0
    lo, hi = np.quantile(ok, [q, 1.0 - q])
    p = float(np.mean(np.abs(ok - estimate) >= abs(estimate) - 1e-12))
    return float(lo), float(hi), p, ""


def compare_runs(pairing: Pairing, resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL, seed: int = 0) -> Comparison:
    """Every headline metric of every run on the paired samples, and each run against the first."""
    CiSettings(resamples, level, seed)  # refuses a bad --resamples or --ci-level in one sentence
    if resamples < 1:
        raise DataError("--resamples is 0; a comparison needs resamples, e.g. --resamples 1000")
    samplers = [_resampler(pairing, k) for k in range(len(pairing.runs))]
    n = len(pairing.ids)
    everything = np.arange(n, dtype=np.int64)
    values = [s.metrics(everything) for s in samplers]
    singles = [resampled(s, everything[:, None]) for s in samplers]  # each sample alone: its 0/1 where a share
    idx = draw(n, resamples, seed, samplers[0].strata)
    drawn = [resampled(s, idx) for s in samplers]
    names = list(values[0])
    shares = {
        name
        for name in names
        if all(is_share_metric(name, v.get(name), one.get(name, np.full(n, np.nan))) for v, one in zip(values, singles))
    }
    outcomes = [{name: one[name] for name in shares} for one in singles]
    for name, per_run in verdict_rows(pairing, outcomes):  # the run report's own right/wrong, where no metric is it
        names.append(name)
        shares.add(name)
        for k, per_sample in enumerate(per_run):
            outcomes[k][name] = per_sample
            values[k][name] = _share(per_sample[None, :])[0].item() if (~np.isnan(per_sample)).any() else None
            drawn[k][name] = _share(per_sample[idx])
    contrasts = []
    for k in range(1, len(samplers)):
        contrast = Contrast(k)
        for name in names:
            base, other = values[0].get(name), values[k].get(name)
            row = MetricDiff(name, base, other, None if base is None or other is None else other - base)
            if row.diff is None:
                row.note = "the metric does not exist on the paired samples of " + (
                    "both runs" if base is None and other is None else "one run"
                )
            elif n < 2:
                row.note = "one paired sample only: no sampling spread"
            else:
                row.lo, row.hi, row.p, row.note = _interval(drawn[k][name] - drawn[0][name], resamples, level, row.diff)
            if name in shares:
                a, b = outcomes[0][name], outcomes[k][name]
                counted = ~np.isnan(a) & ~np.isnan(b)
                row.mcnemar = mcnemar((a[counted] == 1).tolist(), (b[counted] == 1).tolist())
            contrast.rows.append(row)
        contrasts.append(contrast)
    unit = str(getattr(samplers[0], "unit", "sample"))
    return Comparison(pairing, level, resamples, seed, unit, values, outcomes, contrasts)
