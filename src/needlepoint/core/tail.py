"""Following a growing JSON-lines file: the whole lines appended since the last read, each with its
record, for a parent that copies its workers' records and for the report's drafting processes."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from needlepoint.core.jsonl import read_back
from needlepoint.core.records import Record

__all__ = ["Tail"]


class Tail:
    """The whole lines appended to a file since `start`, each with its record ({} when the line is
    no record: it is copied all the same, and the scorer, which reads strictly, names it)."""

    def __init__(self, path: Path, start: int = 0) -> None:
        self.path = path
        self.offset = start  # what has been copied: `read` does not move it, `done` does
        self._read_to = start

    def read(self) -> list[tuple[bytes, Record]]:
        """The whole lines after the last `done`."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        whole = data[: data.rfind(b"\n") + 1]
        self._read_to = self.offset + len(whole)
        lines = whole.split(b"\n")[:-1]
        out: list[tuple[bytes, Record]] = []
        for line in lines:
            try:
                rec = read_back(line)  # a long document's record: orjson's quarter of the time
            except (ValueError, RecursionError):
                rec = None
            out.append((line, cast(Record, rec if isinstance(rec, dict) and "id" in rec else {})))
        return out

    def done(self) -> None:
        """What the last `read` gave is copied."""
        self.offset = self._read_to
