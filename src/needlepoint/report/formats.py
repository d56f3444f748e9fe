"""Leaderboards a paper can use: rows ranked by the board's headline column (published rows
among the runs), the runs of the report marked, intervals as `value [lo, hi]` (LaTeX: lo and hi
as a sub/superscript pair) where metrics.json has them, and `needlepoint report --format
markdown|latex|csv [--rows PATTERN]` writing the boards in the papers' layouts, ready to paste
(docs/reporting.md).

Intervals come from metrics.json's `intervals` block when it is there (`{"level", "metrics": {path:
{"estimate", "lo", "hi"}}}`, paths "/"-joined into metrics.json): each board layout attaches to a
cell the interval of the metric the cell shows, by its name (`BoardRow.intervals`), so two cells of
equal value each keep their own; the caption names the level the runs stored. A run without the
block, or a metric without an interval, shows the value alone.

Which rows are "ours": a complete run of the report is bold (CSV `ours = yes`); a published
prediction file the report rescored (model `published:<model>`) is marked "‡" (`rescored`), an
incomplete run "*" (`incomplete`), neither bold; a mean over repeats is bold when every repeat is
a complete run.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from needlepoint.contract.boards import Board, BoardRow, Cell, Corrupt, Run, bound, level_text, progress_mark

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
    run's rows stay together (MC-Bench's official and corrected rows: ranked by the first one), and
    so do the repeats of a `--repeats` series with their mean row (ranked by the mean); rows
    without a headline value go last, in their order."""
    if board.headline is None or board.headline not in board.columns:
        return
    col = board.columns.index(board.headline)
    sources = {row.source for row in board.rows if not row.published}
    groups: dict[tuple[str, int], list[BoardRow]] = {}
    for n, row in enumerate(board.rows):  # a published row alone; a run's rows by its folder
        series = str(Path(row.source).parent)  # a repeat beside its series' mean row: one group
        key = series if not row.published and series in sources else row.source
        groups.setdefault((key, n if row.published else -1), []).append(row)

    def best(rows: list[BoardRow]) -> float:
        series = str(Path(rows[0].source).parent)
        lead = next((r for r in rows if r.source == series), rows[0])  # a series ranks by its mean
        value = _number(lead.values[col]) if col < len(lead.values) else None
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


def intervals_of(board: Board, metrics_by_source: Mapping[str, dict[str, Any]] | None = None) -> dict[tuple[int, int], Interval]:
    """(row index, column index) -> (lo, hi) in percent, for the run cells whose layout attached an
    interval (`BoardRow.intervals`, by the metric's name; see the module's docstring)."""
    found: dict[tuple[int, int], Interval] = {}
    for i, row in enumerate(board.rows):
        if row.published:
            continue
        for j in range(min(len(row.values), len(board.columns))):
            got = board.interval_of(row, j)
            if got is not None:
                found[(i, j)] = got
    return found


RESCORED, INCOMPLETE = "‡", "*"


def kind(row: BoardRow, metrics_by_source: Mapping[str, dict[str, Any]]) -> str:
    """What a row is in a paper's table: "published" (a paper's row), "rescored" (a published
    prediction file rescored here: model `published:<model>`), "incomplete" (a run that did not
    answer every sample), "ours" (a complete run of the report, the only rows set in bold)."""
    if row.published:
        return "published"
    if row.labels and row.labels[0].startswith("published:"):
        return "rescored"
    metrics = metrics_by_source.get(row.source)
    if metrics is not None and progress_mark(Run(Path(row.source), {}, metrics)):
        return "incomplete"
    if row.labels and "(incomplete" in row.labels[0]:  # a run's label, or a series mean's with an incomplete repeat
        return "incomplete"
    return "ours"


def _marked(row: BoardRow, cells: list[str], what: str) -> list[str]:
    """The row's first label with its mark: "‡" for a rescoring, "*" for an incomplete run."""
    mark = {"rescored": RESCORED, "incomplete": INCOMPLETE}.get(what, "")
    if mark and cells:
        return [f"{cells[0]} {mark}", *cells[1:]]
    return cells


def _shown(board: Board, j: int, value: Cell, interval: Interval | None) -> str:
    text = board.cell(board.columns[j], value)
    if interval is None or not text:
        return text
    return f"{text} [{bound(interval[0])}, {bound(interval[1])}]"


def _sd(row: BoardRow, j: int) -> float | None:
    return row.sds[j] if j < len(row.sds) else None


def _cells(board: Board, intervals: Mapping[tuple[int, int], Interval]) -> list[list[str]]:
    """Each row's label cells and value cells as people read them ("value [lo, hi]"; a mean over
    repeats "mean ± sd")."""
    return [
        [
            *row.labels,
            *(
                f"{board.cell(board.columns[j], v)} ± {sd:.1f}"
                if (sd := _sd(row, j)) is not None and v is not None
                else _shown(board, j, v, intervals.get((i, j)))
                for j, v in enumerate(row.values)
            ),
        ]
        for i, row in enumerate(board.rows)
    ]


def _sources(board: Board) -> list[str]:
    return list(dict.fromkeys(r.source.removeprefix("published: ") for r in board.rows if r.published))


def _caption(board: Board, intervals: Mapping[tuple[int, int], Interval], kinds: Sequence[str], latex: bool = False) -> str:
    parts = [board.title + "."]
    if "ours" in kinds and any(k != "ours" for k in kinds):
        parts.append("Bold: our complete runs")
        sources = _sources(board)
        if sources:
            parts[-1] += f"; the other rows as published ({'; '.join(sources)})"
        parts[-1] += "."
    if "rescored" in kinds:
        parts.append(f"{RESCORED}: a published prediction file rescored with needlepoint, not our model's run.")
    if "incomplete" in kinds:
        parts.append(f"{INCOMPLETE}: an incomplete run; its numbers cover the answered samples only.")
    if intervals:
        levels = sorted(
            {
                r.level
                for i, r in enumerate(board.rows)
                if r.level is not None and any((i, j) in intervals for j in range(len(r.values)))
            }
        )
        level = level_text(levels) if levels else "stored"
        shape = "subscript and superscript" if latex else "[lo, hi]"
        parts.append(f"{shape}: the {level} interval over samples each run stored.")
    return " ".join(parts)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(
    board: Board, intervals: Mapping[tuple[int, int], Interval], metrics_by_source: Mapping[str, dict[str, Any]] | None = None
) -> str:
    """One board as a Markdown table, the report's runs in bold, the caption under it."""
    metrics_by_source = metrics_by_source or {}
    head = [*board.label_columns, *board.columns]
    lines = [
        "| " + " | ".join(_md_cell(c) for c in head) + " |",
        "|" + "|".join(":---" if i < len(board.label_columns) else "---:" for i in range(len(head))) + "|",
    ]
    kinds = [kind(r, metrics_by_source) for r in board.rows]
    for row, cells, what in zip(board.rows, _cells(board, intervals), kinds):
        cells = _marked(row, cells, what)
        shown = [f"**{_md_cell(c)}**" if what == "ours" and c else _md_cell(c) for c in cells]
        lines.append("| " + " | ".join(shown) + " |")
    return "\n".join([*lines, "", _caption(board, intervals, kinds), ""])


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


def _latex_value(board: Board, j: int, value: Cell, interval: Interval | None, bold: bool, sd: float | None = None) -> str:
    """A value cell in LaTeX: the number (bold for our complete runs), its interval as a subscript
    (lo) and superscript (hi) pair, e.g. 97.5$_{92.5}^{100}$."""
    text = latex_escape(board.cell(board.columns[j], value))
    if not text:
        return text
    if sd is not None:
        text += f" $\\pm$ {sd:.1f}"
    if bold:
        text = r"\textbf{" + text + "}"
    if interval is not None and sd is None:
        text += f"$_{{{bound(interval[0])}}}^{{{bound(interval[1])}}}$"
    return text


def latex(
    board: Board, intervals: Mapping[tuple[int, int], Interval], metrics_by_source: Mapping[str, dict[str, Any]] | None = None
) -> str:
    """One board as a LaTeX table (booktabs rules), our complete runs in bold, a caption naming the
    published sources, the marks and the intervals' level."""
    metrics_by_source = metrics_by_source or {}
    kinds = [kind(r, metrics_by_source) for r in board.rows]
    head = [*board.label_columns, *board.columns]
    spec = "l" * len(board.label_columns) + "r" * len(board.columns)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\caption{" + latex_escape(_caption(board, intervals, kinds, latex=True)) + "}",
        r"\label{tab:" + re.sub(r"[^A-Za-z0-9:-]", "-", board.key) + "}",
        r"\begin{tabular}{" + spec + "}",
        r"\toprule",
        " & ".join(_latex_head(c) for c in head) + r" \\",
        r"\midrule",
    ]
    for i, (row, what) in enumerate(zip(board.rows, kinds)):
        bold = what == "ours"
        labels = [latex_escape(c) for c in _marked(row, list(row.labels), what)]
        labels = [r"\textbf{" + c + "}" if bold and c else c for c in labels]
        values = [_latex_value(board, j, v, intervals.get((i, j)), bold, _sd(row, j)) for j, v in enumerate(row.values)]
        lines.append(" & ".join([*labels, *values]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def table_csv(
    board: Board, intervals: Mapping[tuple[int, int], Interval], metrics_by_source: Mapping[str, dict[str, Any]] | None = None
) -> str:
    """One board as CSV: unrounded values, `ours` (yes for our complete runs; rescored, incomplete,
    repeats or no), the source, and a `<column> lo` / `<column> hi` pair for each column that has
    an interval in some row, and `ci level`."""
    metrics_by_source = metrics_by_source or {}
    with_ci = sorted({j for _, j in intervals})
    with_sd = sorted({j for r in board.rows for j in range(len(board.columns)) if _sd(r, j) is not None})
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(
        [
            *board.label_columns,
            *board.columns,
            *(f"{board.columns[j]} {e}" for j in with_ci for e in ("lo", "hi")),
            "ci level",
            *(f"{board.columns[j]} sd" for j in with_sd),
            "ours",
            "source",
        ]
    )
    for i, row in enumerate(board.rows):
        values = ["" if v is None else v if isinstance(v, str) else repr(v) for v in row.values]
        bounds = [repr(intervals[(i, j)][k]) if (i, j) in intervals else "" for j in with_ci for k in (0, 1)]
        what = kind(row, metrics_by_source)
        ours = {"ours": "yes", "published": "no"}.get(what, what)
        level = repr(row.level) if row.level is not None and any(b for b in bounds) else ""
        sds = ["" if (sd := _sd(row, j)) is None else repr(sd) for j in with_sd]
        w.writerow([*row.labels, *values, *bounds, level, *sds, ours, row.source])
    return buf.getvalue()


def render(boards: Sequence[Board], fmt: str, metrics_by_source: Mapping[str, dict[str, Any]]) -> str:
    """Every board in `fmt` (FORMATS), one after another (CSV: a blank line and the board's title
    line, `# title`, between boards)."""
    writer = {"markdown": markdown, "latex": latex, "csv": table_csv}[fmt]
    parts = []
    for board in boards:
        intervals = intervals_of(board, metrics_by_source)
        text = writer(board, intervals, metrics_by_source)
        if fmt == "markdown":
            text = f"### {board.title}\n\n{text}"
        elif fmt == "latex":
            text = f"% {board.title}\n{text}"
        elif len(boards) > 1:
            text = f"# {board.title}\n{text}"
        parts.append(text)
    return "\n".join(parts)
