"""The client for OpenAI-compatible chat endpoints (vLLM, SGLang, LMDeploy, hosted APIs).

One concurrency gate lives in the runner; this module owns the one retry policy: exponential
backoff with full jitter on connection errors, timeouts, 429 and 5xx (Retry-After honoured), no
retry on other 4xx. Requests spread over several endpoints, each new request going to the one with
the fewest requests in flight.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from needlepoint.config import redact_url
from needlepoint.conversation import Conversation, Generation, ImageRef, Reply
from needlepoint.errors import DataError
from needlepoint.images import ImageCache, base64_jpeg, passes_through, read_small_image


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a failing request."""

    max_retries: int = 6
    base_s: float = 1.0
    cap_s: float = 60.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number `attempt` (0-based)."""
        jittered = random.uniform(0.0, min(self.cap_s, self.base_s * 2**attempt))
        return max(jittered, retry_after or 0.0)


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Final(Exception):
    pass


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


_TOKEN = secrets.token_hex(8)
_SLOT = re.compile(rb"@@np-image-" + _TOKEN.encode() + rb"-(\d+)@@")
DATA_URL_PREFIX = b"data:image/jpeg;base64,"


def message_payload(conversation: Conversation, url_for: Callable[[ImageRef, int], str]) -> list[dict[str, Any]]:
    """The `messages` array of a chat request; `url_for(image, i)` gives the i-th image's URL."""
    out: list[dict[str, Any]] = []
    index = 0
    for m in conversation.messages:
        if m.role != "user" or all(isinstance(p, str) for p in m.parts):
            out.append({"role": m.role, "content": m.text})
            continue
        content = []
        for p in m.parts:
            if isinstance(p, str):
                if p:
                    content.append({"type": "text", "text": p})
            else:
                content.append({"type": "image_url", "image_url": {"url": url_for(p, index)}})
                index += 1
        out.append({"role": m.role, "content": content})
    return out


def request_body(model: str, conversation: Conversation, generation: Generation, images_b64: Sequence[bytes]) -> bytes:
    """The JSON body of one chat-completions request, images given as base64 in order.

    The base64 is spliced in as bytes after the rest is serialised: it never needs JSON escaping,
    and scanning megabytes of it in json.dumps would be most of the cost of a request.
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": message_payload(conversation, lambda _, i: f"@@np-image-{_TOKEN}-{i}@@"),
    }
    for key in ("temperature", "top_p", "max_tokens", "seed"):
        value = getattr(generation, key)
        if value is not None:
            body[key] = value
    body.update(generation.extra)
    pieces = _SLOT.split(json.dumps(body, ensure_ascii=False).encode("utf-8"))
    for i in range(1, len(pieces), 2):
        pieces[i] = DATA_URL_PREFIX + images_b64[int(pieces[i])]
    return b"".join(pieces)


def endpoint(base_url: str, path: str) -> str:
    """`path` under an API base URL, keeping its query string (e.g. `?api-version=...`)."""
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + path))


class OpenAICompatModel:
    """A model served behind one or more `/v1/chat/completions` endpoints."""

    def __init__(
        self,
        name: str,
        api_urls: list[str],
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        reencode_images: bool = False,
        max_request_bytes: int | None = None,
    ) -> None:
        self.name = name
        self._bases = list(api_urls)
        self._urls = [endpoint(u, "chat/completions") for u in api_urls]
        self._in_flight = [0] * len(self._urls)
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.retry = retry or RetryPolicy()
        self.images = ImageCache()
        self.reencode_images = reencode_images
        self.max_request_bytes = max_request_bytes
        self._session: aiohttp.ClientSession | None = None

    async def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
                headers=self._headers,
            )
        return self._session

    async def aclose(self) -> None:
        """Close the connection pool and drop the image cache."""
        self.images.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _encode_images(self, conversation: Conversation) -> list[bytes]:
        """Base64 of each image of a conversation, in order, from the cache or freshly encoded."""
        loop = asyncio.get_running_loop()
        out = []
        for ref in (im for m in conversation.messages for im in m.images):
            b64 = self.images.get(ref)
            if b64 is None:
                # Files are read on the loop (page cache, cheap), and so are loaded bytes already
                # in memory (`cached()`: parquet rows read ahead); other loads (a parquet read, a
                # merged canvas, a big file decoded from disk) and transcoding run in a worker thread.
                peek = getattr(ref.loader, "cached", None)
                data = read_small_image(ref) if ref.loader is None else peek() if peek is not None else None
                if data is not None and passes_through(data, ref, self.reencode_images):
                    b64 = base64.b64encode(data)
                else:
                    b64 = await loop.run_in_executor(None, base64_jpeg, ref, self.reencode_images, data)
                self.images.put(ref, b64)
            out.append(b64)
        return out

    async def check_reachable(self, timeout_s: float = 10.0) -> None:
        """Raise DataError when an endpoint cannot be connected to at all (any HTTP answer will do)."""
        session = await self._client()
        for base in self._bases:
            try:
                async with session.get(endpoint(base, "models"), timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                    await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                reason = exc.__class__.__name__ if isinstance(exc, asyncio.TimeoutError) else str(exc) or exc.__class__.__name__
                raise DataError(f"cannot reach {redact_url(base)} ({reason}); start the server or fix --api-url") from None

    async def complete(self, conversation: Conversation, generation: Generation) -> Reply:
        """Send one conversation, retrying as the policy says; errors come back in Reply.error.

        Image problems and requests over the byte budget raise DataError: input faults, not sent.
        """
        body = request_body(self.name, conversation, generation, await self._encode_images(conversation))
        if self.max_request_bytes is not None and len(body) > self.max_request_bytes:
            raise DataError(
                f"request_too_large: {len(body)} bytes exceed --max-request-bytes {self.max_request_bytes}; "
                "not sent: downscale with --max-image-side or raise the budget"
            )
        session = await self._client()
        start = time.perf_counter()
        last_error = ""
        for attempt in range(self.retry.max_retries + 1):
            idx = min(range(len(self._urls)), key=self._in_flight.__getitem__)
            self._in_flight[idx] += 1
            try:
                reply = await self._post(session, self._urls[idx], body, generation.timeout_s)
                reply.latency_s = time.perf_counter() - start
                reply.attempts = attempt + 1
                reply.request_bytes = len(body)
                return reply
            except _Final as exc:
                return Reply(error=str(exc), attempts=attempt + 1, latency_s=time.perf_counter() - start, request_bytes=len(body))
            except _Retryable as exc:
                last_error = str(exc)
                if attempt < self.retry.max_retries:
                    await asyncio.sleep(self.retry.delay(attempt, exc.retry_after))
            finally:
                self._in_flight[idx] -= 1
        return Reply(
            error=f"{last_error} (gave up after {self.retry.max_retries + 1} attempts)",
            attempts=self.retry.max_retries + 1,
            latency_s=time.perf_counter() - start,
            request_bytes=len(body),
        )

    async def _post(self, session: aiohttp.ClientSession, url: str, body: bytes, timeout_s: float) -> Reply:
        try:
            async with session.post(url, data=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                raw = await resp.read()
                status = resp.status
                retry_after = _retry_after(resp.headers.get("Retry-After"))
        except asyncio.TimeoutError:
            raise _Retryable(f"timeout: no answer within {timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise _Retryable(f"connection: {exc.__class__.__name__}: {exc}") from None
        if status == 429 or status >= 500:
            raise _Retryable(f"http_{status}: {raw[:200].decode('utf-8', 'replace')}", retry_after)
        if status != 200:
            raise _Final(f"http_{status}: {raw[:500].decode('utf-8', 'replace')}")
        try:
            data = json.loads(raw)
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise _Retryable(f"invalid_response: not a chat completion: {raw[:200].decode('utf-8', 'replace')}") from None
        return Reply(text=text, finish_reason=choice.get("finish_reason"), usage=data.get("usage"))
