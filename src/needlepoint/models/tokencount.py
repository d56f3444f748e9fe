"""Token counts without a request: a model's own tokenizer loaded here, and a run's store of the
counts it paid `/tokenize` for.

vLLM's `/tokenize` counts one prompt per request, and MM-NIAH's RAG baseline needs the count of
every text piece of a long document (about 1,500 pieces for 30k tokens). The server tokenizes with
the model's tokenizer as transformers' `AutoTokenizer` loads it, so loading it the same way here
(offline, from local files) gives the same counts with no request at all. transformers is optional:
without it the `tokenizers` package reads `tokenizer.json`, which for some models counts otherwise
(transformers' Qwen2 class splits digit runs that the file keeps together); the served embedder
compares the two on probes before it trusts the local one. Both are optional extras, imported only
here: `tokenizers` is the `tokenizer` extra (`eval --dry-run --tokenizer`, `--embed-tokenizer`;
`transformers` brings it too), kept out of the core install for the `huggingface_hub`, `hf-xet` and
`httpx` it brings (issue 40).

What must still be asked is asked once a run: `CountStore` keeps every paid count, by a digest of
the model and the text, in an append-only file of the run folder, so pieces that several documents
share (MM-NIAH's haystacks reuse OBELICS text) are counted once, and a run killed and resumed asks
for no count it was answered.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from needlepoint.core.aio import gather_all
from needlepoint.core.errors import DataError
from needlepoint.core.files import AppendLog

__all__ = ["COUNTS_FILE", "CountStore", "LocalTokenizer", "TOKENIZER_EXTRA", "load_tokenizer"]

TOKENIZER_EXTRA = "tokenizer"
"""The optional install with the `tokenizers` package (pyproject.toml's optional-dependencies)."""

COUNTS_FILE = Path("cache") / "token_counts.jsonl"
"""A run's paid `/tokenize` counts, one `{"k": digest, "n": count}` line each."""


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
        try:
            found = try_to_load_from_cache(path_or_id, "tokenizer.json") if "/" in path_or_id else None
        except ValueError:  # a path that is no Hugging Face id either (HFValidationError)
            found = None
    if isinstance(found, str):
        return Path(found)
    raise DataError(
        f"no tokenizer at {path_or_id!r}: give a folder (or file) with the model's tokenizer.json, "
        "or an id already in the local Hugging Face cache"
    )


def _auto_tokenizer(path_or_id: str) -> Any:
    """transformers' tokenizer of a model folder (or an id in the local cache), as vLLM loads it,
    without the network; None when transformers is not installed, the name is a file, or it does
    not load (then tokenizer.json is read instead, and checked like any other)."""
    p = Path(path_or_id).expanduser()
    if p.is_file() or (p.is_dir() and not any((p / f).is_file() for f in ("tokenizer_config.json", "config.json"))):
        return None  # a tokenizer.json alone: transformers would read it as it is (and take seconds to import)
    try:
        import transformers
    except ImportError:
        return None
    try:
        return transformers.AutoTokenizer.from_pretrained(
            str(p) if p.is_dir() else path_or_id, local_files_only=True, trust_remote_code=False
        )
    except Exception:  # any failure to load (no files, remote code, a missing backend): read the file
        return None


_BACKEND_PROBES = ("summarize:", " 12,345 penguins (3.5%) at 06:00\n\nnaïve 東京 <image> <|image_pad|> !!", "")


def _backend(auto: Any) -> Any:
    """The Rust tokenizer under a transformers fast tokenizer whose call is only that tokenizer's
    `encode_batch` (transformers' own TokenizersBackend, no subclass changing the text first), set
    as that call sets it (no truncation or padding, special tokens as the class treats them) and
    counting the probes as the call does; None otherwise (then the call itself counts)."""
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return None
    kind = type(auto)
    if not isinstance(auto, TokenizersBackend) or any(
        getattr(kind, name, None) is not getattr(TokenizersBackend, name, None) for name in ("__call__", "_encode_plus")
    ):
        return None
    try:
        want = [len(ids) for ids in auto(list(_BACKEND_PROBES), add_special_tokens=False)["input_ids"]]
        backend = auto.backend_tokenizer  # the call above left it configured as the call uses it
        got = [len(e.ids) for e in backend.encode_batch_fast(list(_BACKEND_PROBES), add_special_tokens=False)]
    except Exception:  # an older tokenizers without encode_batch_fast, or any surprise: use the call
        return None
    return backend if got == want else None


class LocalTokenizer:
    """A model's tokenizer loaded here; counts without special tokens, as `/tokenize` with
    `add_special_tokens: false` gives them. With `transformers=True` a folder or cached id is
    loaded with transformers' AutoTokenizer where transformers is installed (`via` says
    "transformers"), as vLLM loads it; a `tokenizer.json` file, any name without transformers, or
    `transformers=False` (the file as it is, e.g. for a dry run's estimate) by the `tokenizers`
    package (`via` "tokenizers")."""

    def __init__(self, path_or_id: str, transformers: bool = False) -> None:
        auto = _auto_tokenizer(path_or_id) if transformers else None
        if auto is not None:
            self._auto: Any = auto
            self._tok: Any = _backend(auto)
            p = Path(path_or_id).expanduser()
            self.source = str(p / "tokenizer.json") if (p / "tokenizer.json").is_file() else str(p if p.is_dir() else path_or_id)
            self.via = "transformers"
            return
        self._auto = None
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise DataError(
                "counting tokens with a model's own tokenizer (--tokenizer, --embed-tokenizer) needs the tokenizers package; "
                f"install it with pip install -e '.[{TOKENIZER_EXTRA}]'"
            ) from None
        file = _tokenizer_file(path_or_id)
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises its own Exception type for a bad file
            raise DataError(f"{file} is not a tokenizer.json the tokenizers package can read ({exc}); check the path") from None
        self.source = str(file)
        self.via = "tokenizers"

    def count(self, texts: Sequence[str]) -> list[int]:
        """Each text's token count (the empty text counts 0)."""
        if not texts:
            return []
        if self._tok is None:  # a tokenizer transformers runs in Python
            return [len(ids) for ids in self._auto(list(texts), add_special_tokens=False)["input_ids"]]
        encode = getattr(self._tok, "encode_batch_fast", None) or self._tok.encode_batch  # _fast: no offsets (tokenizers 0.20)
        return [len(e.ids) for e in encode(list(texts), add_special_tokens=False)]


def load_tokenizer(path_or_id: str | None) -> LocalTokenizer | None:
    """The tokenizer `--embed-tokenizer` names, loaded as vLLM loads it where transformers is
    installed (so its counts are `/tokenize`'s), or None when none was given."""
    return LocalTokenizer(path_or_id, transformers=True) if path_or_id else None


class CountStore:
    """A run's paid token counts, by digest of (`identity`, text): read from `path` when made,
    each new count appended the moment it is answered (files.AppendLog: one write a line, so a
    kill -9 tears at most the last line, which is skipped). `path` None keeps them in memory
    (a run without a folder). Texts asked by several samples at once are asked once."""

    def __init__(self, path: Path | None, identity: str) -> None:
        self.path = path
        self._salt = orjson.dumps(identity) + b"\x00"
        self._known: dict[str, int] = {}
        self._pending: dict[str, asyncio.Future[int | None]] = {}
        self._log = AppendLog(path) if path is not None else None
        self.asked = 0  # counts paid by this process
        if path is not None:
            self._read(path)

    def _read(self, path: Path) -> None:
        try:
            raw = path.read_bytes()
        except OSError:
            return
        for line in raw.split(b"\n")[:-1]:  # the last piece is b"" or a torn line
            try:
                entry = orjson.loads(line)
                key, n = entry["k"], entry["n"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(key, str) and isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                self._known[key] = n

    def __len__(self) -> int:
        return len(self._known)

    def digest(self, text: str) -> str:
        """The key of a text's count."""
        return hashlib.sha256(self._salt + text.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    async def counts(self, texts: Sequence[str], ask: Callable[[str], Awaitable[int]]) -> dict[str, int]:
        """Every distinct text's count: stored, being asked by another sample (awaited), or
        `ask(text)`, stored as soon as it is answered. A failed ask raises (nothing stored)."""
        out: dict[str, int] = {}
        mine: list[tuple[str, str]] = []
        waits: list[tuple[str, asyncio.Future[int | None]]] = []
        loop = asyncio.get_running_loop()
        for text in dict.fromkeys(texts):
            key = self.digest(text)
            if key in self._known:
                out[text] = self._known[key]
            elif key in self._pending:
                waits.append((text, self._pending[key]))
            else:
                self._pending[key] = loop.create_future()
                mine.append((text, key))

        async def one(text: str, key: str) -> int:
            future = self._pending[key]
            try:
                n = await ask(text)
                self._known[key] = n
                self.asked += 1
                if self._log is not None:
                    self._log.append({"k": key, "n": n})
                future.set_result(n)
                return n
            finally:
                if not future.done():
                    future.set_result(None)  # failed or cancelled: whoever waits asks itself
                self._pending.pop(key, None)

        async def waited(text: str, future: asyncio.Future[int | None]) -> int:
            n = await asyncio.shield(future)
            if n is not None:
                return n
            got = await self.counts([text], ask)
            return got[text]

        got = await gather_all([*(one(t, k) for t, k in mine), *(waited(t, f) for t, f in waits)])
        out.update(zip([t for t, _ in mine] + [t for t, _ in waits], got))
        return out

    def close(self) -> None:
        """Close the file (reopened on the next append)."""
        if self._log is not None:
            self._log.close()
