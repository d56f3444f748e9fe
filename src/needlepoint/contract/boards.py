"""What a leaderboard is made of, for the layouts that benchmark packages declare
(`Declaration.leaderboard`): a finished run as the leaderboard reads it (`Run`), the tables
(`Board`, `BoardRow`) and the helpers that read metrics.json cells defensively (`pct`, `at`,
`count`), and a published row as a layout may lay it out (`PublishedRow`). A layout is
`boards(runs: Sequence[Run]) -> list[Board]`; report/leaderboard.py finds the runs, adds published
rows and writes the outputs. These are contracts between a benchmark package and the report, so
they sit beside `Table` in the benchmarks' contract layer (a benchmark imports nothing from report/).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlepoint.core.numeric import is_finite
from needlepoint.core.text import writable
from needlepoint.families import FAMILIES, Family

__all__ = [
    "CORRUPT",
    "Board",
    "BoardRow",
    "Cell",
    "Corrupt",
    "PublishedRow",
    "Run",
    "answer_label",
    "family_of",
    "at",
    "bound",
    "ci_level",
    "count",
    "interval",
    "level_text",
    "obj",
    "pct",
    "progress_mark",
]


@dataclass(frozen=True)
class PublishedRow:
    """One published CSV row: cells by leaderboard column name (a CSV column of no leaderboard
    meaning keeps its own name), as written in the CSV; where it comes from."""

    benchmark: str
    cells: dict[str, str]
    source: str


@dataclass
class Run:
    """A finished run folder: its header (run.json) and metrics (metrics.json)."""

    dir: Path
    header: dict[str, Any]
    metrics: dict[str, Any]

    @property
    def config(self) -> dict[str, Any]:
        """The `config` block of run.json (what the user asked for); empty when absent."""
        return obj(self.header.get("config"))

    @property
    def identity(self) -> dict[str, Any]:
        """The `identity` block of run.json (what must match to resume); empty when absent."""
        return obj(self.header.get("identity"))

    @property
    def options(self) -> dict[str, Any]:
        """The benchmark options given on the command line."""
        return obj(self.config.get("options"))

    @property
    def benchmark(self) -> str:
        """The benchmark's registry name, e.g. "mc_bench"."""
        return str(self.config.get("benchmark") or self.identity.get("benchmark") or "")

    @property
    def model(self) -> str:
        """The model name as a leaderboard shows it: the solver's label of the run (e.g.
        `gpt-4o + grounding-dino-base (agentic)`), else the model as the run was asked for it
        ("?" when the header has none); " + schema" when the answers were constrained by the answer's
        JSON schema (`--structured-output`, a protocol of its own, never one row with free-form runs)."""
        name = str(self.header.get("model_label") or self.config.get("model") or self.identity.get("model") or "?")
        return name + " + schema" if self.identity.get("structured_output") else name

    @property
    def label(self) -> str:
        """The model as a leaderboard row names it, marked when the run is incomplete."""
        mark = progress_mark(self)
        return f"{self.model} (incomplete: {mark})" if mark else self.model

    def option(self, name: str) -> Any:
        """A benchmark option as the run used it (identity first: it holds the defaults too)."""
        ident = self.identity
        if f"option.{name}" in ident:
            return ident[f"option.{name}"]
        return self.options.get(name)


def answer_label(setting: str, run: Run, groups: bool = False) -> str:
    """A row's setting label with the run's model family (its own protocol: "direct, InternVL
    syntax"; with `groups`, a family that cannot number groups says so) or else its answer format when it is not
    JSON ("sequence, grounding-tokens"): runs that differ only in them must not share a label, and a
    family's run is never shown as the authors' protocol."""
    fam = family_of(run)
    if fam is not None:
        tag = _detector_label(fam.title, run) if fam.detector else fam.label
        tag = tag if fam.groups or not groups else f"{tag}, groups as 1"
    else:
        answer_format = run.option("answer_format")
        if not answer_format or answer_format == "json":
            return setting
        tag = str(answer_format)
    return f"{setting}, {tag}" if setting else tag


def _detector_label(name: str, run: Run) -> str:
    """A detector family's run as a row names it: "Grounding DINO, threshold 0.25" (or its top box)."""
    settings = run.identity.get("model_settings")
    threshold = settings.get("threshold") if isinstance(settings, dict) else None
    return f"{name}, threshold {threshold:g}" if isinstance(threshold, float) else f"{name}, top box"


def family_of(run: Run) -> Family | None:
    """The model family a run named (--model-family), None when none (or one this version lacks)."""
    name = run.option("model_family")
    return FAMILIES.get(name) if isinstance(name, str) else None


def progress_mark(run: Run) -> str:
    """ "" for a run whose every sample was answered; else e.g. "18 answered, 2 failed of 20"
    (from metrics.json's `run` block: failed requests are counted apart from answers)."""
    block = obj(run.metrics.get("run"))
    total, answered, failed = (count(block.get(k)) for k in ("samples", "answered", "failed"))
    if isinstance(total, Corrupt) or isinstance(answered, Corrupt) or isinstance(failed, Corrupt):
        return "its run block is corrupt"
    if total is None or answered is None or failed is None:
        return ""
    if failed == 0 and answered >= total:
        return ""
    return f"{answered} answered, {failed} failed of {total}"


class Corrupt(float):
    """The marker of a metrics.json cell that holds something other than a finite number (NaN,
    Infinity, a string, a boolean): shown as "corrupt" in every output, never as a number. A float
    (minus infinity) so that a layout's sort key takes it and ranks its row last."""

    def __repr__(self) -> str:
        return "corrupt"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return "corrupt"

    def __neg__(self) -> float:  # sort keys negate rates: the row still ranks last
        return float("inf")


CORRUPT = Corrupt("-inf")


def obj(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (run files are read, not trusted)."""
    return value if isinstance(value, dict) else {}


Cell = float | int | str | None  # a string: a published cell, shown as written


@dataclass
class BoardRow:
    """One leaderboard line: labels (model, setting, ...), value cells, where it comes from."""

    labels: list[str]
    values: Sequence[Cell]
    source: str
    published: bool = False
    # per value: its interval (lo, hi) in % from metrics.json's `intervals` block, attached by the
    # metric's name (never by matching values), None for none; shown "value [lo, hi]"
    intervals: Sequence[tuple[float, float] | None] = ()
    level: float | None = None  # the level of those intervals, as the run stored it (e.g. 0.95)
    sds: Sequence[float | None] = ()  # a row of means over repeats: each value's standard deviation over them, "± sd"

    def __post_init__(self) -> None:
        """Labels and source come from run files and folder names: made writable (text.py)."""
        self.labels = [writable(str(label)) for label in self.labels]
        self.source = writable(self.source)


@dataclass
class Board:
    """One leaderboard table. Values are percentages (100 x metric) except the `counts` columns."""

    key: str
    title: str
    label_columns: list[str]
    columns: list[str]
    rows: list[BoardRow] = field(default_factory=list)
    counts: frozenset[str] = frozenset()
    note: str = ""
    # How `--with-published` lays the benchmark's published rows out on this board (None: as
    # they are, cell for cell by column name), e.g. MM-NIAH's per-task rows merged into one.
    lay_published: Callable[[Sequence[PublishedRow]], list[PublishedRow]] | None = None
    headline: str | None = None  # the column rows are ranked by, published rows too (report/formats.py)

    @property
    def header(self) -> list[str]:
        """All column names: labels, values, then the source column."""
        return [*self.label_columns, *self.columns, "source"]

    def cell(self, column: str, value: Cell) -> str:
        """A value as shown to people: one decimal for rates, integers for counts, empty for none,
        "corrupt" for a stored value that is no number, a published cell as written."""
        if value is None:
            return ""
        if isinstance(value, Corrupt):
            return "corrupt"
        if isinstance(value, str):
            return value
        if column in self.counts:
            return str(int(value))
        return f"{value:.1f}"

    def display_rows(self) -> list[list[str]]:
        """Every row as the strings people see (see `cell`), source last."""
        return [[*r.labels, *(self.shown(r, i) for i in range(len(r.values))), r.source] for r in self.rows]

    def interval_of(self, row: BoardRow, i: int) -> tuple[float, float] | None:
        """The interval of value `i` of `row`, None where it has none (or its cell no number)."""
        found = row.intervals[i] if i < len(row.intervals) else None
        value = row.values[i] if i < len(row.values) else None
        if found is None or value is None or isinstance(value, (str, Corrupt)) or self.columns[i] in self.counts:
            return None
        return found

    def shown(self, row: BoardRow, i: int) -> str:
        """A value cell with its interval as "value [lo, hi]" where the run has one."""
        text = self.cell(self.columns[i], row.values[i])
        sd = row.sds[i] if i < len(row.sds) else None
        if sd is not None and text and text != "corrupt":
            return f"{text} ± {sd:.1f}"
        found = self.interval_of(row, i)
        return f"{text} [{bound(found[0])}, {bound(found[1])}]" if found is not None and text else text

    @property
    def interval_note(self) -> str:
        """One sentence on the intervals the board shows, at the level the runs stored ("" for none)."""
        levels = sorted({r.level for r in self.rows if r.level is not None and any(r.intervals)})
        if not levels or not any(self.interval_of(r, i) for r in self.rows for i in range(len(r.values))):
            return ""
        return f"[lo, hi]: the run's {level_text(levels)} interval over samples, as stored in its metrics.json."


def bound(value: float) -> str:
    """An interval's bound as a cell shows it: one decimal, 0 and 100 as such ("[92.5, 100]")."""
    text = f"{value:.1f}"
    return text[:-2] if text in ("100.0", "0.0", "-0.0") else text


def level_text(levels: Sequence[float]) -> str:
    """Levels as people read them: "95%", or "90% / 95%" where runs differ."""
    return " / ".join(f"{100 * level:g}%" for level in levels)


def ci_level(metrics: dict[str, Any]) -> float | None:
    """The level of a run's intervals (metrics.json's `intervals.level`), None without a block."""
    block = obj(metrics.get("intervals"))
    level: Any = block.get("level")
    return float(level) if is_finite(level) and 0 < float(level) < 1 else None


def interval(metrics: dict[str, Any], name: str) -> tuple[float, float] | None:
    """Metric `name`'s interval (lo, hi) in % from metrics.json's `intervals` block, None without one."""
    cell = obj(obj(obj(metrics.get("intervals")).get("metrics")).get(name))
    lo: Any = cell.get("lo")
    hi: Any = cell.get("hi")
    if not is_finite(lo) or not is_finite(hi):
        return None
    return 100 * float(lo), 100 * float(hi)


def pct(value: Any) -> float | None:
    """100 x a stored rate; None (absent) and containers (a cell of the wrong shape) stay None; a
    value that is no finite number (NaN, a string, a boolean) is CORRUPT."""
    if value is None or isinstance(value, (dict, list)):
        return None
    if not is_finite(value) or not is_finite(100 * float(value)):  # 1e308 is no rate either
        return CORRUPT
    return 100 * float(value)


def at(d: Any, *keys: Any) -> Any:
    """The value under `keys` (dict keys, list indices) in `d`, or None where any step is missing."""
    for k in keys:
        if isinstance(d, dict):
            d = d.get(k)
        elif isinstance(d, list) and isinstance(k, int) and -len(d) <= k < len(d):
            d = d[k]
        else:
            return None
    return d


def count(value: Any) -> int | None:
    """A stored count as an int; None stays None; a value that is no finite number is CORRUPT."""
    if value is None or isinstance(value, (dict, list)):
        return None
    if not is_finite(value):
        return CORRUPT  # type: ignore[return-value]  # a float marker, shown as "corrupt"
    return int(value)
