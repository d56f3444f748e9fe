"""Token counts without a request: a model's own tokenizer read from its `tokenizer.json`, and a
count cache shared by every sample of a process.

vLLM's `/tokenize` counts one prompt per request, and MM-NIAH's RAG baseline needs the count of
every text piece of a long document (about 1,500 pieces for 30k tokens). The server tokenizes with
the model's Hugging Face tokenizer, whose fast form is the `tokenizers` package reading
`tokenizer.json`, so loading that file here gives the same counts with no request at all; the
served embedder compares the two on a probe before it trusts the local one. Pieces repeat across
samples (MM-NIAH's haystacks reuse OBELICS text), so counts are also remembered by the piece's
digest, whichever way they were obtained.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from needlepoint.errors import DataError

__all__ = ["CountCache", "LocalTokenizer", "load_tokenizer"]


def _tokenizer_file(path_or_id: str) -> Path:
    """The `tokenizer.json` of a folder, the file itself, or a Hugging Face id found in the local
    cache (offline); DataError in one sentence otherwise."""
    p = Path(path_or_id).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        if (p / "tokenizer.json").is_file():
            return p / "tokenizer.json"
        raise DataError(
            f"{path_or_id} has no tokenizer.json (the fast tokenizer's file); pass the folder of a model saved with a fast tokenizer"
        )
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        found = None
    else:
        found = try_to_load_from_cache(path_or_id, "tokenizer.json") if "/" in path_or_id else None
    if isinstance(found, str):
        return Path(found)
    raise DataError(
        f"no tokenizer at {path_or_id!r}: give a folder (or file) with the model's tokenizer.json, "
        "or an id already in the local Hugging Face cache"
    )


class LocalTokenizer:
    """A model's fast tokenizer, loaded from `tokenizer.json`; counts without special tokens,
    as `/tokenize` with `add_special_tokens: false` gives them."""

    def __init__(self, path_or_id: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise DataError("counting tokens locally needs the `tokenizers` package; pip install tokenizers") from None
        file = _tokenizer_file(path_or_id)
        try:
            self._tok: Any = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises its own Exception type for a bad file
            raise DataError(f"{file} is not a tokenizer.json the tokenizers package can read ({exc}); check the path") from None
        self.source = str(file)

    def count(self, texts: Sequence[str]) -> list[int]:
        """Each text's token count (the empty text counts 0)."""
        if not texts:
            return []
        return [len(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]


def load_tokenizer(path_or_id: str | None) -> LocalTokenizer | None:
    """The tokenizer a flag names, or None when none was given."""
    return LocalTokenizer(path_or_id) if path_or_id else None


class CountCache:
    """Token counts by the text's digest, at most `limit` of them (least recently used dropped):
    32 bytes of key and a small int per piece, whatever the piece's length."""

    def __init__(self, limit: int = 1_000_000) -> None:
        self.limit = limit
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self.hits = 0

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def get(self, text: str) -> int | None:
        """The remembered count of `text`, or None."""
        key = self._key(text)
        got = self._counts.get(key)
        if got is not None:
            self._counts.move_to_end(key)
            self.hits += 1
        return got

    def put(self, text: str, count: int) -> None:
        """Remember `text`'s count."""
        key = self._key(text)
        self._counts[key] = count
        self._counts.move_to_end(key)
        if len(self._counts) > self.limit:
            self._counts.popitem(last=False)
