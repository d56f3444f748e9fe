"""The one HTTP layer under every client a run makes (chat, localizer, embeddings, `/tokenize`).

It owns what every request shares: the per-attempt timeout, the retry policy (exponential backoff
with full jitter on connection errors, timeouts, 429, 5xx and answers that are not what was asked
for; Retry-After honoured up to a cap, `max_wait_s`; other 4xx are not retried and are classified
into the kinds of `status`), failover over several endpoints (each request goes to the healthy one
with the fewest requests in flight per unit of weight, `URL#weight`; a failed attempt moves to
another; an endpoint that fails several times in a row is out of rotation for a cool-down), bounds
on requests in flight per endpoint and lane, the note of what the run waits for, and scrubbing
credentials out of every message. A request that fails for good raises `errors.RequestError`.

A client gives each request a `route` (an endpoint's base URL to the URL posted to) and a `parse`
of the answer's body that returns the value or raises `InvalidAnswer` (retried, as a 5xx is).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import orjson
from aiohttp.payload import Payload

from needlepoint.core import status
from needlepoint.core.endpoints import split_weight
from needlepoint.core.errors import RequestError
from needlepoint.core.jsonl import read_back
from needlepoint.core.numeric import added_usage
from needlepoint.core.redact import hide, redact_url, scrub, url_secrets

__all__ = [
    "Answered",
    "Endpoint",
    "InvalidAnswer",
    "RetryPolicy",
    "Transport",
    "Unreachable",
    "classify_rejection",
    "endpoint",
    "load_json",
    "retry_after_s",
]

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 180.0  # seconds per attempt, as `--timeout` (Generation.timeout_s) defaults
SLOW_S = 30.0  # a request in flight this long is named by `wait_note`


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait for an answer, and how often and how patiently to retry a failing request.

    `timeout_s` bounds each attempt (`--timeout`; a chat request may pass its own). `max_wait_s`
    caps every wait: a server asking (Retry-After) for longer fails the request at once rather than
    stalling the run. `fail_limit` consecutive transient failures take an endpoint out of rotation
    for `cooldown_s` seconds (when there is another to use).
    """

    max_retries: int = 6
    base_s: float = 1.0
    cap_s: float = 60.0
    max_wait_s: float = 300.0
    fail_limit: int = 3
    cooldown_s: float = 30.0
    timeout_s: float = DEFAULT_TIMEOUT_S

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number `attempt` (0-based)."""
        jittered = random.uniform(0.0, min(self.cap_s, self.base_s * 2**attempt, self.max_wait_s))
        return max(jittered, retry_after or 0.0)


class InvalidAnswer(Exception):
    """An answer (HTTP 200) that is not what was asked for: retried, and after the last attempt a
    `backend_error` whose message starts "invalid_response:". `reason` is a few words for the
    progress line."""

    def __init__(self, message: str, reason: str = "sent an invalid answer", usage: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.usage = usage  # what the answer said it used: billed, though no answer


class Unreachable(Exception):
    """A probe (`Transport.probe`) got no answer; the message is the reason in a few words."""


class _Retryable(Exception):
    def __init__(
        self,
        message: str,
        retry_after: float | None = None,
        unhealthy: bool = True,
        reason: str = "",
        usage: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.unhealthy = unhealthy  # counts against the endpoint's health (not so for 429)
        self.reason = reason  # a few words for the progress line, e.g. "answered 429"
        self.usage = usage  # an invalid answer's usage (InvalidAnswer.usage)


class _Final(Exception):
    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def retry_after_s(value: str | None) -> float | None:
    """Seconds a Retry-After header asks for (a number or an HTTP date), never negative; None if absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
        return max(0.0, seconds) if seconds == seconds else None
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


_CONTEXT = re.compile(
    r"maximum context length|maximum model length|context length (is|of)|too long and exceeds|exceeds the model'?s? (context|maximum)",
    re.I,
)
_IMAGES = re.compile(r"at most \d+ image|image\(s\) may be provided|limit_mm_per_prompt|too many images", re.I)


def error_message(body: str | bytes) -> str:
    """The server's message in an error answer: OpenAI's and vLLM's `{"error": {"message": ...}}`
    (or a top-level `message`), else the body as text."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            inner = data.get("error")
            err: dict[str, Any] = inner if isinstance(inner, dict) else data
            return str(err.get("message") or text)
    except (ValueError, RecursionError):
        pass
    return text


def classify_rejection(http_status: int, body: str) -> str:
    """The status kind of a non-retried HTTP answer: the server's error message decides whether the
    prompt was too long or had too many images; any other 4xx is a rejected request."""
    message = error_message(body)
    if _CONTEXT.search(message):
        return status.CONTEXT_TOO_LONG
    if _IMAGES.search(message):
        return status.TOO_MANY_IMAGES
    return status.REQUEST_REJECTED


MAX_ANSWER_BYTES = 64 << 20  # an answer's body, decompressed: a chat answer is kilobytes; a hostile server's gigabytes


async def read_answer(resp: aiohttp.ClientResponse, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """An answer's body, read to at most `limit` bytes after decompression; InvalidAnswer past it
    (a server answering gigabytes, or a small gzip body that expands to them, held 4 times over
    while parsed, would end the run for want of memory)."""
    if resp.content_length is not None and resp.content_length > limit:
        raise InvalidAnswer(_too_large(limit), reason="answered too much")
    if resp.content_length is not None and not resp.headers.get("Content-Encoding"):
        return await resp.read()  # its length within the bound, as it will be read: in one go
    got = bytearray()
    async for chunk in resp.content.iter_chunked(1 << 20):
        got += chunk
        if len(got) > limit:
            raise InvalidAnswer(_too_large(limit), reason="answered too much")
    return bytes(got)


def _too_large(limit: int) -> str:
    return f"invalid_response: the answer is over {limit >> 20} MiB; not read further"


def head(raw: bytes, n: int = 200) -> str:
    """The first `n` bytes of an answer, as text for a message."""
    return raw[:n].decode("utf-8", "replace")


def load_json(raw: bytes, what: str = "JSON", floats: bool = False) -> Any:
    """An answer's body parsed as JSON, or InvalidAnswer (also for JSON nested too deep to parse).
    `floats`: the answer is made of floats (embedding vectors, megabytes of them), read by orjson,
    which reads a whole number beyond 64 bits as a float; every other answer is read as the
    standard parser reads it (`jsonl.read_back`: by orjson where the value is the same), its whole
    numbers exact (a token count of 10**100 is named as such)."""
    if floats:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # NaN or Infinity tokens, lone surrogates, deep nesting, or no JSON: the standard reader decides
    try:
        return read_back(raw)
    except (ValueError, RecursionError):
        raise InvalidAnswer(f"invalid_response: not {what}: {head(raw)}", reason=f"sent no {what}") from None


def endpoint(base_url: str, path: str) -> str:
    """`path` under an API base URL, keeping its query string (e.g. `?api-version=...`)."""
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + path))


@dataclass
class Endpoint:
    """One server: its base URL, its redacted name, and its health."""

    base: str
    label: str
    weight: float = 1.0  # share of the requests in flight (`URL#weight`)
    in_flight: int = 0
    failures: int = 0  # consecutive transient failures
    down_until: float = 0.0  # out of rotation until this clock time
    sent: int = 0  # attempts posted, for tests and the record
    errors: int = 0  # attempts that failed (any kind)
    gates: dict[str, asyncio.Semaphore] = field(default_factory=dict)  # bound the requests posted at once, per lane
    urls: dict[Any, str] = field(default_factory=dict)  # route -> URL, computed once


@dataclass
class Answered(Generic[T]):
    """A request's parsed answer, with the attempts it took and the endpoint that gave it."""

    value: T
    attempts: int
    endpoint: str
    spent: dict[str, Any] | None = None  # what the attempts before it used (invalid answers that were billed)


@dataclass(frozen=True)
class Pieces:
    """A request body as the pieces it was built from (a long document's text between its
    images' base64), sent one after another under one Content-Length: never joined into one
    buffer and copied again on its way to the socket, so a body of megabytes is not held twice
    (peak memory at --concurrency 64 on MM-NIAH's long documents: a quarter lower,
    docs/performance.md). `size` is the body's length in bytes."""

    parts: tuple[bytes, ...]
    size: int

    @classmethod
    def of(cls, parts: Sequence[bytes]) -> Pieces:
        return cls(tuple(parts), sum(len(p) for p in parts))


class _PiecesPayload(Payload):
    """aiohttp's view of `Pieces`: its size for the Content-Length, its parts written in order
    (the writer waits for the socket between them, so at most a part is buffered)."""

    def __init__(self, body: Pieces) -> None:
        super().__init__(body, content_type="application/json")
        self._size = body.size

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._value.parts).decode(encoding, errors)

    async def write(self, writer: Any) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        left = self._value.size if content_length is None else content_length
        for part in self._value.parts:
            if left <= 0:
                return
            await writer.write(part if len(part) <= left else part[:left])
            left -= len(part)


class Transport:
    """Requests to one or more endpoints of one service, under one RetryPolicy (module docstring).

    `limits` bounds the requests posted to one endpoint at once, per lane (e.g. {"chat": 32});
    a lane without a limit, or None, is unbounded. `secrets` are scrubbed from every message as
    the API key and the URLs' credentials are.
    """

    def __init__(
        self,
        urls: Sequence[str],
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        limits: Mapping[str, int | None] | None = None,
    ) -> None:
        self.endpoints = [Endpoint(base, redact_url(base), weight) for base, weight in map(split_weight, urls)]
        for ep in self.endpoints:
            ep.gates = {lane: asyncio.Semaphore(n) for lane, n in (limits or {}).items() if n is not None}
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._secrets = [api_key, *(s for u in urls for s in url_secrets(u))]
        self.retry = retry or RetryPolicy()
        self.clock: Callable[[], float] = time.monotonic
        self._session: aiohttp.ClientSession | None = None
        self._waits: dict[int, tuple[float, str]] = {}  # backoffs: until (clock), why
        self._posted: dict[int, tuple[float, str, float]] = {}  # attempts in flight: since (clock), what, timeout
        self._ids = itertools.count()

    def scrub(self, text: str) -> str:
        """`text` without the API key or URL credentials (for every message a client builds)."""
        return scrub(text, self._secrets)

    def hide(self, text: str) -> str:
        """`text` without the API key or the URLs' credentials, and nothing else changed: a
        model's answer, stored as given unless it echoes them (core/redact.py `hide`)."""
        return hide(text, self._secrets)

    async def session(self) -> aiohttp.ClientSession:
        """The connection pool (made on first use, in the running loop)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300), headers=self.headers
            )
        return self._session

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def url(self, ep: Endpoint, route: Callable[[str], str]) -> str:
        """The URL `route` gives for an endpoint's base (computed once per endpoint)."""
        got = ep.urls.get(route)
        if got is None:
            got = ep.urls[route] = route(ep.base)
        return got

    def endpoint_stats(self) -> list[dict[str, Any]]:
        """Per endpoint: its URL (redacted), weight, requests sent (each attempt) and errors."""
        return [{"url": e.label, "weight": e.weight, "requests": e.sent, "errors": e.errors} for e in self.endpoints]

    # --- what the run waits for ----------------------------------------------------------------

    def wait_note(self) -> str | None:
        """What the longest current wait is for: a backoff ("waiting 42 s: http://h:8000/v1
        answered 429"), else a request without an answer for SLOW_S seconds or more ("waiting
        95 s for embeddings from http://h:8001/v1 (timeout 180 s)"); None when nothing waits."""
        now = self.clock()
        if self._waits:
            until, why = max(self._waits.values())
            more = f" ({len(self._waits)} requests waiting)" if len(self._waits) > 1 else ""
            return f"waiting {max(0.0, until - now):.0f} s: {why}{more}"
        if self._posted:
            since, what, timeout = min(self._posted.values())
            if now - since >= SLOW_S:
                slow = sum(1 for s, _, _ in self._posted.values() if now - s >= SLOW_S)
                more = f" ({slow} requests waiting)" if slow > 1 else ""
                return f"waiting {now - since:.0f} s for {what} (timeout {timeout:g} s){more}"
        return None

    async def _wait(self, seconds: float, why: str) -> None:
        key = next(self._ids)
        self._waits[key] = (self.clock() + seconds, why)
        try:
            await asyncio.sleep(seconds)
        finally:
            del self._waits[key]

    # --- choosing an endpoint ------------------------------------------------------------------

    def _pick(self, avoid: Sequence[Endpoint] = ()) -> Endpoint:
        """The healthy endpoint with the fewest requests in flight per unit of weight (counting the
        one about to be sent), preferring one not in `avoid` (those that failed this request); when
        every endpoint is out of rotation, the one whose cool-down ends first (a probe)."""
        now = self.clock()
        healthy = [e for e in self.endpoints if e.down_until <= now]
        if not healthy:
            return min(self.endpoints, key=lambda e: e.down_until)
        fresh = [e for e in healthy if all(e is not a for a in avoid)]
        return min(fresh or healthy, key=lambda e: (e.in_flight + 1) / e.weight)

    def _fresh_endpoint(self, avoid: Sequence[Endpoint]) -> bool:
        """Whether a healthy endpoint that has not failed this request is available."""
        now = self.clock()
        return any(e.down_until <= now and all(e is not a for a in avoid) for e in self.endpoints)

    def _failed(self, ep: Endpoint) -> None:
        ep.failures += 1
        if ep.failures >= self.retry.fail_limit and len(self.endpoints) > 1:
            ep.down_until = self.clock() + self.retry.cooldown_s

    # --- requests ------------------------------------------------------------------------------

    async def probe(
        self, route: Callable[[str], str], ep: Endpoint, body: bytes | None = None, timeout_s: float = 10.0
    ) -> tuple[int, bytes]:
        """One attempt, no retry, for an endpoint check: GET (or POST `body`) and the answer's
        status and body; Unreachable (the reason in a few words) when there is none."""
        session = await self.session()
        url = self.url(ep, route)
        try:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            request = session.get(url, timeout=timeout) if body is None else session.post(url, data=body, timeout=timeout)
            async with request as resp:
                return resp.status, await read_answer(resp)
        except InvalidAnswer as exc:  # a model list of gigabytes
            raise Unreachable(str(exc)) from None
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            reason = exc.__class__.__name__ if isinstance(exc, asyncio.TimeoutError) else str(exc) or exc.__class__.__name__
            raise Unreachable(self.scrub(reason)) from None

    async def post(
        self,
        route: Callable[[str], str],
        body: bytes | Pieces,
        parse: Callable[[bytes], T],
        lane: str,
        timeout_s: float | None = None,
    ) -> Answered[T]:
        """POST `body` (bytes, or the `Pieces` of a large one) under the policy and return
        `parse(answer)` with the attempts it took, or raise RequestError (scrubbed). `lane` names
        the requests for their bound in flight and for the wait note (e.g. "chat", "embeddings");
        `timeout_s` bounds each attempt (the policy's when None)."""
        timeout = timeout_s if timeout_s is not None else self.retry.timeout_s
        attempts = self.retry.max_retries + 1
        last_error = ""
        spent: dict[str, Any] | None = None  # the usage invalid answers reported: billed all the same
        failed_here: list[Endpoint] = []
        ep = self.endpoints[0]
        for attempt in range(attempts):
            ep = self._pick(failed_here)
            ep.in_flight += 1
            ep.sent += 1
            try:
                gate = ep.gates.get(lane)
                if gate is None:
                    value = await self._attempt(ep, route, body, parse, lane, timeout)
                else:
                    async with gate:
                        value = await self._attempt(ep, route, body, parse, lane, timeout)
            except _Final as exc:
                ep.failures = 0  # the server answered: it is alive
                ep.errors += 1
                raise RequestError(exc.kind, self.scrub(str(exc)), attempt + 1, ep.label, spent) from None
            except _Retryable as exc:
                ep.errors += 1
                last_error = str(exc)
                spent = added_usage(spent, exc.usage)
                if exc.unhealthy:
                    self._failed(ep)
                failed_here.append(ep)
                if attempt + 1 < attempts and self._fresh_endpoint(failed_here):
                    continue  # another endpoint takes the retry at once
                if exc.retry_after is not None and exc.retry_after > self.retry.max_wait_s:
                    message = (
                        f"{last_error}: the server asked to wait {exc.retry_after:.0f} s, more than --max-wait "
                        f"{self.retry.max_wait_s:g} s; not waited for"
                    )
                    raise RequestError(status.BACKEND_ERROR, self.scrub(message), attempt + 1, ep.label, spent) from None
                if attempt + 1 == attempts:
                    break
                await self._wait(self.retry.delay(attempt, exc.retry_after), f"{ep.label} {exc.reason}")
                failed_here = [ep]  # after the wait, any endpoint may take it; this one last
                continue
            finally:
                ep.in_flight -= 1
            ep.failures = 0
            ep.down_until = 0.0
            return Answered(value, attempt + 1, ep.label, spent)
        message = f"{last_error} (gave up after {attempts} attempts)"
        raise RequestError(status.BACKEND_ERROR, self.scrub(message), attempts, ep.label, spent)

    async def _attempt(
        self,
        ep: Endpoint,
        route: Callable[[str], str],
        body: bytes | Pieces,
        parse: Callable[[bytes], T],
        lane: str,
        timeout_s: float,
    ) -> T:
        """One POST: the parsed answer, or _Retryable / _Final saying why not."""
        session = await self.session()
        key = next(self._ids)
        self._posted[key] = (self.clock(), f"{lane} from {ep.label}", timeout_s)
        try:
            data = body if isinstance(body, bytes) else _PiecesPayload(body)  # a payload object is written once: one per attempt
            async with session.post(self.url(ep, route), data=data, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                code = resp.status
                retry_after = retry_after_s(resp.headers.get("Retry-After"))
                raw = await read_answer(resp)
        except InvalidAnswer as exc:  # over MAX_ANSWER_BYTES
            raise _Retryable(str(exc), reason=exc.reason) from None
        except asyncio.TimeoutError:
            raise _Retryable(f"timeout: no answer within {timeout_s:g} s", reason="timed out") from None
        except aiohttp.ClientError as exc:
            raise _Retryable(f"connection: {exc.__class__.__name__}: {exc}", reason="could not be reached") from None
        finally:
            del self._posted[key]
        if code == 429 or code >= 500:
            raise _Retryable(f"http_{code}: {head(raw)}", retry_after, unhealthy=code != 429, reason=f"answered {code}")
        if code != 200:
            raise _Final(f"http_{code}: {head(raw, 500)}", classify_rejection(code, raw.decode("utf-8", "replace")))
        try:
            return parse(raw)
        except InvalidAnswer as exc:
            raise _Retryable(str(exc), reason=exc.reason, usage=exc.usage) from None
