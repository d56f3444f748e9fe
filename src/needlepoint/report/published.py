"""The papers' published rows, for `needlepoint report --with-published`.

Each benchmark declares its published tables (`Declaration.published`: a PublishedTable per CSV
file); the built-in benchmarks' CSVs ship inside the package (`report/published_data/`: the
transcribed tables, their README naming each source; tests/data/published.sha256 pins their bytes)
and are read from there at run time. Every cell stays the string the CSV holds, so a leaderboard shows it exactly as
published; an empty cell is a number the source does not give. Where the paper and a later
leaderboard of the same authors disagree (MM-NIAH), both are kept, each row labelled with its source.
"""

from __future__ import annotations

import csv
import io
from importlib.resources import files

from needlepoint.contract.boards import PublishedRow
from needlepoint.contract.declaration import PublishedTable

__all__ = ["PublishedRow", "PublishedTable", "published_notes", "published_rows", "published_tables", "read_table"]


def read_table(table: PublishedTable) -> list[dict[str, str]]:
    """The shipped CSV's rows as written (column -> cell string), read from the installed package."""
    resource = files(table.package)
    for part in table.file.split("/"):
        resource = resource / part
    text = resource.read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def published_tables() -> list[tuple[str, PublishedTable]]:
    """(benchmark, table) of every published table the registered benchmarks declare."""
    from needlepoint.contract.registry import declarations

    return [(d.name, table) for d in declarations() for table in d.published]


def published_rows(benchmark: str) -> list[PublishedRow]:
    """Every published row of one benchmark, file by file in the order it declares them, each
    file's rows in its order."""
    from needlepoint.contract.registry import declaration

    return [
        PublishedRow(benchmark, {table.columns.get(k, k): v for k, v in row.items()}, table.source)
        for table in declaration(benchmark).published
        for row in read_table(table)
    ]


def published_notes(benchmark: str) -> list[str]:
    """What a reader of one benchmark's published rows must know (the sources' caveats)."""
    from needlepoint.contract.registry import declaration

    return [t.note for t in declaration(benchmark).published if t.note]
