"""Embeddings and token counts from a served embedding model (vLLM), for retrieval baselines.

The requests, as vLLM's OpenAI-compatible server takes them (`vllm serve openai/clip-vit-base-patch32
--runner pooling`; SigLIP also needs a plain `--chat-template`, see vLLM's
examples/pooling/embed/vision_embedding_online.py):

- Text, batched: `POST {base}/embeddings` with
  `{"model": M, "input": ["t1", "t2", ...], "encoding_format": "float", "truncate_prompt_tokens": -1}`,
  answered `{"data": [{"index": i, "embedding": [...]}, ...]}`. `truncate_prompt_tokens: -1`
  (vLLM's extra parameter) truncates to the model's length, as the authors' retriever truncates
  (CLIP's text tower takes 77 tokens); `truncate_prompt_tokens=None` leaves it out.
- An image, one per request: `POST {base}/embeddings` with
  `{"model": M, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url":
  {"url": "data:image/jpeg;base64,..."}}]}], "encoding_format": "float"}` (vLLM's chat-style
  embedding request: one `messages` list is one prompt), answered like the text request.
- Token counts, one text per request: `POST {root}/tokenize` with
  `{"model": M, "prompt": "...", "add_special_tokens": false}`, answered `{"count": n, ...}`;
  `root` is the base URL without its trailing `/v1`. The empty string counts 0 without a request,
  and with the model's own tokenizer given (`tokenizer`, loaded by transformers as vLLM loads it,
  else its tokenizer.json) no text is asked at all: `check()` compares its counts with the
  server's on a few probes first.

Vectors come back L2-normalised (float32), so a dot product is the cosine. Requests go through
the HTTP layer (models/http.py), under the run's policy: `--timeout` per attempt, retries, the wait
cap, failover, scrubbing, the error kinds; requests in flight are bounded per endpoint
(`max_concurrency` embedding requests, `tokenize_concurrency` /tokenize requests).

An answer is checked before it is used, and one that is not what was asked for is retried like a
5xx and then fails as `backend_error` ("invalid_response: ..."), never as a fault of needlepoint:
vectors must be non-empty lists of finite numbers, all as long as the probe's (the vector of
`check()`, else of the first answer); a token count a whole number, not negative, equal to the
number of tokens the answer lists, and not more than the text can hold. An all-zero vector is
valid but warned about once (on stderr): it scores 0 against everything.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import sys
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import orjson

from needlepoint.core.aio import gather_all
from needlepoint.core.conversation import ImageRef
from needlepoint.core.endpoints import pasted_route_advice
from needlepoint.core.errors import DataError, RequestError
from needlepoint.core.images import base64_jpeg
from needlepoint.models.http import InvalidAnswer, RetryPolicy, Transport, Unreachable, endpoint, head, load_json
from needlepoint.models.tokencount import LocalTokenizer

__all__ = ["EMBEDDINGS", "TOKENIZE", "Embedder", "ServedEmbedder", "normalise", "tokenize_url"]

EMBEDDINGS = "embeddings"  # the lanes of the two kinds of request (their bounds in flight, the wait note)
TOKENIZE = "token counts"

TOKENIZER_PROBES = (
    "summarize:",
    " The penguin sings loudly at dawn, 12,345 times.\n\nAlpha notes follow here.",
    "Ünïcödé — naïve café, 東京 and emoji 🐧!",
)
"""Texts a local tokenizer must count as the server does before it replaces `/tokenize`."""


class Embedder(Protocol):
    """What a retrieval solver needs of an embedding model, served or loaded locally."""

    name: str

    async def check(self) -> None:
        """Raise DataError (one sentence) when the model cannot serve embeddings and counts."""
        ...

    async def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised row per text, in order."""
        ...

    async def embed_images(self, images: Sequence[ImageRef]) -> np.ndarray:
        """One L2-normalised row per image, in order."""
        ...

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Each text's token count without special tokens."""
        ...

    async def aclose(self) -> None:
        """Release connections or the loaded model."""
        ...


def normalise(vectors: Any) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), as float32. A row whose largest component
    is beyond float32's comfortable range (over 1e18, or under 1e-18 but not zero) is first divided
    by that component, so that it neither overflows nor vanishes; other rows are computed as always."""
    m = np.asarray(vectors, dtype=np.float64)
    if m.ndim != 2:
        m = m.reshape(len(m), -1) if m.size else np.zeros((0, 0), dtype=np.float64)
    if m.size:
        peak = np.abs(m).max(axis=1, keepdims=True)
        odd = (peak > 1e18) | ((peak < 1e-18) & (peak > 0))
        if odd.any():
            m = np.where(odd, m / np.where(peak > 0, peak, 1.0), m)
    m32 = m.astype(np.float32)
    norms = np.linalg.norm(m32, axis=1, keepdims=True)
    return m32 / np.where(norms > 0, norms, 1.0)


def tokenize_url(base_url: str) -> str:
    """vLLM's `/tokenize` for an API base URL: at the server root, beside `/v1`."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit(parts._replace(path=path + "/tokenize"))


def _embeddings_url(base: str) -> str:
    return endpoint(base, "embeddings")


def _number(value: Any) -> str:
    """A number as a message shows it: whole numbers of more than 15 digits in short."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return f"{float(value):.3g}" if abs(value) < 10**308 else f"a number of {len(str(abs(value)))} digits"
    return json.dumps(value) if isinstance(value, (bool, type(None))) else repr(value)[:40]


def token_limit(text: str) -> int:
    """The most tokens any tokenizer can make of `text` without special tokens: one a byte of its
    NFKC form (normalisation may lengthen it; byte fallback splits a character into its bytes),
    doubled for safety, plus a few (a leading-space marker)."""
    return 2 * len(unicodedata.normalize("NFKC", text).encode("utf-8")) + 8


def token_count(data: Any, text: str) -> int:
    """The count of a `/tokenize` answer for `text`, or InvalidAnswer naming what is wrong. vLLM
    answers `{"count": n, "max_model_len": m, "tokens": [...]}`; the count may exceed
    `max_model_len` (vLLM does not truncate a /tokenize prompt), so the text bounds it."""
    if not isinstance(data, dict):
        raise InvalidAnswer(f"invalid_response: not a /tokenize answer: {str(data)[:200]}", reason="sent no token count")
    tokens = data.get("tokens")
    count = data.get("count", len(tokens) if isinstance(tokens, list) else None)
    if "count" not in data and not isinstance(tokens, list):
        raise InvalidAnswer(
            f"invalid_response: a /tokenize answer without a count: {str(data)[:200]}", reason="sent no token count"
        )
    problem = None
    if not isinstance(count, int) or isinstance(count, bool):  # 1.5, true, null, "3"
        problem = f"a token count of {_number(count)}, not a whole number"
    elif count < 0:
        problem = f"a negative token count ({_number(count)})"
    elif isinstance(tokens, list) and len(tokens) != count:
        problem = f"a token count of {_number(count)} beside a list of {len(tokens)} tokens"
    elif count > token_limit(text):
        problem = f"a token count of {_number(count)} for a text of {len(text)} characters"
    if problem is not None:
        raise InvalidAnswer(f"invalid_response: /tokenize answered {problem}", reason="sent a bad token count")
    assert isinstance(count, int)
    return count


def _finite(x: float) -> bool:
    """Whether a JSON number is finite as a float (a whole number may be too large for one)."""
    return math.isfinite(x) if isinstance(x, float) else abs(x) < 1e308


def _vector(item: Any, where: str) -> list[float]:
    """One `embedding` of an answer as floats, or InvalidAnswer (`where`: "vector 3" or so)."""
    vec = item.get("embedding") if isinstance(item, dict) else None
    if not isinstance(vec, list):
        raise InvalidAnswer(f"invalid_response: {where} is not a list of numbers: {str(item)[:120]}", reason="sent no vectors")
    if not vec:
        raise InvalidAnswer(f"invalid_response: {where} has no numbers (a zero-length vector)", reason="sent an empty vector")
    if not set(map(type, vec)) <= {float, int}:
        bad = next(x for x in vec if type(x) not in (float, int))
        raise InvalidAnswer(f"invalid_response: {where} holds {_number(bad)}, not a number", reason="sent a bad vector")
    try:  # one pass in numpy: a long answer holds hundreds of thousands of numbers
        finite = bool(np.isfinite(np.asarray(vec, dtype=np.float64)).all())
    except OverflowError:  # a whole number beyond float range
        finite = False
    if not finite:
        bad = next(x for x in vec if not _finite(x))
        raise InvalidAnswer(f"invalid_response: {where} holds {_number(bad)}, not a finite number", reason="sent a bad vector")
    return vec


def _all_vectors(items: list[Any]) -> np.ndarray | None:
    """Every `embedding` of an answer as one float64 matrix, in one pass, when all are non-empty
    lists of finite numbers (no booleans) of one length: the common answer, checked without a
    Python step per vector. None otherwise; then `_vector` checks each and names what is wrong."""
    try:
        vecs = [it["embedding"] for it in items]
    except (TypeError, KeyError):
        return None
    if not vecs or not all(type(v) is list and v for v in vecs) or len({len(v) for v in vecs}) != 1:
        return None
    if not set(map(type, itertools.chain.from_iterable(vecs))) <= {float, int}:
        return None
    try:
        m = np.array(vecs, dtype=np.float64)
    except (ValueError, TypeError, OverflowError):
        return None
    return m if bool(np.isfinite(m).all()) else None


class ServedEmbedder:
    """An embedding model behind vLLM's OpenAI-compatible server (see the module docstring).

    `timeout_s` bounds each attempt; by default the policy's (`--timeout`, RetryPolicy.timeout_s).
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        batch_size: int = 64,
        max_concurrency: int = 8,
        timeout_s: float | None = None,
        truncate_prompt_tokens: int | None = -1,
        tokenize_concurrency: int = 64,
        tokenizer: LocalTokenizer | None = None,
    ) -> None:
        if batch_size < 1 or max_concurrency < 1 or tokenize_concurrency < 1:
            raise DataError("the embedding batch size and concurrency must be at least 1")
        self.name = name
        self.base_url = base_url
        # /tokenize is cheap and takes one text per request: a long document asks it a thousand times.
        self.transport = Transport([base_url], api_key, retry, {EMBEDDINGS: max_concurrency, TOKENIZE: tokenize_concurrency})
        self.batch_size = batch_size
        self.timeout_s = timeout_s if timeout_s is not None else self.transport.retry.timeout_s
        self.truncate_prompt_tokens = truncate_prompt_tokens
        self.dim: int | None = None  # the vectors' length: the probe's (check), else the first answer's
        self._dim_from = "the first answer"
        self._zero_warned = False
        self.tokenizer = tokenizer  # the model's own, when given: counts without requests

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy (the HTTP layer's)."""
        return self.transport.retry

    def scrub(self, text: str) -> str:
        """`text` without the API key or URL credentials."""
        return self.transport.scrub(text)

    def wait_note(self) -> str | None:
        """What the run waits for from this server, if anything (Transport.wait_note)."""
        return self.transport.wait_note()

    def endpoint_stats(self) -> list[dict[str, Any]]:
        """Per endpoint: its URL (redacted), weight, requests sent (each attempt) and errors."""
        return self.transport.endpoint_stats()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.transport.aclose()

    async def _post(self, route: Callable[[str], str], lane: str, payload: dict[str, Any], parse: Callable[[Any], Any]) -> Any:
        """POST JSON under the policy; `parse(json)` of the answer, or RequestError."""
        try:  # orjson: an image request carries megabytes of base64, which the standard writer scans slowly
            body = orjson.dumps(payload)
        except TypeError:  # what orjson does not write (a lone surrogate...): the standard writer decides
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        floats = lane == EMBEDDINGS  # vectors: read fast (load_json)
        got = await self.transport.post(route, body, lambda raw: parse(load_json(raw, floats=floats)), lane, self.timeout_s)
        return got.value

    # --- the endpoint check --------------------------------------------------------------------

    async def check(self, timeout_s: float = 10.0) -> None:
        """Raise DataError in one sentence when the URL carries an endpoint's path, the server
        cannot be reached, has no `/tokenize`, or does not embed text; the probe's vector fixes the
        length every later vector must have."""
        pasted = pasted_route_advice(self.base_url, "--embed-url")
        if pasted is not None:
            raise DataError(pasted)
        (ep,) = self.transport.endpoints
        where = ep.label
        probe = json.dumps({"model": self.name, "prompt": "summarize:", "add_special_tokens": False}).encode()
        try:
            status, raw = await self.transport.probe(tokenize_url, ep, probe, timeout_s)
        except Unreachable as exc:
            raise DataError(f"cannot reach the embedding server {where} ({exc}); start it or fix --embed-url") from None
        if status in (401, 403):
            raise DataError(
                f"the embedding server {where} refused the key (http_{status}); set NEEDLEPOINT_EMBED_API_KEY "
                "(or OPENAI_API_KEY) to the key it expects"
            )
        if status == 404 and b"does not exist" in raw:
            raise DataError(
                self.scrub(
                    f"the embedding server {where} does not serve {self.name!r} ({head(raw, 160)}); "
                    "pass the name it serves to --embed-model"
                )
            )
        if status in (404, 405):
            raise DataError(
                f"the embedding server {where} has no /tokenize endpoint, which counts the tokens of the text pieces; "
                "serve the embedding model with vLLM, or use --embed-backend transformers"
            )
        try:
            if status != 200:
                raise InvalidAnswer(f"http_{status}")
            token_count(load_json(raw), "summarize:")
        except InvalidAnswer:
            raise DataError(
                self.scrub(
                    f"the embedding server {where} answered /tokenize with http_{status} ({head(raw, 120)}); "
                    f"check that it serves {self.name!r} (--embed-model)"
                )
            ) from None
        try:
            (vector,) = await self._embed_batch(["summarize:"])
        except RequestError as exc:
            raise DataError(
                self.scrub(
                    f"the embedding server {where} does not embed text with {self.name!r} ({exc}); check --embed-model and --embed-url"
                )
            ) from None
        self.dim, self._dim_from = len(vector), "the probe"
        if self.tokenizer is not None:
            await self._check_tokenizer(self.tokenizer)

    # --- answers -------------------------------------------------------------------------------

    def _vectors(self, data: Any, expected: int, what: str) -> np.ndarray:
        """The vectors of an embeddings answer for `expected` inputs, in input order, each checked
        (module docstring); InvalidAnswer naming what is wrong."""
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise InvalidAnswer(f"invalid_response: not an embeddings answer: {str(data)[:200]}", reason="sent no vectors")
        if len(items) != expected:
            raise InvalidAnswer(f"invalid_response: {len(items)} vectors for {expected} inputs", reason="sent too few vectors")
        indices: list[Any] = [it.get("index") if isinstance(it, dict) else None for it in items]
        if all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
            if sorted(indices) != list(range(expected)):
                raise InvalidAnswer(
                    f"invalid_response: vector indices {indices[:10]} for {expected} inputs", reason="sent bad indices"
                )
            items = [items[k] for k in sorted(range(expected), key=lambda k: indices[k])]
        elif any(i is not None for i in indices):
            raise InvalidAnswer(
                f"invalid_response: vector indices {indices[:10]} are not whole numbers", reason="sent bad indices"
            )
        matrix = _all_vectors(items)
        if matrix is None:
            vectors = [_vector(it, f"vector {k}" if expected > 1 else "the vector") for k, it in enumerate(items)]
            lengths = sorted({len(v) for v in vectors})
        else:
            lengths = [matrix.shape[1]]
        if len(lengths) > 1:
            raise InvalidAnswer(
                f"invalid_response: ragged vectors of {' and '.join(map(str, lengths))} numbers in one answer",
                reason="sent ragged vectors",
            )
        if self.dim is not None and lengths[0] != self.dim:
            raise InvalidAnswer(
                f"invalid_response: vector of {lengths[0]} numbers where {self._dim_from} had {self.dim}",
                reason="sent vectors of another size",
            )
        self.dim = lengths[0]
        if matrix is None:
            matrix = np.array(vectors, dtype=np.float64)  # every vector checked above
        if not self._zero_warned and bool((~matrix.any(axis=1)).any()):
            self._zero_warned = True
            print(
                f"needlepoint: warning: the embedding server {self.transport.endpoints[0].label} answered an all-zero vector "
                f"for {what}; it scores 0 against every question (check the embedding model); said once",
                file=sys.stderr,
            )
        return matrix

    async def _embed_batch(self, texts: list[str]) -> np.ndarray:
        payload: dict[str, Any] = {"model": self.name, "input": texts, "encoding_format": "float"}
        if self.truncate_prompt_tokens is not None:
            payload["truncate_prompt_tokens"] = self.truncate_prompt_tokens
        vectors: np.ndarray = await self._post(
            _embeddings_url, EMBEDDINGS, payload, lambda d: self._vectors(d, len(texts), "a text")
        )
        return vectors

    async def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of texts (each distinct text once), in batches of `batch_size`, concurrently."""
        unique = list(dict.fromkeys(texts))
        batches = [unique[i : i + self.batch_size] for i in range(0, len(unique), self.batch_size)]
        got = await gather_all([self._embed_batch(b) for b in batches])
        by_text = {t: v for batch, vecs in zip(batches, got) for t, v in zip(batch, vecs)}
        return normalise([by_text[t] for t in texts]) if texts else np.zeros((0, 0), dtype=np.float32)

    async def _embed_image(self, ref: ImageRef) -> np.ndarray:
        b64 = await asyncio.get_running_loop().run_in_executor(None, base64_jpeg, ref)
        url = "data:image/jpeg;base64," + b64.decode("ascii")
        payload = {
            "model": self.name,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
            "encoding_format": "float",
        }
        vectors: np.ndarray = await self._post(
            _embeddings_url, EMBEDDINGS, payload, lambda d: self._vectors(d, 1, f"image {ref.key}")
        )
        vector: np.ndarray = vectors[0]
        return vector

    async def embed_images(self, images: Sequence[ImageRef]) -> np.ndarray:
        """Embeddings of images, one request each, concurrently (each distinct image once)."""
        unique = list(dict.fromkeys(images))
        got = await gather_all([self._embed_image(im) for im in unique])
        by_ref = dict(zip(unique, got))
        return normalise([by_ref[im] for im in images]) if images else np.zeros((0, 0), dtype=np.float32)

    async def _count(self, text: str) -> int:
        payload = {"model": self.name, "prompt": text, "add_special_tokens": False}
        count: int = await self._post(tokenize_url, TOKENIZE, payload, lambda d: token_count(d, text))
        return count

    def known_counts(self, texts: Sequence[str]) -> dict[str, int]:
        """The counts of `texts` that need no request: the empty text's, and every text's when the
        model's tokenizer is loaded here. (Paid counts are shared between samples by the run's
        store, tokencount.CountStore, which is on disk the moment each is answered, so a run killed
        and resumed never asks a text it was answered for again.)"""
        known: dict[str, int] = {"": 0}
        missing = [t for t in dict.fromkeys(texts) if t]
        if self.tokenizer is not None and missing:
            known.update(zip(missing, self.tokenizer.count(missing)))
        return known

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token counts without special tokens: one `/tokenize` request per distinct text not
        known already (`known_counts`)."""
        counts = self.known_counts(texts)
        unique = [t for t in dict.fromkeys(texts) if t not in counts]
        counts.update(zip(unique, await gather_all([self._count(t) for t in unique])))
        return [counts[t] for t in texts]

    async def _check_tokenizer(self, tokenizer: LocalTokenizer) -> None:
        """DataError unless the local tokenizer counts the probes as the server's `/tokenize` does."""
        for probe in TOKENIZER_PROBES:
            try:
                served = await self._count(probe)
            except RequestError as exc:
                raise DataError(
                    self.scrub(f"the embedding server {self.base_url} did not count a probe ({exc}); check it")
                ) from None
            (local,) = tokenizer.count([probe])
            if local != served:
                raise DataError(
                    f"the tokenizer {tokenizer.source} counts {local} tokens in {probe!r} where the server's /tokenize "
                    f"counts {served}; pass {self.name!r}'s own tokenizer to --embed-tokenizer, or drop the flag"
                )
