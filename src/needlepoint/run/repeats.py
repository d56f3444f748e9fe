"""`needlepoint eval ... --repeats K`: each sample answered K times with sampling on, and how much
the numbers move between repeats beside how uncertain they are over the samples.

The design is K sub-runs: repeat r is an ordinary run whose request seed is `--seed` + r (sent as
the request's `seed`; repeat 0 is the plain run with `--seed`), in `OUT/repeat-<r>`. The seed is
part of each run's identity, so each repeat resumes, retries its failures and refuses a changed
configuration exactly like a run, and the runner, the store and every benchmark stay as they are.
`OUT/repeats.json` then holds, per headline column of the benchmark's leaderboard, the value of
each repeat, their mean, standard deviation, minimum and maximum, the interval over samples of
repeat-0 (where its metrics.json has one) at the level repeat-0 stored (`level`), the standard
deviation over samples that interval implies (its width over 2 z, z the normal quantile of the
level: the same kind of number as the sd over repeats, so the two can be compared), and the share
of samples whose correctness (the report's per-sample verdict) changes between repeats. Repeats are
named by their folders, `repeat-0` ... `repeat-<K-1>`, everywhere.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from needlepoint.contract.base import Table
from needlepoint.contract.boards import Run, ci_level
from needlepoint.contract.registry import make
from needlepoint.core.config import RunConfig, model_slug
from needlepoint.core.conversation import Generation
from needlepoint.core.errors import DataError
from needlepoint.core.files import write_json
from needlepoint.core.jsonl import read_object
from needlepoint.core.records import Record
from needlepoint.core.store import HEADER, RECORDS, read_records
from needlepoint.run.strata import sample_subset

__all__ = ["REPEATS_FILE", "check_sampling", "correctness_changes", "evaluate_repeats", "repeat_seeds", "summary_table"]

REPEATS_FILE = "repeats.json"


def repeat_seeds(seed: int | None, k: int) -> list[int]:
    """The request seed of each repeat: `seed` (Generation's default when None) plus the repeat's index."""
    base = Generation.seed if seed is None else seed
    return [int(base or 0) + r for r in range(k)]


def check_sampling(config: RunConfig, k: int) -> None:
    """Refuse (DataError) repeats that cannot differ: K below 2, or a temperature of 0."""
    if k < 2:
        raise DataError(f"--repeats {k}: repeat each sample at least twice (--repeats 2 or more), or drop --repeats")
    bench = make(config.benchmark, **config.options)
    temperature = config.generation.get("temperature", bench.generation_defaults.get("temperature", Generation.temperature))
    if not isinstance(temperature, (int, float)) or temperature <= 0:
        raise DataError(
            "--repeats needs sampling on: pass --temperature above 0 (at temperature 0 every repeat gives the same answers)"
        )


def correctness_changes(per_repeat: list[dict[str, bool]]) -> dict[str, Any]:
    """How many samples, judged in every repeat, are right in some repeats and wrong in others."""
    common = set(per_repeat[0]).intersection(*per_repeat[1:]) if per_repeat else set()
    changed = sum(len({verdicts[s] for verdicts in per_repeat}) > 1 for s in common)
    return {"samples": len(common), "changed": changed, "share": changed / len(common) if common else None}


def _verdicts(bench: Any, dataset: Any, records: dict[str, Record]) -> dict[str, bool]:
    """Each answered sample's right/wrong verdict, as the report's "wrong only" filter has it."""
    from needlepoint.core import status

    answered = [records[s.id] for s in dataset if s.id in records and records[s.id].get("status") not in status.FAILED]
    items = bench.report_items(dataset.subset(r["id"] for r in answered), answered)
    return {item.id: item.correct for item in items if isinstance(item.correct, bool)}


def sd_of_interval(interval: Any, level: Any) -> float | None:
    """The standard deviation a central interval at `level` implies under a normal shape: its
    width / (2 z), z the normal quantile of (1 + level) / 2; None without both."""
    if not isinstance(interval, (list, tuple)) or len(interval) != 2 or not isinstance(level, (int, float)) or not 0 < level < 1:
        return None
    z = statistics.NormalDist().inv_cdf(0.5 + float(level) / 2)
    return (float(interval[1]) - float(interval[0])) / (2 * z)


def _headline_cells(run_dir: Path, metrics: dict[str, Any]) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """The leaderboard's value columns of a run's first row (%), and their intervals over samples."""
    from needlepoint.report.formats import intervals_of
    from needlepoint.report.leaderboard import layout

    run = Run(run_dir, read_object(run_dir / HEADER, "move the folder aside", 1 << 24), metrics)
    boards = layout(run.benchmark)([run])
    if not boards or not boards[0].rows:
        return {}, {}
    board = boards[0]
    intervals = intervals_of(board, {str(run_dir): metrics})
    values: dict[str, float] = {}
    bounds: dict[str, tuple[float, float]] = {}
    for j, (column, value) in enumerate(zip(board.columns, board.rows[0].values)):
        if column in board.counts or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        values[column] = float(value)
        if (0, j) in intervals:
            bounds[column] = intervals[(0, j)]
    return values, bounds


def evaluate_repeats(config: RunConfig, k: int) -> tuple[dict[str, Any], list[Any]]:
    """Run the K repeats (each resumes), write OUT/repeats.json; return the summary and each repeat's RunResult."""
    from needlepoint.run.evaluate import evaluate

    check_sampling(config, k)
    seeds = repeat_seeds(config.generation.get("seed"), k)
    out = config.out or Path("runs") / config.benchmark / model_slug(config.model) / f"repeats-x{k}-seed{seeds[0]}"
    results = []
    for r, seed in enumerate(seeds):
        sub = replace(config, generation={**config.generation, "seed": seed}, out=out / f"repeat-{r}")
        if config.show_progress:
            print(f"repeat-{r} ({r + 1} of {k}, seed {seed})", file=sys.stderr)
        results.append(evaluate(sub))
    bench = results[0].benchmark
    dataset = sample_subset(bench, bench.load(config.data), config.sample, config.sample_seed)
    requested = dataset[: config.limit] if config.limit else dataset
    verdicts = [_verdicts(bench, requested, read_records(res.run_dir / RECORDS)) for res in results]
    cells = [_headline_cells(res.run_dir, res.metrics) for res in results]
    level = ci_level(results[0].metrics)
    metrics: dict[str, Any] = {}
    for column in cells[0][0]:
        values = [c[0][column] for c in cells if column in c[0]]
        metrics[column] = {
            "values": values,
            "mean": statistics.fmean(values),
            "sd": statistics.stdev(values) if len(values) > 1 else None,
            "min": min(values),
            "max": max(values),
            "interval_over_samples": list(cells[0][1][column]) if column in cells[0][1] else None,
            "sd_over_samples": sd_of_interval(cells[0][1].get(column), level),
        }
    summary = {
        "repeats": k,
        "seeds": seeds,
        "runs": [str(res.run_dir) for res in results],
        "unit": "percent",
        "level": level,
        "metrics": metrics,
        "correctness_changes": correctness_changes(verdicts),
    }
    write_json(out / REPEATS_FILE, summary)
    return summary, results


def summary_table(summary: dict[str, Any]) -> Table:
    """The repeats summary for the terminal: per column the mean and sd over repeats, beside the sd
    over samples that repeat-0's interval implies (one kind of number, comparable) and that
    interval itself at the level repeat-0 stored."""
    level = summary.get("level")
    shown_level = f"{100 * float(level):g}% " if isinstance(level, (int, float)) else ""
    table = Table(
        f"{summary['repeats']} repeats (seeds {', '.join(map(str, summary['seeds']))}: repeat-0 ... repeat-{summary['repeats'] - 1})",
        [
            "metric",
            "mean",
            "sd over repeats",
            "min",
            "max",
            "sd over samples (repeat-0)",
            f"{shown_level}interval over samples (repeat-0)",
        ],
    )
    for column, m in summary["metrics"].items():
        interval = m["interval_over_samples"]
        shown = f"[{interval[0]:.1f}, {interval[1]:.1f}]" if interval else "–"
        sd = round(m["sd"], 2) if m["sd"] is not None else None
        over_samples = m.get("sd_over_samples")
        table.rows.append(
            [
                column,
                round(m["mean"], 2),
                sd,
                round(m["min"], 1),
                round(m["max"], 1),
                round(over_samples, 2) if isinstance(over_samples, (int, float)) else None,
                shown,
            ]
        )
    changes = summary["correctness_changes"]
    if changes["share"] is not None:
        table.rows.append(
            [
                "correctness changes",
                f"{100 * changes['share']:.1f}%",
                f"{changes['changed']} of {changes['samples']}",
                None,
                None,
                None,
                "",
            ]
        )
    return table
