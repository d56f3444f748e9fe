"""metrics.json's `intervals` block laid out for people: one table of every headline number with
its interval, for the terminal and the run page, and the ± a leaderboard cell shows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from needlepoint.contract.base import Table, percent

__all__ = ["interval_table", "with_intervals"]


def _block(metrics: dict[str, Any]) -> dict[str, Any] | None:
    block = metrics.get("intervals")
    return block if isinstance(block, dict) and isinstance(block.get("metrics"), dict) else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def interval_table(metrics: dict[str, Any]) -> Table | None:
    """Every metric of the `intervals` block: its value and interval in % ("[lo, hi]"), or why it
    has none; None when the run has no intervals (--no-ci, or a run from before them)."""
    block = _block(metrics)
    if block is None:
        return None
    level = block.get("level")
    shown = f"{100 * float(level):g}%" if isinstance(level, (int, float)) else "?"
    unit = f"{block.get('unit', 'unit')}s" if block.get("units") != 1 else str(block.get("unit", "unit"))
    strata = ", stratified" if block.get("stratified") else ""
    score = str(block["share_method"]).split(" (")[0] if block.get("share_method") else ""
    table = Table(
        f"{shown} intervals ({f'*: {score}; others: ' if score else ''}percentile bootstrap over {block.get('units')} "
        f"{unit}{strata}, {block.get('resamples')} resamples, seed {block.get('seed')})",
        ["metric", "value %", f"{shown} interval %"],
    )
    for name, cell in block["metrics"].items():
        cell = cell if isinstance(cell, dict) else {}
        est = cell.get("estimate")
        lo, hi = cell.get("lo"), cell.get("hi")
        if _number(lo) and _number(hi):
            text = f"[{percent(lo)}, {percent(hi)}]" + (" *" if cell.get("method") else "")
        else:
            text = f"none: {cell.get('none', 'not computed')}"
        table.rows.append([name, percent(est) if _number(est) else None, text])
    return table


def with_intervals(tables: Sequence[Table], metrics: dict[str, Any]) -> list[Table]:
    """A benchmark's tables, then the interval table when the run has intervals."""
    extra = interval_table(metrics)
    return [*tables, *([extra] if extra is not None else [])]
