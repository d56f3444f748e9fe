"""Every answered call of a sample, on disk the moment it arrives, so that a resumed run (after a
kill -9, a crash, `--retry-failed`) requests only what never got an answer.

A run process appends its samples' answered calls to one log of its own,
`<run>/cache/calls/log-<pid>-<time>.jsonl` (`CallLog`): one line per answered call, `{"sample":
<digest of the sample id>, "key": ..., "kind": ..., ...}`, written in one `write` on an append-only
descriptor, so a kill can only tear the last line, which a reader skips. One file a run, not one a
sample: creating and removing a file is a metadata operation whose cost is the file system's (25 to
670 us on a busy ext4, a server round trip on a cluster's network file system). A run reads every
log once when it starts, keeping its pending samples' entries; `compact` (after the answering)
rewrites the logs into one holding only the samples that may be requested again.

Kinds that a solver removes once they have served (`Solver.dropped_calls`: the RAG baseline's
embedding vectors, megabytes a sample) go to the sample's own file instead,
`<run>/cache/calls/<digest of the sample id>.jsonl`, which `CallCache.drop` rewrites and `forget`
removes when the sample's record is stored.

The key is a digest of what the call asks (role, model, messages with image keys, sampling
settings; or an embedding request's inputs), so a call whose request changed is never answered
from the cache. The digest is SHA-256's, from the standard library (OpenSSL's, with the CPU's SHA
instructions where it has them): BLAKE3 takes a third of its time on a long document (0.03 against
0.1 ms on 188 KB), not worth a package in the core install (docs/performance.md, issue 40).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

from needlepoint.core.conversation import Conversation, Generation, ImageRef
from needlepoint.core.files import AppendLog, json_line, write_atomic
from needlepoint.core.jsonl import read_back

__all__ = ["CALLS_DIR", "CallCache", "CallLog", "calls_path", "compact", "conversation_key", "key_of", "read_logs", "sample_name"]

CALLS_DIR = Path("cache") / "calls"
LOG_GLOB = "log-*.jsonl"
_KEY_VERSION = 3  # 3: SHA-256 again (2: BLAKE3, 1: SHA-256); a run interrupted under 1 or 2 asks its pending calls again


def sample_name(sample_id: str) -> str:
    """A sample's name in the call cache: a digest of its id (any id makes a safe file name)."""
    return hashlib.sha256(str(sample_id).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def calls_path(run_dir: Path, sample_id: str) -> Path:
    """The sample's own file of answered calls in a run folder (the kinds a solver drops)."""
    return Path(run_dir) / CALLS_DIR / f"{sample_name(sample_id)}.jsonl"


def _entry(line: bytes) -> dict[str, Any] | None:
    """One whole line of a calls file as its entry; None for a damaged one (asked again)."""
    try:
        entry = read_back(line)
    except (ValueError, RecursionError):
        return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("key"), str) else None


def _lines(path: Path) -> list[bytes]:
    """The whole lines of a calls file ([] when there is none): the last piece is b"" or a torn line."""
    try:
        return path.read_bytes().split(b"\n")[:-1]
    except OSError:
        return []


def _log_entries(folder: Path) -> Iterator[tuple[bytes, str, dict[str, Any]]]:
    """(line, sample name, entry) of every whole line of the run logs in `folder`. A line already
    met in another log is skipped (a kill during `compact` can leave a line in two logs); the same
    line twice in one log is two answers of the same request, both kept."""
    earlier: set[bytes] = set()  # digests of the lines of the logs read so far
    for path in sorted(folder.glob(LOG_GLOB)):
        lines = _lines(path)
        digests = [hashlib.blake2b(line, digest_size=16).digest() for line in lines]
        for line, digest in zip(lines, digests, strict=True):
            entry = _entry(line) if digest not in earlier else None
            name = entry.pop("sample", None) if entry is not None else None
            if entry is not None and isinstance(name, str):
                yield line, name, entry
        earlier.update(digests)


def read_logs(folder: Path, names: Collection[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The entries of the run logs in `folder` by sample name (only `names`, when given)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for _, name, entry in _log_entries(folder):
        if names is None or name in names:
            out.setdefault(name, []).append(entry)
    return out


def compact(run_dir: Path, done: Iterable[str]) -> None:
    """Rewrite the run's logs into one that keeps only the lines of samples not in `done` (the
    ids whose records are stored for good): the new log is written whole first, then the old ones
    are removed, so a kill keeps every needed line (perhaps twice: a reader takes it once)."""
    folder = Path(run_dir) / CALLS_DIR
    logs = sorted(folder.glob(LOG_GLOB))
    if not logs:
        return
    gone = {sample_name(i) for i in done}
    kept = [line + b"\n" for line, name, _ in _log_entries(folder) if name not in gone]
    if kept:
        write_atomic(folder / _log_name(), b"".join(kept))
    for path in logs:
        path.unlink(missing_ok=True)


def _log_name() -> str:
    return f"log-{os.getpid()}-{time.time_ns()}.jsonl"


def key_of(*parts: Any) -> str:
    """A digest of a call's JSON-ready request parts (what it asks, not where it is sent)."""
    return hashlib.sha256(json_line([_KEY_VERSION, *parts])).hexdigest()[:40]


def _part(part: str | ImageRef) -> Any:
    return part if isinstance(part, str) else {"image": part.key, "max_side": part.max_side}


def conversation_key(role: str, model: str, conversation: Conversation, generation: Generation) -> str:
    """The key of a chat call: its role and model, the messages (images by key and size asked
    for) and the sampling settings (the timeout changes no answer and is left out)."""
    messages = [[m.role, [_part(p) for p in m.parts]] for m in conversation.messages]
    sampling = {k: v for k, v in generation.to_dict().items() if k != "timeout_s"}
    return key_of("chat", role, model, messages, sampling)


class CallLog:
    """A run process's answered calls (the module's docstring): its pending samples' entries read
    once from the run's logs when it starts and handed to each sample's `CallCache`, new ones
    appended to a log of its own. `dropped`: the kinds kept in a sample's own file instead."""

    def __init__(self, run_dir: Path, pending: Iterable[str], dropped: Collection[str] = ()) -> None:
        self.folder = Path(run_dir) / CALLS_DIR
        self.dropped = frozenset(dropped)
        names = {sample_name(i) for i in pending}
        found = self.folder.is_dir()
        self._stored = read_logs(self.folder, names) if found else {}
        self._own = {p.stem for p in self.folder.glob("*.jsonl")} & names if found else set()  # samples with a file of their own
        self._log = AppendLog(self.folder / _log_name())

    def cache(self, sample_id: str) -> CallCache:
        """The call cache of a sample, with what the logs hold of it."""
        name = sample_name(sample_id)
        return CallCache(self.folder / f"{name}.jsonl", self._stored.pop(name, ()), self, name, name in self._own)

    def append(self, name: str, entry: dict[str, Any]) -> None:
        """Append an answered call of sample `name` to this process's log (one `write`)."""
        self._log.append({"sample": name, **entry})

    def owns(self, name: str) -> None:
        """Sample `name` has a file of its own now (`forget` removes it)."""
        self._own.add(name)

    def forget(self, sample_id: str) -> None:
        """Remove the sample's own file, if it has one (its record is stored for good)."""
        name = sample_name(sample_id)
        if name in self._own:
            self._own.discard(name)
            (self.folder / f"{name}.jsonl").unlink(missing_ok=True)

    def close(self) -> None:
        self._log.close()


class CallCache:
    """The answered calls of one sample: `take(key)` hands out each stored answer of a key once
    (a request sent twice in a sample is answered twice), `put` appends a new one: to the run's
    log (`log`), or to the sample's own file `path` (without a log, or for the log's `dropped`
    kinds). `stored`: its entries from the run's logs; `read_own`: read its own file too."""

    def __init__(
        self,
        path: Path,
        stored: Iterable[dict[str, Any]] = (),
        log: CallLog | None = None,
        name: str = "",
        read_own: bool = True,
    ) -> None:
        self.path = path
        self._log = log
        self._name = name
        self._own = AppendLog(path)
        self._entries: dict[str, list[dict[str, Any]]] = {}
        for entry in [*stored, *(self._read() if read_own else ())]:
            self._entries.setdefault(str(entry["key"]), []).append(entry)

    def _read(self) -> list[dict[str, Any]]:
        return [e for line in _lines(self.path) if (e := _entry(line)) is not None]

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def take(self, key: str) -> dict[str, Any] | None:
        """The next stored answer of `key` not handed out yet, or None."""
        stored = self._entries.get(key)
        return stored.pop(0) if stored else None

    def put(self, key: str, kind: str, **fields: Any) -> None:
        """Append an answered call; in the operating system's hands before this returns."""
        entry = {"key": key, "kind": kind, **fields}
        if self._log is not None and kind not in self._log.dropped:
            self._log.append(self._name, entry)
            return
        if self._log is not None:
            self._log.owns(self._name)
        self._own.append(entry)

    def drop(self, unwanted: Callable[[dict[str, Any]], bool]) -> None:
        """Rewrite the sample's own file without the entries `unwanted` picks (e.g. embedding
        vectors once the scores they give are cached): atomically, so a kill keeps the old file or
        the new one. (What `unwanted` picks should be of the log's `dropped` kinds: the log is not
        rewritten.)"""
        self.close()
        kept = [e for e in self._read() if not unwanted(e)]
        for key in list(self._entries):
            self._entries[key] = [e for e in self._entries[key] if not unwanted(e)]
        if kept:
            write_atomic(self.path, b"".join(json_line(e) + b"\n" for e in kept))
        else:
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Close the sample's own file (reopened on the next `put` there)."""
        self._own.close()

    def __del__(self) -> None:
        self.close()
