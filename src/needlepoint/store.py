"""The run folder: a JSON header naming the run's identity, and an append-only JSONL of records.

Every finished sample is one line, flushed the moment it is written, so an interrupted run loses
nothing it finished. A half-written last line (a kill mid-write) is cut off when the run reopens.
A record written later for the same sample (a retried failure) supersedes the earlier one.

It is also where every file needlepoint writes is written: `AtomicFile` (streaming, temp file and
rename), `write_atomic`, `write_json` and `write_lines` over it, and `json_line` / `json_text` for
JSON; no text a reply can carry makes them fail.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import orjson

from needlepoint.errors import DataError
from needlepoint.text import writable

HEADER = "run.json"
RECORDS = "records.jsonl"
METRICS = "metrics.json"


def json_text(obj: Any, indent: int | None = None, compact: bool = False) -> str:
    """The one JSON writer of files and reports: strict JSON (NaN and infinities are refused, not
    written as `NaN`, which no strict reader accepts), UTF-8 text kept as is (`AtomicFile` writes
    a lone surrogate as U+FFFD). Raises ValueError on a non-finite float. `compact`: no spaces
    after separators. (A record or a request body, written once a request, is `json_line`.)"""
    separators = (",", ":") if compact else None
    return json.dumps(obj, indent=indent, ensure_ascii=False, allow_nan=False, separators=separators)


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
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        view = memoryview(json_line(obj) + b"\n")
        while view:
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """Records by sample id from a records file; the last record of an id wins."""
    out: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return out
    from needlepoint.jsonl import open_regular  # a FIFO or /dev/zero in a run folder is refused, not read

    with open_regular(path, "move the run folder aside", None) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.endswith(b"\n"):
                break
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: a line nested 100,000 deep
                rec = None
            if not isinstance(rec, dict) or "id" not in rec:
                raise DataError(
                    f"{path} line {lineno} is corrupt (not a JSON record with an id); to keep the other records, "
                    f"delete that line (`sed -i '{lineno}d' {shlex.quote(str(path))}`) and rerun: a sample it held is requested again"
                )
            out[str(rec["id"])] = rec
    return out


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def identity_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The identity fields that differ, each as `name old -> new` (long values shortened)."""
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return "; ".join(f"{k} {_short(old.get(k))} -> {_short(new.get(k))}" for k in keys)


class RunStore:
    """One run folder. Open it with `open`, which checks identity and repairs a torn last line."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.records_path = run_dir / RECORDS
        self._log = AppendLog(self.records_path)
        self._lock_fh: IO[str] | None = None

    @staticmethod
    def read_header(run_dir: Path) -> dict[str, Any] | None:
        """The run's header, or None when the folder holds no run."""
        from needlepoint.jsonl import read_json  # the one reader of files: depth, numbers, size, FIFOs

        path = run_dir / HEADER
        if not os.path.lexists(path):
            return None
        header = read_json(path, "move the run folder aside and start fresh", 256 << 20)
        if not isinstance(header, dict):
            raise DataError(f"{path} is not valid JSON of a run header; move the run folder aside and start fresh")
        return header

    @classmethod
    def open(cls, run_dir: Path, header: dict[str, Any], advice: str = "pass --fresh for a new run folder") -> RunStore:
        """Create or reopen a run folder whose identity must equal `header["identity"]`; `advice`
        ends the refusal message (how to start fresh)."""
        existing = cls.read_header(run_dir)
        if existing is not None and existing.get("hash") != header["hash"]:
            stored = existing.get("identity")
            diff = identity_diff(stored if isinstance(stored, dict) else {}, header["identity"]) or "the needlepoint version differs"
            raise DataError(
                f"{run_dir} holds a run with a different configuration (stored -> now: {diff}); "
                f"answers will not be mixed: {advice}"
            )
        if existing is None and (run_dir / RECORDS).exists():
            raise DataError(f"{run_dir} holds records but no {HEADER}; answers will not be mixed: choose another --out folder")
        run_dir.mkdir(parents=True, exist_ok=True)
        store = cls(run_dir)
        store._lock()
        if existing is None:
            write_json(run_dir / HEADER, header)
        store._truncate_torn_tail()
        return store

    def _lock(self) -> None:
        """Hold an exclusive lock on the run folder for this process's lifetime, so that two runs
        never append to (or repair) the same records file."""
        import fcntl

        self._lock_fh = (self.dir / ".lock").open("a")
        try:
            fcntl.flock(self._lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_fh.close()
            raise DataError(f"{self.dir} is in use by another needlepoint process; wait for it or choose another --out") from None

    def _truncate_torn_tail(self) -> None:
        if not self.records_path.exists():
            return
        with self.records_path.open("rb+") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            if size == 0:
                return
            fh.seek(max(0, size - 1))
            if fh.read(1) == b"\n":
                return
            # Walk back to the last newline and cut what follows it.
            pos = size
            chunk = 4096
            while pos > 0:
                start = max(0, pos - chunk)
                fh.seek(start)
                buf = fh.read(pos - start)
                nl = buf.rfind(b"\n")
                if nl >= 0:
                    fh.truncate(start + nl + 1)
                    return
                pos = start
            fh.truncate(0)

    def records(self) -> dict[str, dict[str, Any]]:
        """All records by sample id (the latest per id)."""
        return read_records(self.records_path)

    def append(self, record: dict[str, Any]) -> None:
        """Write one record; it is in the operating system's hands (one `write` call on an
        append-only descriptor, no user-space buffer) before this returns."""
        self._log.append(record)

    def update_header(self, **fields: Any) -> None:
        """Merge fields into the header (status, finish time)."""
        header = self.read_header(self.dir) or {}
        header.update(fields)
        write_json(self.dir / HEADER, header)

    def close(self) -> None:
        """Close the records file and release the run folder for other processes."""
        self._log.close()
        if self._lock_fh is not None:
            self._lock_fh.close()
            self._lock_fh = None
