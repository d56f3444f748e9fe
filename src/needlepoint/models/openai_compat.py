"""The client for OpenAI-compatible chat endpoints (vLLM, SGLang, LMDeploy, hosted APIs).

This module owns the one concurrency gate (`max_in_flight`: requests posted to one endpoint at
once, whatever solver or how many samples send them) and the one retry policy: exponential
backoff with full jitter on connection errors, timeouts, 429 and 5xx (Retry-After honoured up to a
cap, `max_wait_s`), no retry on other 4xx, which are classified into the kinds of `status`.
Requests spread over several endpoints: each goes to the healthy one with the fewest requests in
flight per unit of weight (`URL#weight`, endpoints.py), a failed attempt moves to another endpoint,
and an endpoint that fails several times in a row is taken out of rotation for a cool-down, then
tried again.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from needlepoint import status
from needlepoint.conversation import Conversation, Generation, ImageRef, Reply
from needlepoint.endpoints import split_weight
from needlepoint.errors import DataError
from needlepoint.images import ImageCache, base64_jpeg, passes_through, read_small_image, to_base64
from needlepoint.jsonfind import loads as json_loads  # bounded: a reply nested 5,000 deep is no JSON
from needlepoint.redact import redact_url, scrub, url_secrets
from needlepoint.store import json_line, writable


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a failing request.

    `max_wait_s` caps every wait: a server asking (Retry-After) for longer fails the request at
    once rather than stalling the run. `fail_limit` consecutive transient failures take an
    endpoint out of rotation for `cooldown_s` seconds (when there is another to use).
    """

    max_retries: int = 6
    base_s: float = 1.0
    cap_s: float = 60.0
    max_wait_s: float = 300.0
    fail_limit: int = 3
    cooldown_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number `attempt` (0-based)."""
        jittered = random.uniform(0.0, min(self.cap_s, self.base_s * 2**attempt, self.max_wait_s))
        return max(jittered, retry_after or 0.0)


@dataclass(frozen=True)
class ClientSettings:
    """The run's settings for every client it makes, a solver's own (a localizer, an embedder)
    as well as the --model one: retries and waits, image re-encoding, the request byte budget."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    reencode_images: bool = False
    max_request_bytes: int | None = None


# The request-body keys that the OpenAI chat schema or vLLM's sampling and chat parameters know;
# vLLM ignores any other key silently, so `--extra-body` warns about those.
KNOWN_BODY_KEYS = frozenset(
    {
        # OpenAI chat completions
        "model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "n",
        "stop", "stream", "stream_options", "presence_penalty", "frequency_penalty", "logit_bias",
        "logprobs", "top_logprobs", "response_format", "tools", "tool_choice", "parallel_tool_calls",
        "user", "service_tier", "store", "metadata", "modalities", "prediction", "audio",
        "reasoning_effort", "web_search_options", "functions", "function_call",
        # vLLM sampling parameters and chat extras
        "top_k", "min_p", "repetition_penalty", "length_penalty", "best_of", "use_beam_search",
        "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "min_tokens",
        "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens",
        "prompt_logprobs", "allowed_token_ids", "bad_words", "echo", "add_generation_prompt",
        "continue_final_message", "add_special_tokens", "documents", "chat_template",
        "chat_template_kwargs", "mm_processor_kwargs", "guided_json", "guided_regex", "guided_choice",
        "guided_grammar", "guided_decoding_backend", "guided_whitespace_pattern", "structural_tag",
        "structured_outputs", "priority", "request_id", "logits_processors", "vllm_xargs",
        "return_tokens_as_token_ids", "return_token_ids", "cache_salt", "kv_transfer_params",
        "thinking_token_budget",
    }
)  # fmt: skip

# What `--neutral-sampling` sends for the settings a benchmark's authors left to the server: the
# values that leave the model's distribution as it is (vLLM otherwise applies the model's
# generation_config.json, e.g. Qwen2.5-VL's top_k 1 and repetition_penalty 1.05).
NEUTRAL_SAMPLING: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}

_SENT_FIELDS = ("temperature", "top_p", "max_tokens", "seed")


def unknown_body_keys(extra: Iterable[str]) -> list[str]:
    """The keys of an `--extra-body` object that neither OpenAI's schema nor vLLM knows."""
    return sorted(k for k in extra if k not in KNOWN_BODY_KEYS)


def sampling_params(generation: Generation) -> dict[str, Any]:
    """The keys a request body carries besides `model` and `messages`, exactly as sent."""
    params = {k: getattr(generation, k) for k in _SENT_FIELDS if getattr(generation, k) is not None}
    params.update(generation.extra)
    return params


def with_neutral_sampling(generation: Generation) -> Generation:
    """`generation` plus neutral values for every sampling setting it leaves to the server."""
    from dataclasses import replace

    fields = {k: v for k, v in NEUTRAL_SAMPLING.items() if k in _SENT_FIELDS and getattr(generation, k) is None}
    extra = {k: v for k, v in NEUTRAL_SAMPLING.items() if k not in _SENT_FIELDS and k not in generation.extra}
    return replace(generation, **fields, extra={**extra, **generation.extra})


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None, unhealthy: bool = True, reason: str = "") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.unhealthy = unhealthy  # counts against the endpoint's health (not so for 429)
        self.reason = reason  # a few words for the progress line, e.g. "answered 429"


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


_CONTEXT = re.compile(r"maximum context length|maximum model length|context length (is|of)|too long and exceeds|exceeds the model'?s? (context|maximum)", re.I)
_IMAGES = re.compile(r"at most \d+ image|image\(s\) may be provided|limit_mm_per_prompt|too many images", re.I)


def classify_rejection(http_status: int, body: str) -> str:
    """The status kind of a non-retried HTTP answer: the server's error message decides whether the
    prompt was too long or had too many images; any other 4xx is a rejected request."""
    message = body
    try:
        data = json_loads(body)
        if isinstance(data, dict):
            inner = data.get("error")
            err: dict[str, Any] = inner if isinstance(inner, dict) else data
            message = str(err.get("message") or body)
    except ValueError:
        pass
    if _CONTEXT.search(message):
        return status.CONTEXT_TOO_LONG
    if _IMAGES.search(message):
        return status.TOO_MANY_IMAGES
    return status.REQUEST_REJECTED


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
        content: list[dict[str, Any]] = []
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
    prefix = DATA_URL_PREFIX.decode("ascii")
    body: dict[str, Any] = {
        "model": model,
        "messages": message_payload(conversation, lambda _, i: f"{prefix}@@np-image-{_TOKEN}-{i}@@"),
    }
    body.update(sampling_params(generation))
    pieces = _SLOT.split(json_line(body))
    for i in range(1, len(pieces), 2):
        pieces[i] = images_b64[int(pieces[i])]  # the data URL's prefix is in the text before it: one copy, in join
    return b"".join(pieces)


def endpoint(base_url: str, path: str) -> str:
    """`path` under an API base URL, keeping its query string (e.g. `?api-version=...`)."""
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + path))


@dataclass
class _Endpoint:
    """One server: where to post, its redacted name, and its health."""

    base: str
    url: str
    label: str
    in_flight: int = 0
    failures: int = 0  # consecutive transient failures
    down_until: float = 0.0  # out of rotation until this clock time
    sent: int = 0  # attempts posted, for tests and the record
    errors: int = 0  # attempts that failed (any kind)
    weight: float = 1.0  # share of the requests in flight (`URL#weight`)
    gate: asyncio.Semaphore | None = None  # bounds the requests posted to it at once (max_in_flight)


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
        max_in_flight: int | None = None,
    ) -> None:
        if api_key and any("@" in urlsplit(u).netloc for u in api_urls):
            raise DataError("an --api-url carries user info and --api-key is given too; pass the credential one way only")
        self.name = name
        self.endpoints = [
            _Endpoint(base, endpoint(base, "chat/completions"), redact_url(base), weight=weight)
            for base, weight in map(split_weight, api_urls)
        ]
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._has_key = bool(api_key)
        self._secrets = [api_key, *(s for u in api_urls for s in url_secrets(u))]
        self.retry = retry or RetryPolicy()
        self.images = ImageCache()
        self.reencode_images = reencode_images
        self.max_request_bytes = max_request_bytes
        self.clock: Callable[[], float] = time.monotonic
        self._session: aiohttp.ClientSession | None = None
        self._waits: dict[int, tuple[float, str]] = {}
        self._wait_ids = itertools.count()
        self.max_in_flight = max_in_flight  # per endpoint; None: unbounded (the caller bounds what it sends)
        if max_in_flight is not None:
            for ep in self.endpoints:
                ep.gate = asyncio.Semaphore(max_in_flight)

    def scrub(self, text: str) -> str:
        """`text` without the API key or URL credentials (for every message this client builds)."""
        return scrub(text, self._secrets)

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
                    b64 = to_base64(data)
                else:
                    b64 = await loop.run_in_executor(None, base64_jpeg, ref, self.reencode_images, data)
                self.images.put(ref, b64)
            out.append(b64)
        return out

    # --- the endpoint check --------------------------------------------------------------------

    async def check_endpoints(self, timeout_s: float = 10.0) -> None:
        """Raise DataError, in one sentence, when an endpoint cannot be reached, refuses the key,
        lacks `/v1`, or does not serve this model (by its `GET /models` answer). Any other answer
        (a 5xx, a 404 under a base that ends in /v1, a body that is no model list) passes: what the
        server does with requests is classified per request."""
        session = await self._client()
        for ep in self.endpoints:
            try:
                async with session.get(endpoint(ep.base, "models"), timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                    raw = await resp.read()
                    code = resp.status
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                reason = exc.__class__.__name__ if isinstance(exc, asyncio.TimeoutError) else str(exc) or exc.__class__.__name__
                raise DataError(self.scrub(f"cannot reach {ep.label} ({reason}); start the server or fix --api-url")) from None
            if code in (401, 403):
                if self._has_key:
                    raise DataError(f"{ep.label} refused the API key (HTTP {code}); pass the right key with --api-key or $OPENAI_API_KEY")
                raise DataError(f"{ep.label} wants an API key (HTTP {code}); pass it with --api-key or set $OPENAI_API_KEY")
            if code == 404 and not urlsplit(ep.base).path.rstrip("/").endswith("/v1"):
                raise DataError(self._not_found(ep))
            if code != 200:
                continue  # the server answers; what it does with requests is classified per request
            served = _model_ids(raw)
            if served is not None and self.name not in served:
                names = ", ".join(served[:20]) + (f" and {len(served) - 20} more" if len(served) > 20 else "")
                raise DataError(
                    f"{ep.label} does not serve model {self.name!r}; it serves {names or 'no model'}: pass one of these with --model"
                )

    @staticmethod
    def _not_found(ep: _Endpoint) -> str:
        """A 404 on `<base>/models` where the base does not end in /v1: the commonest slip."""
        parts = urlsplit(ep.base)
        fixed = redact_url(urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/v1")))
        return f"{ep.label} has no /models (HTTP 404): the URL probably lacks /v1; try --api-url {fixed}"

    # --- requests ------------------------------------------------------------------------------

    def wait_note(self) -> str | None:
        """What the longest current wait is for, e.g. "waiting 42 s: http://h:8000/v1 answered 429";
        None when no request is waiting."""
        if not self._waits:
            return None
        now = self.clock()
        until, why = max(self._waits.values())
        more = f" ({len(self._waits)} requests waiting)" if len(self._waits) > 1 else ""
        return f"waiting {max(0.0, until - now):.0f} s: {why}{more}"

    def _pick(self, avoid: Sequence[_Endpoint] = ()) -> _Endpoint:
        """The healthy endpoint with the fewest requests in flight per unit of weight (counting the one
        about to be sent), preferring one not in `avoid`
        (those that failed this request); when every endpoint is out of rotation, the one whose
        cool-down ends first (a probe)."""
        now = self.clock()
        healthy = [e for e in self.endpoints if e.down_until <= now]
        if not healthy:
            return min(self.endpoints, key=lambda e: e.down_until)
        fresh = [e for e in healthy if all(e is not a for a in avoid)]
        return min(fresh or healthy, key=lambda e: (e.in_flight + 1) / e.weight)

    def _fresh_endpoint(self, avoid: Sequence[_Endpoint]) -> bool:
        """Whether a healthy endpoint that has not failed this request is available."""
        now = self.clock()
        return any(e.down_until <= now and all(e is not a for a in avoid) for e in self.endpoints)

    def _failed(self, ep: _Endpoint) -> None:
        ep.failures += 1
        if ep.failures >= self.retry.fail_limit and len(self.endpoints) > 1:
            ep.down_until = self.clock() + self.retry.cooldown_s

    async def complete(self, conversation: Conversation, generation: Generation) -> Reply:
        """Send one conversation, retrying as the policy says; errors come back in Reply.error
        (scrubbed of credentials) with their `status` kind in Reply.error_kind. At most
        `max_in_flight` requests are posted to one endpoint at once; the others wait for a slot
        (a request waiting out a backoff holds none).

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
        last: _Endpoint | None = None
        attempts = self.retry.max_retries + 1

        def failure(message: str, kind: str, attempt: int) -> Reply:
            return Reply(
                error=self.scrub(message), error_kind=kind, attempts=attempt, latency_s=time.perf_counter() - start,
                request_bytes=len(body), endpoint=last.label if last else None,
            )  # fmt: skip

        failed_here: list[_Endpoint] = []
        for attempt in range(attempts):
            ep = self._pick(failed_here)
            last = ep
            ep.in_flight += 1
            ep.sent += 1
            try:
                if ep.gate is None:
                    reply = await self._post(session, ep.url, body, generation.timeout_s)
                else:
                    async with ep.gate:
                        reply = await self._post(session, ep.url, body, generation.timeout_s)
            except _Final as exc:
                ep.failures = 0  # the server answered: it is alive
                ep.errors += 1
                return failure(str(exc), exc.kind, attempt + 1)
            except _Retryable as exc:
                ep.errors += 1
                last_error = str(exc)
                if exc.unhealthy:
                    self._failed(ep)
                failed_here.append(ep)
                if attempt + 1 < attempts and self._fresh_endpoint(failed_here):
                    continue  # another endpoint takes the retry at once
                if exc.retry_after is not None and exc.retry_after > self.retry.max_wait_s:
                    return failure(
                        f"{last_error}: the server asked to wait {exc.retry_after:.0f} s, more than --max-wait "
                        f"{self.retry.max_wait_s:g} s; not waited for", status.BACKEND_ERROR, attempt + 1,
                    )  # fmt: skip
                if attempt + 1 == attempts:
                    break
                await self._wait(self.retry.delay(attempt, exc.retry_after), f"{ep.label} {exc.reason}")
                failed_here = [ep]  # after the wait, any endpoint may take it; this one last
                continue
            finally:
                ep.in_flight -= 1
            ep.failures = 0
            ep.down_until = 0.0
            reply.latency_s = time.perf_counter() - start
            reply.attempts = attempt + 1
            reply.request_bytes = len(body)
            reply.endpoint = ep.label
            return reply
        return failure(f"{last_error} (gave up after {attempts} attempts)", status.BACKEND_ERROR, attempts)

    async def _wait(self, seconds: float, why: str) -> None:
        key = next(self._wait_ids)
        self._waits[key] = (self.clock() + seconds, why)
        try:
            await asyncio.sleep(seconds)
        finally:
            del self._waits[key]

    def endpoint_stats(self) -> list[dict[str, Any]]:
        """Per endpoint: its URL (redacted), weight, requests sent (each attempt) and errors."""
        return [{"url": e.label, "weight": e.weight, "requests": e.sent, "errors": e.errors} for e in self.endpoints]

    async def _post(self, session: aiohttp.ClientSession, url: str, body: bytes, timeout_s: float) -> Reply:
        try:
            async with session.post(url, data=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                raw = await resp.read()
                code = resp.status
                retry_after = retry_after_s(resp.headers.get("Retry-After"))
        except asyncio.TimeoutError:
            raise _Retryable(f"timeout: no answer within {timeout_s:g} s", reason="timed out") from None
        except aiohttp.ClientError as exc:
            raise _Retryable(f"connection: {exc.__class__.__name__}: {exc}", reason="could not be reached") from None
        if code == 429 or code >= 500:
            text = raw[:200].decode("utf-8", "replace")
            raise _Retryable(f"http_{code}: {text}", retry_after, unhealthy=code != 429, reason=f"answered {code}")
        if code != 200:
            text = raw[:500].decode("utf-8", "replace")
            raise _Final(f"http_{code}: {text}", classify_rejection(code, raw.decode("utf-8", "replace")))
        try:
            data = json_loads(raw)
            choice = data["choices"][0]
            message = choice["message"]
            text = message.get("content") or ""
            reasoning = message.get("reasoning_content") or message.get("reasoning") or None
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise _Retryable(
                f"invalid_response: not a chat completion: {raw[:200].decode('utf-8', 'replace')}", reason="sent no chat completion"
            ) from None
        if not isinstance(text, str) or (reasoning is not None and not isinstance(reasoning, str)):
            raise _Retryable(f"invalid_response: content is not text: {raw[:200].decode('utf-8', 'replace')}", reason="sent no text")
        return Reply(
            text=writable(text), finish_reason=choice.get("finish_reason"), usage=data.get("usage"),
            reasoning=None if reasoning is None else writable(reasoning),
        )  # fmt: skip


def _model_ids(raw: bytes) -> list[str] | None:
    """The model names of a `GET /models` answer, or None when it is not a model list."""
    try:
        data = json_loads(raw)
        ids = [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError):
        return None
    return ids
