"""Reading Hugging Face parquet releases without holding their images in memory.

Metadata columns are read at load time. Images are read when their requests are built, a slice of
32 rows at a time, by one background thread that walks the image column forward, decompressing
its pages as a stream (`parquetpages`; pyarrow's batch iterator for what that does not read):
memory holds a few slices and about a megabyte of the file, never a whole page or row group,
whatever size the release's row groups and pages are (the Hugging Face writers make row groups
of about 1,100 rows and 100 MB of images, and put the first 1,024 images of each into one
dictionary page, which pyarrow would hold whole, twice). The next slice is read ahead, so a run walking
through the file in order rarely waits, and `ParquetImage.cached` hands over bytes already read
without a thread hop. A forked process (the report's drafts, `--processes` workers) reads with
a reader and a file handle of its own: the parent's reader thread is not in it, and the parent's
handle shares its offset.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from needlepoint.core.errors import DataError
from needlepoint.core.parquetpages import column_values

SLICE_ROWS = 32
CACHED_SLICES = 6


def parquet_files(folder: Path) -> list[Path]:
    """The parquet files of a release folder, in name order (HF shards sort in row order)."""
    return sorted(p for p in folder.rglob("*.parquet") if p.is_file())


def _image_leaf(file: Any, image_column: str) -> tuple[int, int] | None:
    """(leaf column index, max definition level) of the image bytes (`image.bytes` of the datasets
    Image struct, or a plain binary `image`), or None when the column is something else."""
    schema = file.metadata.schema
    for i in range(len(schema)):
        column = schema.column(i)
        if column.path in (f"{image_column}.bytes", image_column) and column.max_repetition_level == 0:
            return i, column.max_definition_level
    return None


class ParquetTable:
    """One parquet file: its metadata rows, and lazy access to one binary-image column."""

    def __init__(
        self, path: Path, image_column: str = "image", slice_rows: int = SLICE_ROWS, cached_slices: int = CACHED_SLICES
    ) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self.image_column = image_column
        try:
            # A buffered stream: pyarrow reads pages as it needs them, not whole column chunks.
            self._file = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
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
        self._slice_rows = slice_rows
        self._slices: OrderedDict[tuple[int, int], Future[list[bytes | None]]] = OrderedDict()
        self._cached_slices = cached_slices
        self._lock = threading.Lock()
        self._reader: ThreadPoolExecutor | None = None
        self._cursor: tuple[int, int, Iterator[list[bytes | None]]] | None = (
            None  # (group, next slice, slices): reader thread only
        )
        self._fh: IO[bytes] | None = None  # the file, for the streaming reader (reader thread only)
        self._leaf = _image_leaf(self._file, image_column)
        _TABLES.add(self)

    def check_image_column(self, advice: str) -> None:
        """DataError (ending in `advice`) unless the image column holds bytes: binary, or the
        datasets Image struct's `bytes`."""
        import pyarrow as pa

        field = self._file.schema_arrow.field(self.image_column)
        kind = field.type
        inner = kind.field("bytes").type if pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0 else kind
        if not (pa.types.is_binary(inner) or pa.types.is_large_binary(inner)):
            raise DataError(f"column {self.image_column!r} of {self.path} holds {kind}, not image bytes; {advice}")

    def _forked(self) -> None:
        """In a forked child: forget the parent's reader, its reads and its file handle."""
        self._lock = threading.Lock()
        self._reader = None
        self._slices = OrderedDict()
        self._cursor = None
        self._fh = None  # closed in this process only (its offset is shared with the parent's)

    def rows(self, columns: list[str]) -> list[dict[str, Any]]:
        """The given columns (those present) as Python dicts, one per row."""
        present = [c for c in columns if c in self.columns]
        try:
            rows: list[dict[str, Any]] = self._file.read(columns=present).to_pylist()
            return rows
        except Exception as exc:  # pyarrow raises many types for damaged files
            raise DataError(f"{self.path} cannot be read ({exc}); re-download the release") from None

    def _where(self, row: int) -> tuple[int, int, int]:
        """(row group, slice in the group, position in the slice) of a row."""
        import bisect

        group = bisect.bisect_right(self._starts, row) - 1
        local = row - self._starts[group]
        return group, local // self._slice_rows, local % self._slice_rows

    def _read_slice(self, group: int, index: int) -> list[bytes | None]:
        """The image bytes of one slice; runs on the reader thread, which alone owns the cursor."""
        try:
            if self._cursor is None or self._cursor[0] != group or self._cursor[1] > index:
                self._cursor = (group, 0, self._group_slices(group))
            _, position, slices = self._cursor
            while position < index:  # skip forward (a resumed run, a retried failure)
                next(slices)
                position += 1
            values = next(slices)
            self._cursor = (group, position + 1, slices)
        except DataError:
            self._cursor = None
            raise
        except Exception as exc:  # pyarrow raises many types for damaged files
            self._cursor = None
            raise DataError(f"row group {group} of {self.path} cannot be read ({exc}); re-download the release") from None
        return values

    def _group_slices(self, group: int) -> Iterator[list[bytes | None]]:
        """The slices of a row group's images in order: streamed page by page (`parquetpages`),
        or by pyarrow from the first slice the stream could not read."""
        done = 0
        rows = self._file.metadata.row_group(group).num_rows
        if self._leaf is not None:
            try:
                if self._fh is None:
                    self._fh = open(self.path, "rb")  # kept open while the table is read
                values = column_values(self._fh, self._file.metadata.row_group(group).column(self._leaf[0]), self._leaf[1], rows)
                while batch := list(itertools.islice(values, self._slice_rows)):
                    yield batch
                    done += 1
                return
            except Exception:  # anything the stream cannot read, pyarrow reads
                pass
        import pyarrow as pa

        batches = self._file.iter_batches(
            batch_size=self._slice_rows, row_groups=[group], columns=[self.image_column], use_threads=False
        )
        for i, batch in enumerate(batches):
            pa.default_memory_pool().release_unused()  # hand the pages already decoded back to the OS
            if i >= done:
                column = batch.column(0)
                if column.type.num_fields:  # the datasets Image struct {bytes, path}
                    column = column.field("bytes")
                yield column.to_pylist()

    def _slice(self, key: tuple[int, int]) -> Future[list[bytes | None]]:
        """The (pending or done) read of a slice; call with the lock held."""
        future = self._slices.get(key)
        if future is None:
            if self._reader is None:
                self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet-read")
            future = self._reader.submit(self._read_slice, *key)
            self._slices[key] = future
            while len(self._slices) > self._cached_slices:
                self._slices.popitem(last=False)
        else:
            self._slices.move_to_end(key)
        return future

    def _read_ahead(self, group: int, index: int) -> None:
        """Start reading the slice after (group, index); call with the lock held."""
        rows = (self._starts[group + 1] if group + 1 < len(self._starts) else self.num_rows) - self._starts[group]
        if (index + 1) * self._slice_rows < rows:
            self._slice((group, index + 1))
        elif group + 1 < len(self._starts):
            self._slice((group + 1, 0))

    def _bytes(self, row: int, values: list[bytes | None], position: int) -> bytes:
        value = values[position]
        if not value:
            raise DataError(f"row {row} of {self.path} has no image bytes in column {self.image_column!r}")
        if not isinstance(value, bytes):
            raise DataError(
                f"row {row} of {self.path} holds {type(value).__name__}, not image bytes, in column {self.image_column!r}; "
                "point --data at the release's parquet files"
            )
        return value

    def image_bytes(self, row: int) -> bytes:
        """The encoded image bytes stored in `row` (a struct with `bytes`, or plain binary).
        May wait for a read; see `cached` for the non-blocking way."""
        group, index, position = self._where(row)
        with self._lock:
            future = self._slice((group, index))
            self._read_ahead(group, index)
        return self._bytes(row, future.result(), position)

    def cached(self, row: int) -> bytes | None:
        """The bytes of `row` if its slice has been read already, else None (never waits, never
        starts a read of the row itself)."""
        group, index, position = self._where(row)
        with self._lock:
            future = self._slices.get((group, index))
            if future is None or not future.done() or future.exception() is not None:
                return None
            self._slices.move_to_end((group, index))
            self._read_ahead(group, index)
        return self._bytes(row, future.result(), position)


_TABLES: weakref.WeakSet[ParquetTable] = weakref.WeakSet()


def _after_fork() -> None:
    for table in list(_TABLES):
        table._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class ParquetImage:
    """The loader of one row's image (`ImageRef.loader`): calling it reads the bytes (and may
    wait); `cached()` returns them only when already in memory, so a caller on the event loop need
    not wait or trigger a read."""

    __slots__ = ("row", "table")

    def __init__(self, table: ParquetTable, row: int) -> None:
        self.table = table
        self.row = row

    def __call__(self) -> bytes:
        return self.table.image_bytes(self.row)

    def cached(self) -> bytes | None:
        """The bytes if they are in memory now, else None."""
        return self.table.cached(self.row)
