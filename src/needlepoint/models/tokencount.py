"""Token counts without a request: a model's own tokenizer read from its `tokenizer.json`.

vLLM's `/tokenize` counts one prompt per request, and MM-NIAH's RAG baseline needs the count of
every text piece of a long document (about 1,500 pieces for 30k tokens). The server tokenizes with
the model's Hugging Face tokenizer, whose fast form is the `tokenizers` package reading
`tokenizer.json`, so loading that file here gives the same counts with no request at all; the
served embedder compares the two on a probe before it trusts the local one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from needlepoint.errors import DataError

__all__ = ["LocalTokenizer", "load_tokenizer"]


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
