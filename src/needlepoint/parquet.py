"""Reading Hugging Face parquet releases without holding their images in memory.

Metadata columns are read at load time; an image's bytes are read when its request is built, one
row group at a time with a small cache, so memory is bounded by a few row groups, not by the data
set. The next row group is read ahead in a background thread, so a run walking through the file
in order rarely waits for a read.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from needlepoint.errors import DataError


def parquet_files(folder: Path) -> list[Path]:
    """The parquet files of a release folder, in name order (HF shards sort in row order)."""
    return sorted(p for p in folder.rglob("*.parquet") if p.is_file())


class ParquetTable:
    """One parquet file: its metadata rows, and lazy access to one binary-image column."""

    def __init__(self, path: Path, image_column: str = "image", cached_groups: int = 3) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self.image_column = image_column
        try:
            self._file = pq.ParquetFile(path)
        except Exception as exc:
            raise DataError(f"{path} is not a readable parquet file ({exc}); re-download the release") from None
        self.columns = list(self._file.schema_arrow.names)
        meta = self._file.metadata
        self._starts: list[int] = []
        start = 0
        for g in range(meta.num_row_groups):
            self._starts.append(start)
            start += meta.row_group(g).num_rows
        self.num_rows = start
        self._groups: OrderedDict[int, Future[Any]] = OrderedDict()
        self._cached_groups = cached_groups
        self._lock = threading.Lock()
        self._reader: ThreadPoolExecutor | None = None

    def rows(self, columns: list[str]) -> list[dict[str, Any]]:
        """The given columns (those present) as Python dicts, one per row."""
        present = [c for c in columns if c in self.columns]
        try:
            return self._file.read(columns=present).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for damaged files
            raise DataError(f"{self.path} cannot be read ({exc}); re-download the release") from None

    def _read_group(self, group: int) -> Any:
        try:
            return self._file.read_row_group(group, columns=[self.image_column]).column(0)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for damaged files
            raise DataError(f"row group {group} of {self.path} cannot be read ({exc}); re-download the release") from None

    def _group(self, group: int) -> Future[Any]:
        """The (pending or done) read of a row group's image column; call with the lock held."""
        future = self._groups.get(group)
        if future is None:
            if self._reader is None:
                self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet-read")
            future = self._reader.submit(self._read_group, group)
            self._groups[group] = future
            while len(self._groups) > self._cached_groups:
                self._groups.popitem(last=False)
        else:
            self._groups.move_to_end(group)
        return future

    def image_bytes(self, row: int) -> bytes:
        """The encoded image bytes stored in `row` (a struct with `bytes`, or plain binary)."""
        import bisect

        group = bisect.bisect_right(self._starts, row) - 1
        with self._lock:
            future = self._group(group)
            if group + 1 < len(self._starts):
                self._group(group + 1)
        column = future.result()
        value = column[row - self._starts[group]].as_py()
        if isinstance(value, dict):
            value = value.get("bytes")
        if not value:
            raise DataError(f"row {row} of {self.path} has no image bytes in column {self.image_column!r}")
        return value
