"""What a benchmark is to the runner: a few verbs over its own samples.

The runner knows nothing else about a benchmark, and a benchmark knows nothing about HTTP,
concurrency or the files of a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from needlepoint.conversation import Conversation, Generation
from needlepoint.errors import DataError

__all__ = ["Benchmark", "DataError", "Parsed", "SampleLike", "Table"]


class SampleLike(Protocol):
    """A benchmark's own sample type; the runner only needs its id."""

    id: str


@dataclass
class Parsed:
    """A parsed answer (JSON-ready) or the parse error that stands in for it."""

    answer: Any = None
    error: str | None = None


@dataclass
class Table:
    """A metrics table for the terminal and reports: a title, column names, rows of cells."""

    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)


class Benchmark(Protocol):
    """The verbs every benchmark offers. See DESIGN.md, 'The flow'."""

    name: str

    def identity(self) -> dict[str, Any]:
        """The options that change answers or scores; part of the run's identity."""
        ...

    def load(self, data: Path, limit: int | None = None) -> Sequence[SampleLike]:
        """Read a folder or file in the release layout; raise DataError on bad input."""
        ...

    def generation(self, sample: Any, base: Generation) -> Generation:
        """Generation settings for this sample (benchmarks with per-task defaults adjust them)."""
        ...

    def prompt(self, sample: Any) -> Conversation:
        """The first request for a sample."""
        ...

    def parse(self, sample: Any, text: str) -> Parsed:
        """A reply's text into an answer, or a parse error."""
        ...

    def followup(self, sample: Any, parsed: Parsed, finish_reason: str | None) -> str | None:
        """The repair text to send after a failed parse, or None for no second turn."""
        ...

    def judge(self, sample: Any, parsed: Parsed) -> dict[str, Any]:
        """Per-sample score fields stored in the record (e.g. IoU)."""
        ...

    def score(self, samples: Sequence[Any], records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """All answers into metrics (JSON-ready)."""
        ...

    def tables(self, metrics: dict[str, Any]) -> list[Table]:
        """The metrics laid out for people."""
        ...

    def running(self, records: Sequence[dict[str, Any]]) -> str:
        """A short running figure for the progress bar."""
        ...

    def export(
        self, run_dir: Path, samples: Sequence[Any], records: Sequence[dict[str, Any]], model: str, metrics: dict[str, Any]
    ) -> list[Path]:
        """Write the authors' formats into the run folder; return the paths written."""
        ...
