"""MC-Bench on a leaderboard (`needlepoint report`): the layout of the paper's Table 2."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from needlepoint.benchmarks.mc_bench.tables import STYLE_KEYS, TABLE2_COLUMNS
from needlepoint.contract.boards import Board, BoardRow, Run, answer_label, at, ci_level, interval, obj, pct

__all__ = ["boards", "mc_values"]


def mc_values(block: Any, by_style: Any) -> list[float | None]:
    """One protocol's cells under MC-Bench's TABLE2_COLUMNS (%, unrounded, unlike `table2_row`,
    so the CSV keeps every digit): "Acc^ref" is by_style["Referring"]["acc"], "AP50" is
    block["ap50"]."""
    styles = dict(STYLE_KEYS)
    values = []
    for column in TABLE2_COLUMNS:
        metric, _, style = column.partition("^")
        values.append(pct(at(by_style, styles[style], metric.lower()) if style else at(block, metric.lower())))
    return values


def _interval_names(protocol: str, at_style: str) -> list[str]:
    """The `intervals` names (stats) of TABLE2_COLUMNS for one protocol."""
    styles = dict(STYLE_KEYS)
    names = []
    for column in TABLE2_COLUMNS:
        metric, _, style = column.partition("^")
        names.append(f"{at_style}/{styles[style]}/{metric.lower()}" if style else f"{protocol}/{metric.lower()}")
    return names


def boards(runs: Sequence[Run]) -> list[Board]:
    """One board in the layout of the paper's Table 2: an official and a corrected row per run,
    best official AP50 first."""
    board = Board(
        "mc_bench",
        "MC-Bench (%, the paper's Table 2 columns)",
        ["model", "input", "protocol"],
        list(TABLE2_COLUMNS),
        note="official: the authors' eval_mc_bench.py to the last digit; corrected: per-sample optimal group assignment",
        headline="AP50",
    )
    for run in sorted(runs, key=lambda r: -(pct(at(r.metrics, "official", "ap50")) or -1)):
        m = run.metrics
        official, corrected = obj(m.get("official")), obj(m.get("corrected"))
        corrected_styles = corrected.get("by_style") or at(m, "analyses", "by_style")
        setting = answer_label(str(run.option("input_mode") or ""), run, groups=True)
        for protocol, block, styles, at_style in (
            ("official", official, official.get("by_style"), "official/by_style"),
            ("corrected", corrected, corrected_styles, "analyses/by_style"),
        ):
            found = [interval(m, name) for name in _interval_names(protocol, at_style)]
            board.rows.append(
                BoardRow(
                    [run.label, setting, protocol],
                    mc_values(block, styles),
                    str(run.dir),
                    intervals=found,
                    level=ci_level(m),
                )
            )
    return [board]
