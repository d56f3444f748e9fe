"""Every answered call of a sample, on disk the moment it arrives, so that a resumed run (after a
kill -9, a crash, `--retry-failed`) requests only what never got an answer.

One append-only JSONL file per sample in flight, `<run>/cache/calls/<digest of the sample id>.jsonl`;
each line is one answered call `{"key": ..., "kind": ..., ...}`, written in one `write` on an
append-only descriptor (a kill can only tear the last line, which a reader skips). The key is a
digest of what the call asks (role, model, messages with image keys, sampling settings; or an
embedding request's inputs), so a call whose request changed is never answered from the cache. The
runner drops a sample's file once its record is stored and will not be requested again
(`forget`); a failed sample keeps it for `--retry-failed`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from needlepoint.conversation import Conversation, Generation, ImageRef
from needlepoint.files import AppendLog, json_line, write_atomic
from needlepoint.jsonl import read_back

__all__ = ["CALLS_DIR", "CallCache", "calls_path", "conversation_key", "forget", "key_of"]

CALLS_DIR = Path("cache") / "calls"
_KEY_VERSION = 1


def calls_path(run_dir: Path, sample_id: str) -> Path:
    """The file of a sample's answered calls in a run folder."""
    name = hashlib.sha256(str(sample_id).encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return Path(run_dir) / CALLS_DIR / f"{name}.jsonl"


def forget(run_dir: Path | None, sample_id: str) -> None:
    """Drop a sample's answered calls (its record is stored for good)."""
    if run_dir is not None:
        calls_path(run_dir, sample_id).unlink(missing_ok=True)


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


class CallCache:
    """The answered calls of one sample: `take(key)` hands out each stored answer of a key once
    (a request sent twice in a sample is answered twice), `put` appends a new one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, list[dict[str, Any]]] = {}
        self._log = AppendLog(path)
        for entry in self._read():
            self._entries.setdefault(str(entry["key"]), []).append(entry)

    def _read(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except OSError:
            return []
        out = []
        for line in raw.split(b"\n")[:-1]:  # the last piece is b"" or a torn line
            try:
                entry = read_back(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                out.append(entry)
        return out

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def take(self, key: str) -> dict[str, Any] | None:
        """The next stored answer of `key` not handed out yet, or None."""
        stored = self._entries.get(key)
        return stored.pop(0) if stored else None

    def put(self, key: str, kind: str, **fields: Any) -> None:
        """Append an answered call; in the operating system's hands before this returns."""
        self._log.append({"key": key, "kind": kind, **fields})

    def drop(self, unwanted: Callable[[dict[str, Any]], bool]) -> None:
        """Rewrite the file without the entries `unwanted` picks (e.g. embedding vectors once the
        scores they give are cached): atomically, so a kill keeps the old file or the new one."""
        self.close()
        kept = [e for e in self._read() if not unwanted(e)]
        for key in list(self._entries):
            self._entries[key] = [e for e in self._entries[key] if not unwanted(e)]
        if kept:
            write_atomic(self.path, b"".join(json_line(e) + b"\n" for e in kept))
        else:
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Close the file (reopened on the next `put`)."""
        self._log.close()

    def __del__(self) -> None:
        self.close()
