"""Reading JSONL data files, one object a line, with errors that name the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from needlepoint.errors import DataError


def read_jsonl(path: Path, hint: str = "check the path") -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ("FILE line N", object) for each non-blank line; DataError on an unreadable file, a
    line that is not JSON, or a line that is not a JSON object. `hint` ends the missing-file message."""
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise DataError(f"cannot read {path} ({exc.strerror or exc}); {hint}") from None
    with fh:
        try:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{path} line {lineno}"
                try:
                    row = json.loads(line)
                except ValueError:
                    raise DataError(f"{where} is not valid JSON; fix or remove that line") from None
                if not isinstance(row, dict):
                    raise DataError(f"{where} is not a JSON object; each line must hold one object")
                yield where, row
        except UnicodeDecodeError:
            raise DataError(f"{path} is not UTF-8 text; check the file") from None
