"""Metric tables in the terminal (rich)."""

from __future__ import annotations

from collections.abc import Sequence

from needlepoint.benchmarks.base import Table, format_cell


def print_tables(tables: Sequence[Table], stderr: bool = False) -> None:
    """Print tables with rich; plain text when the output is not a terminal."""
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=160)
    for t in tables:
        rt = RichTable(title=t.title, title_justify="left")
        for c in t.columns:
            rt.add_column(c, justify="right")
        for row in t.rows:
            rt.add_row(*(format_cell(v) for v in row))
        console.print(rt)
