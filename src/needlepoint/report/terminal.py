"""Metric tables in the terminal (rich), laid out to fit the terminal's width (80 columns too)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from needlepoint.contract.base import Table, format_cell
from needlepoint.core.numeric import is_number

__all__ = ["fitted", "natural_width", "print_tables", "render_tables", "rich_table"]

PIPE_WIDTH = 160  # the width when the output is not a terminal (a file, a pipe)


def _header(name: str, width: int = 0) -> str:
    """A column name made to break between its parts: "AP50^ref" over two lines ("AP50^" / "ref")
    rather than cut to "AP50^…"; with `width`, its words also wrapped to it."""
    import textwrap

    lines = name.replace("^", "^\n").split("\n")
    if width:
        lines = [wrapped for line in lines for wrapped in (textwrap.wrap(line, width, break_long_words=False) or [""])]
    return "\n".join(lines)


def natural_width(table: Table) -> int:
    """The width of `table` with every column name and cell on one line (one space between columns)."""
    widths = [
        max([len(name)] + [len(format_cell(row[i])) for row in table.rows if i < len(row)])
        for i, name in enumerate(table.columns)
    ]
    return sum(widths) + len(widths) - 1


def _numeric(table: Table, column: int) -> bool:
    """Whether a column holds numbers (or none at all: "–"), right-aligned and never broken."""
    cells = [row[column] for row in table.rows if column < len(row)]
    return bool(cells) and all(is_number(v) or v is None for v in cells)


def _least_width(table: Table, column: int, numeric: bool) -> int:
    """The narrowest a column can be without cutting: a number column is as wide as its widest
    cell (its name wraps between words); a text column as its longest word (it wraps between words)."""
    texts = _header(table.columns[column]).split("\n")
    cells = [format_cell(row[column]) for row in table.rows if column < len(row)]
    words = [len(word) for text in texts + ([] if numeric else cells) for word in (text.split() or [""])]
    return max(words + ([len(c) for c in cells] if numeric else []))


def fitted(table: Table, width: int) -> list[Table]:
    """`table` as one or more tables no wider than `width` columns: when its number columns do not
    fit beside its leading text columns (the row labels), they are split over several tables that
    each repeat the labels, titled "(continued)"."""
    n = len(table.columns)
    numeric = [_numeric(table, i) for i in range(n)]
    keys = 0
    while keys < n - 1 and not numeric[keys]:
        keys += 1
    keys = max(keys, 1)
    least = [_least_width(table, i, numeric[i]) + 1 for i in range(n)]  # +1: the space between columns
    if sum(least) + 1 <= width or keys >= n:
        return [table]
    room = width - 1 - sum(least[:keys])
    parts: list[list[int]] = [[]]
    used = 0
    for i in range(keys, n):
        if parts[-1] and used + least[i] > room:
            parts.append([])
            used = 0
        parts[-1].append(i)
        used += least[i]
    if len(parts) == 1:
        return [table]
    out = []
    for k, cols in enumerate(parts):
        picked = [*range(keys), *cols]
        title = table.title if k == 0 else f"{table.title} (continued)"
        rows = [[row[i] if i < len(row) else None for i in picked] for row in table.rows]
        out.append(Table(title, [table.columns[i] for i in picked], rows))
    return out


def rich_table(table: Table, width: int = PIPE_WIDTH) -> Any:
    """A Table as a rich table: light borders, one space between columns, numbers right-aligned
    and never broken. When it is wider than `width`, column names break (at "^", between words)
    and a text cell wraps (folds as a last resort); nothing is cut."""
    from rich import box
    from rich.table import Table as RichTable

    narrow = natural_width(table) > width
    rt = RichTable(title=table.title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 0), show_edge=False)
    for i, name in enumerate(table.columns):
        if _numeric(table, i):
            least = _least_width(table, i, True) if narrow else 0
            rt.add_column(_header(name, least) if narrow else name, justify="right", no_wrap=True, min_width=least or None)
        else:
            rt.add_column(_header(name) if narrow else name, justify="left", overflow="fold")
    for row in table.rows:
        rt.add_row(*(format_cell(v) for v in row))
    return rt


def render_tables(tables: Sequence[Table], width: int) -> str:
    """The tables as the terminal shows them at `width` columns (plain text, for tests and pipes)."""
    from rich.console import Console

    console = Console(width=width, record=True, color_system=None, force_terminal=False, file=io.StringIO())
    for t in tables:
        for part in fitted(t, width):
            console.print(rich_table(part, width))
            console.print()
    return console.export_text()


def print_tables(tables: Sequence[Table], stderr: bool = False) -> None:
    """Print tables with rich at the terminal's width; PIPE_WIDTH columns when the output is not a terminal."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=PIPE_WIDTH)
    for t in tables:
        for part in fitted(t, console.width):
            console.print(rich_table(part, console.width))
            console.print()
