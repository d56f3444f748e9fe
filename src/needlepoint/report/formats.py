"""Leaderboards a paper can use: rows ranked by the board's headline column (published rows
among the runs), the runs of the report marked, 95% intervals as ± where metrics.json has them,
and `needlepoint report --format markdown|latex|csv [--rows PATTERN]` writing the boards in the
papers' layouts, ready to paste (docs/reporting.md).

Intervals come from metrics.json's `intervals` block when it is there (`{"metrics": {path:
{"estimate", "lo", "hi"}}}`, paths "/"-joined into metrics.json); a cell shows one when exactly
one interval of its run has the cell's value as its estimate (a row's own labels, e.g. MC-Bench's
protocol, settle a tie), so that no cell ever shows another metric's interval. A run without the
block, or a metric without an interval, shows the value alone.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from needlepoint.contract.boards import Board, BoardRow, Cell, Corrupt
from needlepoint.core.numeric import is_finite

__all__ = ["FORMATS", "Interval", "intervals_of", "latex", "markdown", "rank_rows", "render", "select_rows", "table_csv"]

FORMATS = ("markdown", "latex", "csv")
Interval = tuple[float, float]  # (lo, hi) in the board's unit (percent)


def _number(value: Cell) -> float | None:
    """A cell as a number for ranking: a run's value, or a published cell's text; None otherwise."""
    if value is None or isinstance(value, Corrupt):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def rank_rows(board: Board) -> None:
    """Order the board's rows by its headline column, best first, published rows among the runs; a
    run's rows stay together (MC-Bench's official and corrected rows: ranked by the first one);
    rows without a headline value go last, in their order."""
    if board.headline is None or board.headline not in board.columns:
        return
    col = board.columns.index(board.headline)
    groups: dict[tuple[str, int], list[BoardRow]] = {}
    for n, row in enumerate(board.rows):  # a published row alone; a run's rows by its folder
        groups.setdefault((row.source, n if row.published else -1), []).append(row)

    def best(rows: list[BoardRow]) -> float:
        value = _number(rows[0].values[col]) if col < len(rows[0].values) else None
        return -value if value is not None else math.inf

    ordered = sorted(groups.values(), key=best)  # stable: ties keep their order
    board.rows = [row for rows in ordered for row in rows]


def select_rows(board: Board, patterns: Sequence[str]) -> None:
    """Keep the published rows whose first label matches one of the glob `patterns` (any case, e.g.
    "Qwen2.5-VL-*"); the runs of the report always stay."""
    if not patterns:
        return
    lowered = [p.lower() for p in patterns]
    board.rows = [
        r
        for r in board.rows
        if not r.published or any(fnmatch.fnmatchcase((r.labels[0] if r.labels else "").lower(), p) for p in lowered)
    ]


def _flat_intervals(block: Any) -> dict[str, tuple[float, float, float]]:
    """path -> (estimate, lo, hi) of an intervals block, entries without an interval left out."""
    entries = block.get("metrics") if isinstance(block, dict) else None
    out: dict[str, tuple[float, float, float]] = {}
    if not isinstance(entries, dict):
        return out
    for path, entry in entries.items():
        if isinstance(entry, dict) and all(is_finite(entry.get(k)) for k in ("estimate", "lo", "hi")):
            out[str(path)] = (float(entry["estimate"]), float(entry["lo"]), float(entry["hi"]))
    return out


def intervals_of(board: Board, metrics_by_source: Mapping[str, dict[str, Any]]) -> dict[tuple[int, int], Interval]:
    """(row index, column index) -> (lo, hi) in percent, for the run cells whose interval metrics.json
    holds (see the module's docstring); empty when no run has an intervals block."""
    found: dict[tuple[int, int], Interval] = {}
    for i, row in enumerate(board.rows):
        metrics = metrics_by_source.get(row.source)
        if row.published or not metrics:
            continue
        flat = _flat_intervals(metrics.get("intervals"))
        if not flat:
            continue
        labels = {label.lower() for label in row.labels}
        for j, value in enumerate(row.values):
            if j >= len(board.columns) or board.columns[j] in board.counts or value is None or isinstance(value, (str, Corrupt)):
                continue
            hits = [p for p, (est, _, _) in flat.items() if math.isclose(100 * est, float(value), rel_tol=1e-9, abs_tol=1e-9)]
            if len(hits) > 1:  # a tie: the path that names one of the row's labels (official, corrected)
                hits = [p for p in hits if labels & set(p.lower().split("/"))]
            if len(hits) == 1:
                _, lo, hi = flat[hits[0]]
                found[(i, j)] = (100 * lo, 100 * hi)
    return found


def _shown(board: Board, j: int, value: Cell, interval: Interval | None) -> str:
    text = board.cell(board.columns[j], value)
    if interval is None or not text:
        return text
    return f"{text} ± {(interval[1] - interval[0]) / 2:.1f}"


def _cells(board: Board, intervals: Mapping[tuple[int, int], Interval]) -> list[list[str]]:
    """Each row's label cells and value cells as people read them (± half the interval's width)."""
    return [
        [*row.labels, *(_shown(board, j, v, intervals.get((i, j))) for j, v in enumerate(row.values))]
        for i, row in enumerate(board.rows)
    ]


def _sources(board: Board) -> list[str]:
    return list(dict.fromkeys(r.source.removeprefix("published: ") for r in board.rows if r.published))


def _caption(board: Board, intervals: Mapping[tuple[int, int], Interval]) -> str:
    parts = [board.title + "."]
    if any(not r.published for r in board.rows) and any(r.published for r in board.rows):
        parts.append("Bold: our runs; the other rows as published")
        sources = _sources(board)
        parts[-1] += f" ({'; '.join(sources)})." if sources else "."
    if intervals:
        parts.append("± half the width of the 95% bootstrap interval over samples.")
    return " ".join(parts)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(board: Board, intervals: Mapping[tuple[int, int], Interval]) -> str:
    """One board as a Markdown table, the report's runs in bold, the caption under it."""
    head = [*board.label_columns, *board.columns]
    lines = [
        "| " + " | ".join(_md_cell(c) for c in head) + " |",
        "|" + "|".join(":---" if i < len(board.label_columns) else "---:" for i in range(len(head))) + "|",
    ]
    for row, cells in zip(board.rows, _cells(board, intervals)):
        shown = [f"**{_md_cell(c)}**" if not row.published and c else _md_cell(c) for c in cells]
        lines.append("| " + " | ".join(shown) + " |")
    return "\n".join([*lines, "", _caption(board, intervals), ""])


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "±": r"$\pm$",
}


def latex_escape(text: str) -> str:
    """Text as LaTeX prints it literally (every special character escaped)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _latex_head(column: str) -> str:
    """A column name as a paper sets it: "AP50^ref" as AP50 with a superscript ref, ">=7" as ≥7."""
    base, sep, sup = column.partition("^")
    if sep and sup:
        return latex_escape(base) + r"\textsuperscript{" + latex_escape(sup) + "}"
    if column.startswith(">="):
        return r"$\geq$" + latex_escape(column[2:])
    return latex_escape(column)


def latex(board: Board, intervals: Mapping[tuple[int, int], Interval]) -> str:
    """One board as a LaTeX table (booktabs rules), the report's runs in bold, a caption naming the
    published sources."""
    head = [*board.label_columns, *board.columns]
    spec = "l" * len(board.label_columns) + "r" * len(board.columns)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\caption{" + latex_escape(_caption(board, intervals)) + "}",
        r"\label{tab:" + re.sub(r"[^A-Za-z0-9:-]", "-", board.key) + "}",
        r"\begin{tabular}{" + spec + "}",
        r"\toprule",
        " & ".join(_latex_head(c) for c in head) + r" \\",
        r"\midrule",
    ]
    for row, cells in zip(board.rows, _cells(board, intervals)):
        shown = [latex_escape(c) for c in cells]
        if not row.published:
            shown = [r"\textbf{" + c + "}" if c else c for c in shown]
        lines.append(" & ".join(shown) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def table_csv(board: Board, intervals: Mapping[tuple[int, int], Interval]) -> str:
    """One board as CSV: unrounded values, `ours` (yes for the report's runs), the source, and a
    `<column> lo` / `<column> hi` pair for each column that has an interval in some row."""
    with_ci = sorted({j for _, j in intervals})
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(
        [
            *board.label_columns,
            *board.columns,
            *(f"{board.columns[j]} {e}" for j in with_ci for e in ("lo", "hi")),
            "ours",
            "source",
        ]
    )
    for i, row in enumerate(board.rows):
        values = ["" if v is None else v if isinstance(v, str) else repr(v) for v in row.values]
        bounds = [repr(intervals[(i, j)][k]) if (i, j) in intervals else "" for j in with_ci for k in (0, 1)]
        w.writerow([*row.labels, *values, *bounds, "no" if row.published else "yes", row.source])
    return buf.getvalue()


def render(boards: Sequence[Board], fmt: str, metrics_by_source: Mapping[str, dict[str, Any]]) -> str:
    """Every board in `fmt` (FORMATS), one after another (CSV: a blank line and the board's title
    line, `# title`, between boards)."""
    writer = {"markdown": markdown, "latex": latex, "csv": table_csv}[fmt]
    parts = []
    for board in boards:
        intervals = intervals_of(board, metrics_by_source)
        text = writer(board, intervals)
        if fmt == "markdown":
            text = f"### {board.title}\n\n{text}"
        elif fmt == "latex":
            text = f"% {board.title}\n{text}"
        elif len(boards) > 1:
            text = f"# {board.title}\n{text}"
        parts.append(text)
    return "\n".join(parts)
