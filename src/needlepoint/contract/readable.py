"""A benchmark reading stored records (scoring, exporting, showing them), where a record a person
edited or another program wrote holds a value of a type the benchmark cannot read: one sentence
naming the records file and the sample, not a traceback. The one rule of every reader of stored
records: the run's end (a resume), a merge, a comparison."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from needlepoint.contract.base import Dataset
from needlepoint.core.errors import DataError
from needlepoint.core.records import Record

__all__ = ["READ_ERRORS", "read_or_name"]

T = TypeVar("T")

# what a benchmark raises on a record whose field has a wrong type (an int where a reply is text, ...)
READ_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError)


def read_or_name(
    fn: Callable[[Dataset[Any], list[Record]], T],
    dataset: Dataset[Any],
    records: Sequence[Record],
    source: Path,
    benchmark: str,
    what: str,
    probe: Callable[[Dataset[Any], list[Record]], Any] | None = None,
) -> T:
    """`fn(dataset, records)`; where it raises one of READ_ERRORS, DataError naming `source` (the
    records file) and the first sample whose record alone makes `fn` fail (`what` it could not do:
    "score", "show", ...). `probe` tries the records one at a time instead of `fn` (a `fn` that
    writes files, the authors' formats, probes into a scratch folder: tried in the run folder,
    each probe rewrote them with one record)."""
    try:
        return fn(dataset, list(records))
    except READ_ERRORS as e:
        ids = [str(r.get("id")) for r in records]
        one = probe or fn
        bad = next((i for i, r in zip(ids, records) if _fails(one, dataset.subset([i]), [r])), None)
        which = f"the record of sample {bad!r}" if bad is not None else "a record"
        raise DataError(
            f"{source}: {which} holds a value {benchmark} cannot {what} ({type(e).__name__}: {e}); "
            "fix or delete that line and rerun that sample"
        ) from None


def _fails(fn: Callable[[Dataset[Any], list[Record]], Any], dataset: Dataset[Any], records: list[Record]) -> bool:
    try:
        fn(dataset, records)
    except READ_ERRORS:
        return True
    except DataError:
        return False
    return False
