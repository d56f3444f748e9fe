"""The authors' prediction files read as a run: the contract of the optional verb
`predictions_run(predictions, data) -> PredictionsRun` (`contract.base.ReadsPredictions`).

One reading serves both uses of such a file: `needlepoint score` scores it with the benchmark's
ordinary `score` and `resampler` (run/evaluate.py), and `needlepoint score --out` writes it as a
run folder (run/predictions_run.py), so the two cannot give different numbers.

("Published" names only the papers' tables, report/published.py; these are "predictions".)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from needlepoint.contract.base import Dataset
from needlepoint.core.records import Record

__all__ = ["PredictionsRun"]


@dataclass
class PredictionsRun:
    """What a benchmark reads from a prediction file.

    `model`: the model the file names (None when the format names none); `records`: one per
    sample, ids as a model run's, failed requests included where the format records them (they
    count as the authors' scorer counts them); `dataset`: the samples the records answer, as far
    as the file and the release tell (what `score` and `resampler` read of a sample); `files`:
    file name -> content written into a run folder (the predictions in the benchmark's format,
    where `predictions_run` of that folder reads them again); `options`: the benchmark options the
    file implies (e.g. Ref-Adv-s's prompt mode); `samples`: how many samples the dataset has, when
    the file or the data tells (else the records' count). `by_model`: a file of several models'
    predictions (a folder of MM-NIAH response files) as one PredictionsRun per model, and nothing
    else; `needlepoint score` scores each, and a run folder holds one model's."""

    model: str | None
    records: list[Record]
    dataset: Dataset[Any] = field(default_factory=lambda: Dataset([]))
    files: dict[str, str | bytes] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    samples: int | None = None
    by_model: dict[str, PredictionsRun] = field(default_factory=dict)
