"""The papers' published rows, for `needlepoint report --with-published`.

The published tables ship inside the package (`report/published_data/`: the CSV files of
`../shared/data/published/` byte for byte, with their README naming each source) and are read from
there at run time. Every cell stays the string the CSV holds, so a leaderboard shows it exactly as
published; an empty cell is a number the source does not give. Where the paper and a later
leaderboard of the same authors disagree (MM-NIAH), both are kept, each row labelled with its source.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from importlib.resources import files

from needlepoint.benchmarks.mm_niah.aggregate import CONTEXT_EDGES

__all__ = ["PUBLISHED_TABLES", "PublishedRow", "PublishedTable", "published_notes", "published_rows", "read_table"]

DATA_DIR = "published_data"

# The MM-NIAH files spell the context ranges "1K".."64K"; the leaderboard's columns are "1k".."64k".
_NIAH_COLUMNS = {f"{edge // 1000}K": f"{edge // 1000}k" for edge in CONTEXT_EDGES}


@dataclass(frozen=True)
class PublishedTable:
    """One shipped CSV: its benchmark, the source it transcribes, the leaderboard's name for each
    of its columns that the leaderboard spells differently (CSV name -> leaderboard name; the others
    keep their names, and a name the leaderboard lacks becomes a column), a caveat for readers."""

    file: str
    benchmark: str
    source: str
    columns: dict[str, str]
    note: str = ""


PUBLISHED_TABLES: tuple[PublishedTable, ...] = (
    PublishedTable(
        "ref-adv-s_results.csv",
        "ref_adv_s",
        "Ref-Adv authors' results table (paper Table 6)",
        {"acc_0.5": "Acc@0.5", "acc_0.75": "Acc@0.75", "acc_0.9": "Acc@0.9",
         "bin_2-3": "2-3", "bin_4-6": "4-6", "bin_7+": ">=7"},
        "The published cot column is the authors' mark, not our --prompt-mode: their Thinking and Qwen3.5 rows "
        "are marked CoT but ran with the direct prompt and the model's own thinking. Human experts: Acc@0.5 "
        "only, on a random subset.",
    ),
    PublishedTable(
        "mc-bench_table2.csv",
        "mc_bench",
        "MC-Bench paper, Table 2",
        {"method": "model", "acc_ref": "Acc^ref", "acc_com": "Acc^com", "acc_rea": "Acc^rea", "acc": "Acc",
         "ap50_ref": "AP50^ref", "ap50_com": "AP50^com", "ap50_rea": "AP50^rea", "ap50": "AP50"},
    ),
    PublishedTable("mm-niah_paper.csv", "mm_niah", "MM-NIAH paper, Tables 2 and 6-11 (test split)", _NIAH_COLUMNS),
    PublishedTable(
        "mm-niah_leaderboard.csv",
        "mm_niah",
        "MM-NIAH project-page leaderboard (2024-08-16)",
        _NIAH_COLUMNS,
        "The MM-NIAH paper's test numbers and the later project-page leaderboard's differ (the page records a "
        "precision fix after the paper); both are shown, each row names its source.",
    ),
)  # fmt: skip


@dataclass(frozen=True)
class PublishedRow:
    """One published CSV row: cells by leaderboard column name (a CSV column of no leaderboard
    meaning keeps its own name), as written in the CSV; where it comes from."""

    benchmark: str
    cells: dict[str, str]
    source: str


def read_table(table: PublishedTable) -> list[dict[str, str]]:
    """The shipped CSV's rows as written (column -> cell string), read from the installed package."""
    text = (files("needlepoint.report") / DATA_DIR / table.file).read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def published_rows(benchmark: str) -> list[PublishedRow]:
    """Every published row of one benchmark, file by file in the order of PUBLISHED_TABLES, each
    file's rows in its order."""
    return [
        PublishedRow(benchmark, {table.columns.get(k, k): v for k, v in row.items()}, table.source)
        for table in PUBLISHED_TABLES
        if table.benchmark == benchmark
        for row in read_table(table)
    ]


def published_notes(benchmark: str) -> list[str]:
    """What a reader of one benchmark's published rows must know (the sources' caveats)."""
    return [t.note for t in PUBLISHED_TABLES if t.benchmark == benchmark and t.note]
