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
  `root` is the base URL without its trailing `/v1`. The empty string counts 0 without a request.

Vectors come back L2-normalised (float32), so a dot product is the cosine. Retries follow the
chat client's RetryPolicy (backoff with full jitter on connection errors, timeouts, 429 and 5xx,
Retry-After honoured up to `max_wait_s`; other 4xx are not retried and are classified as the chat
client classifies them); requests in flight are bounded per embedder (`max_concurrency` embedding
requests, `tokenize_concurrency` /tokenize requests); error messages are scrubbed
of the API key and URL credentials.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import numpy as np

from needlepoint.conversation import ImageRef
from needlepoint.errors import DataError
from needlepoint.images import base64_jpeg
from needlepoint.jsonfind import loads as json_loads
from needlepoint.models.openai_compat import RetryPolicy, classify_rejection, endpoint, retry_after_s
from needlepoint.redact import redact_url, scrub, url_secrets
from needlepoint.status import BACKEND_ERROR

__all__ = ["Embedder", "EmbeddingError", "ServedEmbedder", "normalise", "tokenize_url"]


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


class EmbeddingError(Exception):
    """A request that failed for good; `kind` is a status.REQUEST_FAILURES value."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Retry(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def normalise(vectors: Any) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), as float32."""
    m = np.asarray(vectors, dtype=np.float32)
    if m.ndim != 2:
        m = m.reshape(len(m), -1) if m.size else np.zeros((0, 0), dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms > 0, norms, 1.0)


def tokenize_url(base_url: str) -> str:
    """vLLM's `/tokenize` for an API base URL: at the server root, beside `/v1`."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit(parts._replace(path=path + "/tokenize"))


def _head(raw: bytes, n: int = 200) -> str:
    return raw[:n].decode("utf-8", "replace")


def _count_of(data: Any) -> int:
    if isinstance(data, dict):
        if isinstance(data.get("count"), int):
            return int(data["count"])
        if isinstance(data.get("tokens"), list):
            return len(data["tokens"])
    raise ValueError(f"not a /tokenize answer: {str(data)[:200]}")


async def _all(coros: Sequence[Any]) -> list[Any]:
    """Await every coroutine; on the first failure cancel the rest and raise it."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _vectors(data: Any, expected: int) -> list[list[float]]:
    items = sorted(data["data"], key=lambda d: d.get("index", 0))
    if len(items) != expected:
        raise ValueError(f"{len(items)} embeddings for {expected} inputs")
    return [list(map(float, d["embedding"])) for d in items]


class ServedEmbedder:
    """An embedding model behind vLLM's OpenAI-compatible server (see the module docstring)."""

    def __init__(
        self,
        name: str,
        base_url: str,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        batch_size: int = 64,
        max_concurrency: int = 8,
        timeout_s: float = 120.0,
        truncate_prompt_tokens: int | None = -1,
        tokenize_concurrency: int = 64,
    ) -> None:
        if batch_size < 1 or max_concurrency < 1 or tokenize_concurrency < 1:
            raise DataError("the embedding batch size and concurrency must be at least 1")
        self.name = name
        self.base_url = base_url
        self._embeddings_url = endpoint(base_url, "embeddings")
        self._tokenize_url = tokenize_url(base_url)
        self._headers = {"Content-Type": "application/json"}
        self._secrets = [api_key, *url_secrets(base_url)]
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.retry = retry or RetryPolicy()
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.truncate_prompt_tokens = truncate_prompt_tokens
        self._gate = asyncio.Semaphore(max_concurrency)
        # /tokenize is cheap and takes one text per request: a long document asks it a thousand times.
        self._count_gate = asyncio.Semaphore(tokenize_concurrency)
        self._session: aiohttp.ClientSession | None = None

    def scrub(self, text: str) -> str:
        """`text` without the API key or URL credentials."""
        return scrub(text, self._secrets)

    async def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), headers=self._headers)
        return self._session

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _once(self, url: str, body: bytes, timeout_s: float) -> tuple[int, bytes, float | None]:
        session = await self._client()
        async with self._count_gate if url == self._tokenize_url else self._gate:
            async with session.post(url, data=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                return resp.status, await resp.read(), retry_after_s(resp.headers.get("Retry-After"))

    async def _post(self, url: str, payload: dict[str, Any]) -> Any:
        """POST JSON with the retry policy; the parsed answer, or EmbeddingError."""
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        last = ""
        for attempt in range(self.retry.max_retries + 1):
            retry_after = None
            try:
                status, raw, retry_after = await self._once(url, body, self.timeout_s)
                if status == 429 or status >= 500:
                    raise _Retry(f"http_{status}: {_head(raw)}", retry_after)
                if status != 200:
                    kind = classify_rejection(status, _head(raw, 2000))
                    raise EmbeddingError(kind, self.scrub(f"http_{status} from {redact_url(url)}: {_head(raw, 500)}"))
                try:
                    return json_loads(raw)
                except ValueError:
                    raise _Retry(f"invalid_response: not JSON: {_head(raw)}") from None
            except asyncio.TimeoutError:
                last = f"timeout: no answer within {self.timeout_s:g} s"
            except aiohttp.ClientError as exc:
                last = f"connection: {exc.__class__.__name__}: {exc}"
            except _Retry as exc:
                last, retry_after = str(exc), exc.retry_after
            if retry_after is not None and retry_after > self.retry.max_wait_s:
                message = (
                    f"{last}: the server asked to wait {retry_after:.0f} s, more than {self.retry.max_wait_s:g} s; not waited for"
                )
                raise EmbeddingError(BACKEND_ERROR, self.scrub(message))
            if attempt < self.retry.max_retries:
                await asyncio.sleep(self.retry.delay(attempt, retry_after))
        message = f"{last} (gave up after {self.retry.max_retries + 1} attempts at {redact_url(url)})"
        raise EmbeddingError(BACKEND_ERROR, self.scrub(message))

    async def check(self, timeout_s: float = 10.0) -> None:
        """Raise DataError in one sentence when the server cannot be reached, has no `/tokenize`,
        or does not embed text."""
        where = redact_url(self.base_url)
        probe = json.dumps({"model": self.name, "prompt": "summarize:", "add_special_tokens": False}).encode()
        try:
            status, raw, _ = await self._once(self._tokenize_url, probe, timeout_s)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            reason = exc.__class__.__name__ if isinstance(exc, asyncio.TimeoutError) else str(exc) or exc.__class__.__name__
            raise DataError(
                self.scrub(f"cannot reach the embedding server {where} ({reason}); start it or fix --embed-url")
            ) from None
        if status in (401, 403):
            raise DataError(
                f"the embedding server {where} refused the key (http_{status}); set NEEDLEPOINT_EMBED_API_KEY "
                "(or OPENAI_API_KEY) to the key it expects"
            )
        if status == 404 and b"does not exist" in raw:
            raise DataError(
                self.scrub(
                    f"the embedding server {where} does not serve {self.name!r} ({_head(raw, 160)}); "
                    "pass the name it serves to --embed-model"
                )
            )
        if status in (404, 405):
            raise DataError(
                f"the embedding server {where} has no /tokenize endpoint, which counts the tokens of the text pieces; "
                "serve the embedding model with vLLM, or use --embed-backend transformers"
            )
        try:
            _count_of(json_loads(raw) if status == 200 else None)
        except ValueError:
            raise DataError(
                self.scrub(
                    f"the embedding server {where} answered /tokenize with http_{status} ({_head(raw, 120)}); "
                    f"check that it serves {self.name!r} (--embed-model)"
                )
            ) from None
        try:
            await self._embed_batch(["summarize:"])
        except (EmbeddingError, ValueError, KeyError, TypeError) as exc:
            raise DataError(
                self.scrub(
                    f"the embedding server {where} does not embed text with {self.name!r} ({exc}); check --embed-model and --embed-url"
                )
            ) from None

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.name, "input": texts, "encoding_format": "float"}
        if self.truncate_prompt_tokens is not None:
            payload["truncate_prompt_tokens"] = self.truncate_prompt_tokens
        return _vectors(await self._post(self._embeddings_url, payload), len(texts))

    async def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of texts (each distinct text once), in batches of `batch_size`, concurrently."""
        unique = list(dict.fromkeys(texts))
        batches = [unique[i : i + self.batch_size] for i in range(0, len(unique), self.batch_size)]
        try:
            got = await _all([self._embed_batch(b) for b in batches])
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(BACKEND_ERROR, self.scrub(f"invalid_response: not an embeddings answer ({exc})")) from None
        by_text = {t: v for batch, vecs in zip(batches, got) for t, v in zip(batch, vecs)}
        return normalise([by_text[t] for t in texts]) if texts else np.zeros((0, 0), dtype=np.float32)

    async def _embed_image(self, ref: ImageRef) -> list[float]:
        b64 = await asyncio.get_running_loop().run_in_executor(None, base64_jpeg, ref)
        url = "data:image/jpeg;base64," + b64.decode("ascii")
        payload = {
            "model": self.name,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
            "encoding_format": "float",
        }
        return _vectors(await self._post(self._embeddings_url, payload), 1)[0]

    async def embed_images(self, images: Sequence[ImageRef]) -> np.ndarray:
        """Embeddings of images, one request each, concurrently (each distinct image once)."""
        unique = list(dict.fromkeys(images))
        try:
            got = await _all([self._embed_image(im) for im in unique])
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(BACKEND_ERROR, self.scrub(f"invalid_response: not an embeddings answer ({exc})")) from None
        by_ref = dict(zip(unique, got))
        return normalise([by_ref[im] for im in images]) if images else np.zeros((0, 0), dtype=np.float32)

    async def _count(self, text: str) -> int:
        data = await self._post(self._tokenize_url, {"model": self.name, "prompt": text, "add_special_tokens": False})
        try:
            return _count_of(data)
        except ValueError as exc:
            raise EmbeddingError(BACKEND_ERROR, self.scrub(f"invalid_response: {exc}")) from None

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token counts without special tokens, one `/tokenize` request per distinct non-empty text."""
        unique = [t for t in dict.fromkeys(texts) if t]
        counts = dict(zip(unique, await _all([self._count(t) for t in unique])))
        counts[""] = 0
        return [counts[t] for t in texts]
