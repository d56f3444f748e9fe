"""The run folder: a JSON header naming the run's identity, and an append-only JSONL of records.

Every finished sample is one line, flushed the moment it is written, so an interrupted run loses
nothing it finished. A half-written last line (a kill mid-write) is cut off when the run reopens.
A record written later for the same sample (a retried failure) supersedes the earlier one.

Files are written through files.py (`AtomicFile`, `write_atomic`, `write_json`, `write_lines`,
`write_parquet`, `json_line`, `json_text`); their names are also importable from here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from needlepoint.core.errors import DataError
from needlepoint.core.files import (
    AppendLog,
    finite_only,
    json_line,
    lock_exclusively,
    write_json,
)
from needlepoint.core.jsonl import read_back
from needlepoint.core.records import Record, RunHeader

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; the annotation is never evaluated
    from typing_extensions import Unpack

__all__ = ["HEADER", "LOCK", "METRICS", "RECORDS", "RunStore", "identity_diff", "lock_folder", "read_records"]

HEADER = "run.json"
RECORDS = "records.jsonl"
LOCK = ".lock"  # held by the process that writes the run (`lock_folder`)
RECORD_PARTS = "records.part-*.jsonl"  # the records of --processes workers, on their way into RECORDS
METRICS = "metrics.json"


def read_records(path: Path) -> dict[str, Record]:
    """Records by sample id from a records file; the last record of an id wins. Beside a run's
    records file, the part files of --processes workers count too, as newer: a command killed
    before it copied their last lines leaves them there until the next `RunStore.open` folds them in."""
    out: dict[str, Record] = {}
    _read_into(out, path)
    if path.name == RECORDS:
        for part in sorted(path.parent.glob(RECORD_PARTS)):
            _read_into(out, part)
    return out


def _read_into(out: dict[str, Record], path: Path) -> None:
    if not path.exists():
        return
    from needlepoint.core.jsonl import open_regular  # a FIFO or /dev/zero in a run folder is refused, not read

    with open_regular(path, "move the run folder aside", None) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.endswith(b"\n"):
                break
            try:
                rec = read_back(line)
            except (ValueError, RecursionError):  # RecursionError: a line nested 100,000 deep
                rec = None
            wrong = "not a JSON record with an id" if not isinstance(rec, dict) or "id" not in rec else _wrong_field(rec)
            if wrong is not None and isinstance(rec, dict) and "id" in rec:
                wrong = f"the record of sample {str(rec['id'])!r} has {wrong}"
            if wrong is not None:
                raise DataError(
                    f"{path} line {lineno} is corrupt ({wrong}); to keep the other records, delete that line "
                    f"(`sed -i '{lineno}d' {shlex.quote(str(path))}`) and rerun: a sample it held is requested again"
                )
            out[str(rec["id"])] = cast(Record, rec)  # a JSON object with an id, as written; its fields are read with .get


def _wrong_header(header: dict[str, Any]) -> str | None:
    """What in a run header has another type than needlepoint writes (the fields a resume, a merge
    and the reports read), or None."""
    if finite_only(header) != header:  # NaN or Infinity somewhere: the header could not be written back
        return "holds a number that is not finite (NaN or Infinity)"
    for key, kind, what in (("hash", str, "text"), ("identity", dict, "an object"), ("config", dict, "an object")):
        if key in header and not isinstance(header[key], kind):
            return f"has its {key} of type {type(header[key]).__name__}, not {what}"
    shard = (header.get("identity") or {}).get("shard")
    if shard is not None and not isinstance(shard, str):
        return f"has an identity.shard of type {type(shard).__name__}, not text"
    config = header.get("config") or {}
    urls = config.get("api_urls")
    if "api_urls" in config and not (isinstance(urls, list) and all(isinstance(u, str) for u in urls)):
        return "has config.api_urls that are not a list of URLs"
    wall = header.get("wall_s")
    if wall is not None and (isinstance(wall, bool) or not isinstance(wall, (int, float))):
        return f"has a wall_s of type {type(wall).__name__}, not a number"
    rows = header.get("endpoints")
    if rows is not None and not (
        isinstance(rows, list)
        and all(
            isinstance(r, dict)
            and isinstance(r.get("url"), str)
            and all(isinstance(r.get(k, 0), (int, float)) and not isinstance(r.get(k, 0), bool) for k in ("requests", "errors"))
            for r in rows
        )
    ):
        return "has endpoints that are not rows of a url and counts"
    return None


TEXT_FIELDS = ("reply", "reasoning", "error", "role", "model", "finish_reason", "error_kind")  # of a turn


def _wrong_field(rec: dict[str, Any]) -> str | None:
    """Which field every reader of records reads (the status, the turns and their texts, the
    scores) has another type than needlepoint writes (a hand-edited or foreign file), or None:
    one sentence for a resume, a merge, a report or a comparison instead of a traceback."""
    if not isinstance(rec.get("status", ""), str):
        return f"a status of type {type(rec.get('status')).__name__}, not text"
    turns = rec.get("turns", [])
    if turns is not None and not isinstance(turns, list):
        return f"turns of type {type(turns).__name__}, not a list"
    for n, turn in enumerate(turns or [], 1):
        if not isinstance(turn, dict):
            return f"a turn {n} of type {type(turn).__name__}, not an object"
        for key in TEXT_FIELDS:
            value = turn.get(key)
            if value is not None and not isinstance(value, str):
                return f"a {key} of type {type(value).__name__} in turn {n}, not text"
    for key in ("scores", "solver", "request"):
        value = rec.get(key)
        if value is not None and not isinstance(value, dict):
            return f"{key} of type {type(value).__name__}, not an object"
    return None


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def identity_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The identity fields that differ, each as `name old -> new` (long values shortened)."""
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return "; ".join(f"{k} {_short(old.get(k))} -> {_short(new.get(k))}" for k in keys)


def lock_folder(run_dir: Path) -> int:
    """An exclusive lock on a run folder (its `.lock` file), held until the descriptor returned is
    closed, or DataError when another process holds it: a run that answers, or `--fresh` moving
    it aside."""
    return lock_exclusively(
        run_dir / LOCK, f"{run_dir} is in use by another needlepoint process; wait for it or choose another --out"
    )


class RunStore:
    """One run folder. Open it with `open`, which checks identity and repairs a torn last line."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.records_path = run_dir / RECORDS
        self._log = AppendLog(self.records_path)
        self._lock_fd: int | None = None
        self.header: RunHeader = {}  # run.json as open found or wrote it, with every update since
        self.created = False  # open wrote the header: the folder held no run

    @staticmethod
    def read_header(run_dir: Path) -> RunHeader | None:
        """The run's header, or None when the folder holds no run."""
        from needlepoint.core.jsonl import read_json  # the one reader of files: depth, numbers, size, FIFOs

        path = run_dir / HEADER
        if not os.path.lexists(path):
            return None
        header = read_json(path, "move the run folder aside and start fresh", 256 << 20)
        wrong = "is not valid JSON of a run header" if not isinstance(header, dict) else _wrong_header(header)
        if wrong is not None:
            raise DataError(f"{path} {wrong}; move the run folder aside and start fresh")
        return cast(RunHeader, header)  # the JSON object as found; its fields are read with .get

    @classmethod
    def open(
        cls,
        run_dir: Path,
        header: RunHeader,
        advice: str = "pass --fresh for a new run folder",
        may_hold: Collection[str] = (),
    ) -> RunStore:
        """Create or reopen a run folder whose identity must equal `header["identity"]`; `advice`
        ends the refusal message (how to start fresh). A folder that holds no run yet must be empty
        but for its lock and the names in `may_hold` (what the caller itself put there before the
        run began): a run writes its report and files over whatever else it would find."""
        existing = cls.read_header(run_dir)
        if existing is not None and existing.get("hash") != header["hash"]:
            stored = existing.get("identity")
            diff = (
                identity_diff(stored if isinstance(stored, dict) else {}, header["identity"]) or "the needlepoint version differs"
            )
            raise DataError(
                f"{run_dir} holds a run with a different configuration (stored -> now: {diff}); "
                f"answers will not be mixed: {advice}"
            )
        if existing is None and (run_dir / RECORDS).exists():
            raise DataError(f"{run_dir} holds records but no {HEADER}; answers will not be mixed: choose another --out folder")
        if existing is None and run_dir.is_dir():
            others = sorted(set(os.listdir(run_dir)) - {LOCK, *may_hold})
            if others:
                shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
                raise DataError(
                    f"{run_dir} holds files but no run ({shown}); a run there would write over them: "
                    "choose a new or empty --out folder"
                )
        run_dir.mkdir(parents=True, exist_ok=True)
        store = cls(run_dir)
        store._lock()
        if existing is None:
            write_json(run_dir / HEADER, header)
        store.header = header.copy() if existing is None else existing
        store.created = existing is None
        store._truncate_torn_tail()
        store._fold_parts()
        return store

    def _lock(self) -> None:
        """Hold an exclusive lock on the run folder for this process's lifetime, so that two runs
        never append to (or repair) the same records file."""
        self._lock_fd = lock_folder(self.dir)

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

    def _fold_parts(self) -> None:
        """Copy into the records file the whole lines of the part files a killed --processes command
        left (those it had not copied yet: a line already there is not written twice), and remove
        the part files."""
        parts = sorted(self.dir.glob(RECORD_PARTS))
        if not parts:
            return
        from needlepoint.core.jsonl import open_regular

        def lines(path: Path) -> Iterator[bytes]:
            """The whole lines of a file (a torn last one is dropped, as in the records file)."""
            if path.exists():
                with open_regular(path, "move the run folder aside", None) as fh:
                    yield from (line for line in fh if line.endswith(b"\n"))

        copied = {hashlib.blake2b(line, digest_size=16).digest() for line in lines(self.records_path)}
        for part in parts:
            new = [line for line in lines(part) if hashlib.blake2b(line, digest_size=16).digest() not in copied]
            if new:
                self.append_lines(b"".join(new))
            part.unlink()

    def part_path(self, index: int) -> Path:
        """The part file of --processes worker `index`: the worker appends its records there and the
        command copies each whole line into the records file, its one writer (processes.py)."""
        return self.dir / RECORD_PARTS.replace("*", str(index))

    def divert(self, path: Path) -> None:
        """From now on `append` writes to `path` (a worker's part file), in this process only."""
        self._log.close()
        self._log = AppendLog(path)

    def append_lines(self, data: bytes) -> None:
        """Append whole record lines as they were written elsewhere (a worker's part file)."""
        self._log.append_lines(data)

    def records(self) -> dict[str, Record]:
        """All records by sample id (the latest per id)."""
        return read_records(self.records_path)

    def append(self, record: Record, line: bytes | None = None) -> None:
        """Write one record; it is in the operating system's hands (one `write` call on an
        append-only descriptor, no user-space buffer) before this returns. `line`: the record as
        `json_line` made it, newline included, when the caller has it already."""
        self._log.append_lines(json_line(record) + b"\n" if line is None else line)

    def update_header(self, **fields: Unpack[RunHeader]) -> None:
        """Merge fields into the header (status, finish time) and write it; the folder is locked, so
        the header held since `open` is the one on disk."""
        self.header.update(fields)
        write_json(self.dir / HEADER, self.header)

    def close(self) -> None:
        """Close the records file and release the run folder for other processes."""
        self._log.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
