"""What a benchmark reads from saved predictions for a run folder (`needlepoint score --out`,
predictions_run.py): the contract of the optional verb `published_run(predictions, data)`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from needlepoint.core.records import Record

__all__ = ["PublishedRun"]


@dataclass
class PublishedRun:
    """What a benchmark reads from a predictions file for a run folder.

    `model`: the model the file names (None when the format names none); `records`: one per
    sample, ids as a model run's; `files`: file name -> content written into the run folder (the
    predictions in the benchmark's format, where `score` of a run folder reads them); `options`: the
    benchmark options the file implies (e.g. Ref-Adv-s's prompt mode); `samples`: how many samples
    the dataset has, when the file or the data tells (else the records' count)."""

    model: str | None
    records: list[Record]
    files: dict[str, str | bytes] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    samples: int | None = None
