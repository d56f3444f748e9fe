"""Every file needlepoint writes is written here: `AtomicFile` (streaming, temp file and rename),
`write_atomic`, `write_json`, `write_lines` and `write_parquet` over it, and `json_line` /
`json_text` for JSON; no text a reply can carry makes them fail. A core helper: the models, the
benchmarks and the run folder (store.py) all write through it, under `lock_exclusively` where two
processes could write the same folder.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from needlepoint.core.errors import DataError
from needlepoint.core.text import writable

__all__ = [
    "AppendLog",
    "AtomicFile",
    "finite_only",
    "json_compact",
    "json_line",
    "json_text",
    "lock_exclusively",
    "scratch_folder",
    "write_atomic",
    "write_json",
    "write_lines",
    "write_parquet",
]


def json_text(obj: Any, indent: int | None = None, compact: bool = False) -> str:
    """The one JSON writer of files and reports: strict JSON (NaN and infinities are refused, not
    written as `NaN`, which no strict reader accepts), UTF-8 text kept as is (`AtomicFile` writes
    a lone surrogate as U+FFFD). Raises ValueError on a non-finite float. `compact`: no spaces
    after separators. (A record or a request body, written once a request, is `json_line`.)"""
    separators = (",", ":") if compact else None
    return json.dumps(obj, indent=indent, ensure_ascii=False, allow_nan=False, separators=separators)


def json_compact(obj: Any) -> str:
    """Compact JSON text for a page's data (report.html.script_json: hundreds of thousands of
    values in a large run's page): orjson, a non-finite float written as null; what orjson does
    not write (a lone surrogate a server sent) goes through `json_text`, whose text the file
    writer makes UTF-8."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode("utf-8")
    except TypeError:  # orjson.JSONEncodeError
        return json_text(finite_only(obj), compact=True)


def json_line(obj: Any) -> bytes:
    """Compact JSON as UTF-8 bytes, for what is written once a request (a record, a request
    body): orjson, about a tenth of the standard encoder's time. Strict JSON: a non-finite float
    becomes null (a record must reach disk even when a reply carries NaN). What orjson does not
    write (an integer over 64 bits; a lone surrogate, which a server's `"\\ud800"` decodes to)
    goes through the standard encoder, escaped to ASCII: the same values read back."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(finite_only(obj), allow_nan=False, separators=(",", ":")).encode("ascii")


def finite_only(obj: Any) -> Any:
    """A copy of a JSON-ready value with non-finite floats replaced by None (for what a server
    sent us: a record must reach disk even when a reply carries NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite_only(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_only(v) for v in obj]
    return obj


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return writable(text).encode("utf-8")


class AtomicFile:
    """The one writer of files: text, bytes or JSON lines go to a temporary file beside `path`,
    which replaces `path` only when the `with` block ends without an exception (flushed, and with
    `fsync`, on disk first), so a reader or a killed run never sees half a page, CSV, export or
    records file. Text that UTF-8 cannot hold (a lone surrogate from a reply) is written with
    U+FFFD in its place, so no text needlepoint produces can fail a write.

        with AtomicFile(out / "predictions.jsonl") as fh:
            for row in rows:
                fh.write_line(row)
    """

    _BUFFER = 1 << 20

    def __init__(self, path: str | Path, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        # two writers of one path never share a temp file
        self._tmp = f"{self.path}.tmp-{os.getpid()}-{threading.get_ident()}"
        self._fd: int | None = None
        self._buffer = bytearray()

    def __enter__(self) -> AtomicFile:
        try:  # plain system calls: report thumbnails are written by the thousand
            self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        return self

    def write(self, data: str | bytes) -> None:
        """Append text (UTF-8) or bytes."""
        self._buffer += _utf8(data) if isinstance(data, str) else data
        if len(self._buffer) >= self._BUFFER:
            self._flush()

    def write_line(self, obj: Any) -> None:
        """Append one JSON line (`json_line`: compact, strict, the record format)."""
        self.write(json_line(obj) + b"\n")

    def _flush(self) -> None:
        assert self._fd is not None, "AtomicFile is written inside its `with` block"
        view = memoryview(self._buffer)
        while view:
            view = view[os.write(self._fd, view) :]
        view.release()
        self._buffer.clear()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._fd is None:
            return
        try:
            if exc_type is None:
                self._flush()
                if self.fsync:
                    os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = None
        if exc_type is None:
            os.replace(self._tmp, self.path)
        else:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass


def write_atomic(path: str | Path, content: str | bytes, fsync: bool = False) -> Path:
    """Write a whole text (UTF-8; see `AtomicFile` for text UTF-8 cannot hold) or bytes through
    `AtomicFile`; return `path`. Without `fsync` (the default, as for records: a killed run, not a
    power cut, is what the run folder survives) thousands of thumbnails stay cheap."""
    with AtomicFile(path, fsync=fsync) as fh:
        fh.write(content)
    return Path(path)


def write_parquet(path: str | Path, table: Any, **options: Any) -> Path:
    """Write a pyarrow table as parquet (`options` go to `pyarrow.parquet.write_table`) through
    `write_atomic`; return `path`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = pa.BufferOutputStream()
    pq.write_table(table, buffer, **options)
    return write_atomic(path, buffer.getvalue().to_pybytes(), fsync=True)


def write_lines(path: str | Path, rows: Iterable[Any]) -> Path:
    """Write JSON lines (one `json_line` a row) atomically and durably; return `path`."""
    with AtomicFile(path) as fh:
        for row in rows:
            fh.write_line(row)
    return Path(path)


def write_json(path: str | Path, obj: Any, indent: int | None = 2) -> Path:
    """Write strict JSON (`json_text`) atomically and durably; return `path`."""
    return write_atomic(path, json_text(obj, indent=indent) + "\n", fsync=True)


class AppendLog:
    """An append-only file of JSON lines (a run's records, a sample's answered calls): each line goes
    down in one `write` on an O_APPEND descriptor, no user-space buffer, so it is in the operating
    system's hands before `append` returns and a kill leaves at most a torn last line, which the
    readers skip."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def append(self, obj: Any) -> None:
        """Write `obj` as one JSON line (created with its folder on the first line)."""
        self.append_lines(json_line(obj) + b"\n")

    def append_lines(self, data: bytes) -> None:
        """Write whole JSON lines as they are (ending in a newline), e.g. copied from another log."""
        if self._fd is None:
            try:  # the folder is made only where it is missing: no system call per log for it
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except FileNotFoundError:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_exclusively(path: Path, busy: str) -> int:
    """An exclusive lock on `path` (a folder, or a lock file made if absent), held until the
    descriptor returned is closed (`os.close`; a killed process releases it), or DataError(`busy`)
    at once when another process holds it. The one lock: a run folder's (`store.lock_folder`),
    the folder builds are written in (`contract.build`)."""
    import fcntl

    fd = os.open(path, os.O_RDONLY if path.is_dir() else os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise DataError(busy) from None
    return fd


@contextmanager
def scratch_folder(prefix: str = "needlepoint-") -> Iterator[Path]:
    """A new empty folder in the system's temporary folder, removed with all it holds when the
    block ends: for what is written only to be tried (a record exported alone, to find the one
    the authors' format cannot take), never into a run folder."""
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        yield Path(name)
