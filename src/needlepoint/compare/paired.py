"""The paired comparison of runs, metric by metric: each run's value on the paired samples, the
difference against the first run, its paired-bootstrap interval and p-value, and for metrics that
are a share of samples right, the exact McNemar test.

Paired means one draw for all runs: the benchmark's stats.Resampler of each run is restricted to
the paired samples (in one order), and the same array of drawn positions (stats.draw, within the
benchmark's strata) is scored by every run's resampler, so each resample holds the same samples
in every run. The p-value comes from the same percentile bootstrap as the interval: twice the
smaller share of resampled differences on either side of zero (zero counted on both sides), each
share (count + 1) / (resamples + 1), so it is never below 1/(resamples + 1) and the interval at
level 1 - alpha leaves out zero where p < alpha (up to that +1). Identical runs give a difference of
0 on every resample, hence the interval [0, 0] and p = 1.

Many rows, one family: one row per benchmark is the primary comparison (compare.order); every
other row's p-values (bootstrap and McNemar) are also given Holm-adjusted over the other rows of
its contrast. A row whose values and draws repeat an earlier row's in every run (MC-Bench's
official and corrected Acc where they agree) is left out, and the comparison says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from needlepoint.compare.mcnemar import McNemar, mcnemar
from needlepoint.compare.order import paper_tasks, primary_metric, task_sorted
from needlepoint.compare.runs import Pairing
from needlepoint.core.errors import DataError
from needlepoint.stats import DEFAULT_LEVEL, DEFAULT_RESAMPLES, CiSettings, Resampler, draw, resampler_of
from needlepoint.stats.bootstrap import percentile_bounds, resampled

__all__ = ["Comparison", "Contrast", "MetricDiff", "bootstrap_p", "compare_runs", "holm", "is_share_metric"]

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
    primary: bool = False
    p_holm: float | None = None  # the Holm-adjusted p over the contrast's other rows (None: the primary row)
    mcnemar_holm: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "metric": self.name,
            "primary": self.primary,
            "first": self.base,
            "other": self.other,
            "difference": self.diff,
            "interval": None if self.lo is None else [self.lo, self.hi],
            "p": self.p,
            "p_holm": self.p_holm,
        }
        if self.mcnemar is not None:
            out["mcnemar"] = {**self.mcnemar.to_json(), "p_holm": self.mcnemar_holm}
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Contrast:
    """Run `other` (an index into the comparison's runs) against the first run."""

    other: int
    rows: list[MetricDiff] = field(default_factory=list)

    def family(self) -> tuple[int, int]:
        """How many rows Holm's adjustment runs over: (rows with a bootstrap p, rows with McNemar),
        the primary row not counted."""
        rest = [m for m in self.rows if not m.primary]
        return sum(m.p is not None for m in rest), sum(m.mcnemar is not None for m in rest)


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
    primary: str | None = None  # the primary comparison's metric (the first row)
    repeats: dict[str, str] = field(default_factory=dict)  # a row left out -> the row it repeats

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
                "p_value": "twice the smaller share of resampled differences on either side of 0, each (count + 1) / (resamples + 1)",
                "level": self.level,
                "resamples": self.resamples,
                "seed": self.seed,
            },
            "primary": self.primary,
            "adjustment": "Holm (step-down) over each contrast's rows other than the primary one, bootstrap and McNemar p apart",
            "left_out_as_repeats": dict(self.repeats),
            "values": [dict(v) for v in self.values],
            "contrasts": [
                {
                    "first": p.runs[0].name,
                    "other": p.runs[c.other].name,
                    "family": dict(zip(("p", "mcnemar"), c.family())),
                    "metrics": [m.to_json() for m in c.rows],
                }
                for c in self.contrasts
            ],
        }


def _resampler(pairing: Pairing, k: int) -> Resampler:
    run = pairing.runs[k]
    found = pairing.read(run, "score", lambda d, r: resampler_of(run.bench, d, r))
    if found is None:
        raise DataError(
            f"{run.dir} is a run of {run.benchmark}, which offers no resampler, so its runs cannot be compared by bootstrap; "
            "compare runs of mc_bench, ref_adv_s or mm_niah"
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


def bootstrap_p(d: np.ndarray) -> float:
    """The two-sided p-value of no difference from resampled differences `d` (no NaN): twice the
    smaller share on either side of zero, zero counted on both, each share (count + 1) / (B + 1).
    The same procedure as the percentile interval (an interval at level 1 - alpha leaves zero out
    about where p < alpha), and never below 1/(B + 1): B resamples cannot show a smaller p."""
    b = len(d)
    below, above = int((d <= 0.0).sum()), int((d >= 0.0).sum())
    return min(1.0, 2.0 * (min(below, above) + 1) / (b + 1))


def holm(ps: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of the p-values `ps` (None: not in the family, stays None):
    the i-th smallest of m becomes max over j <= i of min(1, (m - j + 1) p_(j))."""
    present = sorted((p, k) for k, p in enumerate(ps) if p is not None)
    m = len(present)
    out: list[float | None] = [None] * len(ps)
    running = 0.0
    for j, (p, k) in enumerate(present):
        running = max(running, min(1.0, (m - j) * p))
        out[k] = running
    return out


def _interval(d: np.ndarray, resamples: int, level: float) -> tuple[float | None, float | None, float | None, str]:
    """The percentile interval of the resampled differences `d` and its p-value (`bootstrap_p`)."""
    ok = d[~np.isnan(d)]
    if len(ok) * 2 < resamples or not len(ok):
        return None, None, None, f"the metric is missing on {resamples - len(ok)} of {resamples} resamples"
    lo, hi = percentile_bounds(ok, level)
    return lo, hi, bootstrap_p(ok), ""


def _repeats(
    names: Sequence[str],
    values: Sequence[dict[str, float | None]],
    drawn: Sequence[dict[str, np.ndarray]],
    outcomes: Sequence[dict[str, np.ndarray]],
) -> dict[str, str]:
    """Rows that repeat an earlier row: the same value, the same draws and (for shares) the same
    per-sample outcomes in every run. The earlier row (the primary one first) is kept."""
    out: dict[str, str] = {}
    kept: list[str] = []

    def same(a: str, b: str) -> bool:
        for v, d, o in zip(values, drawn, outcomes):
            if v.get(a) != v.get(b) or (a in o) != (b in o):
                return False
            da, db = d.get(a), d.get(b)
            if da is None or db is None or not np.array_equal(da, db, equal_nan=True):
                return False
            if a in o and not np.array_equal(o[a], o[b], equal_nan=True):
                return False
        return True

    for name in names:
        twin = next((k for k in kept if same(k, name)), None)
        if twin is None:
            kept.append(name)
        else:
            out[name] = twin
    return out


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
    benchmark = pairing.runs[0].benchmark
    primary = primary_metric(benchmark, names)
    names = task_sorted(names, str, paper_tasks(benchmark))
    if primary is not None:
        names = [primary, *(x for x in names if x != primary)]
    repeats = _repeats(names, values, drawn, outcomes)
    names = [x for x in names if x not in repeats]
    contrasts = []
    for k in range(1, len(samplers)):
        contrast = Contrast(k)
        for name in names:
            base, other = values[0].get(name), values[k].get(name)
            row = MetricDiff(name, base, other, None if base is None or other is None else other - base, primary=name == primary)
            if row.diff is None:
                row.note = "the metric does not exist on the paired samples of " + (
                    "both runs" if base is None and other is None else "one run"
                )
            elif n < 2:
                row.note = "one paired sample only: no sampling spread"
            else:
                row.lo, row.hi, row.p, row.note = _interval(drawn[k][name] - drawn[0][name], resamples, level)
            if name in shares:
                a, b = outcomes[0][name], outcomes[k][name]
                counted = ~np.isnan(a) & ~np.isnan(b)
                row.mcnemar = mcnemar((a[counted] == 1).tolist(), (b[counted] == 1).tolist())
            contrast.rows.append(row)
        rest = [m for m in contrast.rows if not m.primary]
        for m, ph in zip(rest, holm([m.p for m in rest])):
            m.p_holm = ph
        for m, ph in zip(rest, holm([m.mcnemar.p if m.mcnemar else None for m in rest])):
            m.mcnemar_holm = ph
        contrasts.append(contrast)
    unit = str(getattr(samplers[0], "unit", "sample"))
    return Comparison(pairing, level, resamples, seed, unit, values, outcomes, contrasts, primary, repeats)
