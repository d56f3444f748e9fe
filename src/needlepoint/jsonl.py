"""Reading JSONL data files, one object a line, with errors that name the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from needlepoint.errors import DataError


def read_jsonl_offsets(path: Path, hint: str = "check the path") -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Yield ("FILE line N", byte offset, object) for each non-blank line; DataError on an unreadable
    file, a line that is not JSON, or a line that is not a JSON object. `hint` ends the
    missing-file message. The offset lets a caller re-read one line later (`read_line_at`)."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise DataError(f"cannot read {path} ({exc.strerror or exc}); {hint}") from None
    with fh:
        offset = 0
        for lineno, line in enumerate(fh, 1):
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            where = f"{path} line {lineno}"
            try:
                row = json.loads(line)
            except UnicodeDecodeError:
                raise DataError(f"{where} is not UTF-8 text; check the file") from None
            except ValueError:
                raise DataError(f"{where} is not valid JSON; fix or remove that line") from None
            if not isinstance(row, dict):
                raise DataError(f"{where} is not a JSON object; each line must hold one object")
            yield where, start, row


def read_jsonl(path: Path, hint: str = "check the path") -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ("FILE line N", object) for each non-blank line (see read_jsonl_offsets)."""
    for where, _, row in read_jsonl_offsets(path, hint):
        yield where, row


def read_line_at(path: Path, offset: int) -> dict[str, Any]:
    """The JSON object on the line that starts at `offset` (found by read_jsonl_offsets)."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            row: dict[str, Any] = json.loads(fh.readline())
            return row
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} changed or became unreadable during the run ({exc}); rerun to resume") from None


def read_json(path: Path, hint: str) -> Any:
    """The JSON value in a file; DataError naming the file, the fault, and `hint` (what to give)."""
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise DataError(f"{path} does not exist; {hint}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path} could not be read as JSON ({exc}); {hint}") from None
