"""How much of a run its numbers cover, read from metrics.json's `run` block: one wording for the
terminal tables, the run page and the leaderboard ("answered / requested"), and the sentence that
stands in for the metrics of a run with nothing answered. In the benchmarks' contract layer, beside
`Table`: the benchmarks' tables and the report both use it."""

from __future__ import annotations

from typing import Any

from needlepoint.contract.base import Table

__all__ = ["answered_cell", "coverage_note", "has_answers", "is_incomplete", "no_answers_table", "run_counts"]


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_counts(metrics: dict[str, Any]) -> tuple[int, int, int, int] | None:
    """(answered, failed, requested, samples) from metrics.json's `run` block; None without one.
    `requested` falls back to answered + failed for runs written before it was stored."""
    block = metrics.get("run") if isinstance(metrics, dict) else None
    if not isinstance(block, dict):
        return None
    answered, failed = _count(block.get("answered")), _count(block.get("failed")) or 0
    if answered is None:
        return None
    requested = _count(block.get("requested"))
    requested = answered + failed if requested is None else requested
    samples = _count(block.get("samples"))
    return answered, failed, requested, requested if samples is None else samples


def is_incomplete(metrics: dict[str, Any]) -> bool:
    """Whether some requested sample failed or some sample of the set was never requested."""
    counts = run_counts(metrics)
    return counts is not None and (counts[0] < counts[2] or counts[2] < counts[3])


def answered_cell(metrics: dict[str, Any]) -> str | None:
    """The cell "answered/requested" (e.g. "14/30"), with the set's size when the run requested fewer
    ("14/30 of 100"); None without a `run` block."""
    counts = run_counts(metrics)
    if counts is None:
        return None
    answered, _, requested, samples = counts
    return f"{answered}/{requested}" + (f" of {samples}" if samples > requested else "")


def coverage_note(metrics: dict[str, Any]) -> str:
    """An empty string for a complete run; else a short clause for a table's title, e.g. "answered 14 of 30
    requested (16 failed): numbers cover the answered samples"."""
    counts = run_counts(metrics)
    if counts is None or not is_incomplete(metrics):
        return ""
    answered, failed, requested, samples = counts
    text = f"answered {answered} of {requested} requested"
    text += f" ({failed} failed)" if failed else ""
    text += f", {samples - requested} of {samples} not requested" if samples > requested else ""
    return text + ": numbers cover the answered samples"


def has_answers(metrics: dict[str, Any]) -> bool:
    """False only for a run whose `run` block says nothing was answered (metrics.json then holds
    no headline numbers); True for score files and runs with answers."""
    counts = run_counts(metrics)
    return counts is None or counts[0] > 0


def no_answers_table(title: str, metrics: dict[str, Any]) -> Table:
    """The one-sentence table that stands in for the metrics of a run with nothing answered. In the benchmarks' contract layer, beside
    `Table`: the benchmarks' tables and the report both use it."""
    counts = run_counts(metrics) or (0, 0, 0, 0)
    _, failed, requested, samples = counts
    sentence = f"No sample was answered ({failed} of {requested} requested failed"
    sentence += f"; {samples} in the set" if samples != requested else ""
    return Table(title, ["note"], [[sentence + "): there are no metrics; records.jsonl keeps each failure."]])
