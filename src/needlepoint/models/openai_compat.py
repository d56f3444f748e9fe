"""The client for OpenAI-compatible chat endpoints (vLLM, SGLang, LMDeploy, hosted APIs).

This module builds the chat request (messages, images, sampling parameters) and reads its answer;
the HTTP layer (models/http.py) sends it: the per-attempt timeout, retries, the wait cap, failover
over several endpoints (`URL#weight`), the one concurrency gate (`max_in_flight`: requests posted
to one endpoint at once, whatever solver or how many samples send them) and the error kinds.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from needlepoint.core import marks
from needlepoint.core.conversation import Conversation, Generation, ImageRef, Message, Reply
from needlepoint.core.endpoints import pasted_route_advice
from needlepoint.core.errors import DataError, RequestError
from needlepoint.core.files import json_line
from needlepoint.core.images import (
    NOTED,
    ON_LOOP_IMAGES,
    ImageCache,
    encode_jpeg,
    facts_key,
    file_url,
    file_url_facts,
    jpeg_header,
    passes_through,
    read_small_image,
    read_small_image_status,
    stored_facts,
    to_base64,
)
from needlepoint.core.numeric import added_usage, clean_usage
from needlepoint.core.redact import redact_url
from needlepoint.core.text import writable
from needlepoint.models.http import (
    Endpoint,
    InvalidAnswer,
    Pieces,
    RetryPolicy,
    Transport,
    Unreachable,
    classify_rejection,
    endpoint,
    error_message,
    head,
    load_json,
    retry_after_s,
)

# Re-exported: the policy, the rejection classes and URL helpers live in the HTTP layer.
__all__ = [
    "CHAT",
    "DATA_URL_PREFIX",
    "ClientSettings",
    "KNOWN_BODY_KEYS",
    "NEUTRAL_SAMPLING",
    "OpenAICompatModel",
    "RetryPolicy",
    "chat_reply",
    "classify_rejection",
    "endpoint",
    "message_payload",
    "request_body",
    "retry_after_s",
    "sampling_params",
    "unknown_body_keys",
    "with_neutral_sampling",
]

CHAT = "chat"  # the lane of chat requests (their bound in flight, the wait note)
Ready = tuple[bytes | None, bytes | None, os.stat_result | None]  # `_ready`: what is sent, stored bytes, file status
# A document whose reads kept the event loop waiting this long, beyond their CPU (40 page-cached
# JPEGs of 73 KB take about 1.7 ms in all), lies on slow storage: the run's later documents are read
# in a worker thread (`OpenAICompatModel._encode_images`).
SLOW_READ_S = 0.03
PIECES_FROM_BYTES = 1 << 20  # a body this large goes out as its pieces (models/http.Pieces), never joined
LOCAL_IMAGES_PROBE = "Describe the image in one word."  # the text of check_local_images' request
# A server's refusal of local files, whatever its status (vLLM 0.32 answers 500 without the flag)
_NAMES_LOCAL_FILES = re.compile(r"local[ _-]?(?:media|files?)|file://|file path", re.I)


@dataclass(frozen=True)
class ClientSettings:
    """The run's settings for every client it makes, a solver's own (a localizer, an embedder)
    as well as the --model one: the timeout, retries and waits (RetryPolicy), image re-encoding,
    the request byte budget, the samples in flight (`--concurrency`), which a solver's own
    clients follow unless told otherwise, and `local_images` (--local-images: image files go as
    `file://` URLs that a server on this machine reads itself)."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    reencode_images: bool = False
    max_request_bytes: int | None = None
    concurrency: int = 32
    local_images: bool = False


# The request-body keys that the OpenAI chat schema or vLLM's sampling and chat parameters know;
# vLLM ignores any other key silently, so `--extra-body` warns about those.
KNOWN_BODY_KEYS = frozenset(
    {
        # OpenAI chat completions
        "model",
        "messages",
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "n",
        "stop",
        "stream",
        "stream_options",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "service_tier",
        "store",
        "metadata",
        "modalities",
        "prediction",
        "audio",
        "reasoning_effort",
        "web_search_options",
        "functions",
        "function_call",
        # vLLM sampling parameters and chat extras
        "top_k",
        "min_p",
        "repetition_penalty",
        "length_penalty",
        "best_of",
        "use_beam_search",
        "stop_token_ids",
        "include_stop_str_in_output",
        "ignore_eos",
        "min_tokens",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "truncate_prompt_tokens",
        "prompt_logprobs",
        "allowed_token_ids",
        "bad_words",
        "echo",
        "add_generation_prompt",
        "continue_final_message",
        "add_special_tokens",
        "documents",
        "chat_template",
        "chat_template_kwargs",
        "mm_processor_kwargs",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "guided_decoding_backend",
        "guided_whitespace_pattern",
        "structural_tag",
        "structured_outputs",
        "priority",
        "request_id",
        "logits_processors",
        "vllm_xargs",
        "return_tokens_as_token_ids",
        "return_token_ids",
        "cache_salt",
        "kv_transfer_params",
        "thinking_token_budget",
    }
)

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


_SLOT = f"@@np-image-{secrets.token_hex(8)}@@"  # where an image's URL goes in the serialised body
_SLOT_BYTES = _SLOT.encode()
DATA_URL_PREFIX = b"data:image/jpeg;base64,"
FILE_URL_PREFIX = b"file:"  # never the start of base64, whose alphabet has no colon


def message_payload(conversation: Conversation, url_for: Callable[[ImageRef], str]) -> list[dict[str, Any]]:
    """The `messages` array of a chat request, its images in order; `url_for(image)` gives an image's URL."""
    out: list[dict[str, Any]] = []
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
                content.append({"type": "image_url", "image_url": {"url": url_for(p)}})
        out.append({"role": m.role, "content": content})
    return out


def request_body(model: str, conversation: Conversation, generation: Generation, images: Sequence[bytes]) -> bytes:
    """The JSON body of one chat-completions request, images given in order, each as its base64
    or its `file://` URL (see `request_pieces`)."""
    return b"".join(request_pieces(model, conversation, generation, images))


def request_pieces(model: str, conversation: Conversation, generation: Generation, images: Sequence[bytes]) -> list[bytes]:
    """`request_body` as its pieces, JSON text and each image in turn (joined, the body): an
    image's base64 goes out as a JPEG data URL, a `file://` URL (--local-images) as it is.

    Base64 is spliced in as bytes after the rest is serialised (it needs no JSON escaping, and
    scanning megabytes of it in json.dumps would be most of the cost of a request); file URLs
    (ASCII, quoted, a hundred bytes each) are serialised in place, in one piece with the text.
    """
    asked = 0

    def url_for(_: ImageRef) -> str:  # a file URL in place; base64 as a slot, spliced in below
        nonlocal asked
        asked += 1
        image = images[asked - 1] if asked <= len(images) else b""
        return image.decode("ascii") if image.startswith(FILE_URL_PREFIX) else _SLOT

    body: dict[str, Any] = {"model": model, "messages": message_payload(conversation, url_for)}
    body.update(sampling_params(generation))
    if asked != len(images):
        raise ValueError(f"{len(images)} images for {asked} image slots in a request body")
    spliced = [image for image in images if not image.startswith(FILE_URL_PREFIX)]
    if not spliced:
        return [json_line(body)]
    texts = marks.split(json_line(body), _SLOT_BYTES)  # the slots, in the images' order
    if len(texts) != len(spliced) + 1:  # a text holding the slot's mark: never cut there
        raise ValueError(f"{len(spliced)} base64 images for {len(texts) - 1} image slots in a request body")
    pieces = [texts[0]]
    for image, text in zip(spliced, texts[1:]):
        pieces[-1] += DATA_URL_PREFIX  # the text before it ends the URL's opening quote
        pieces += [image, text]
    return pieces


def _chat_url(base: str) -> str:
    return endpoint(base, "chat/completions")


def _models_url(base: str) -> str:
    return endpoint(base, "models")


class OpenAICompatModel:
    """A model served behind one or more `/v1/chat/completions` endpoints: the chat request and its
    answer; the requests themselves go through the HTTP layer (models/http.py)."""

    def __init__(
        self,
        name: str,
        api_urls: list[str],
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        reencode_images: bool = False,
        max_request_bytes: int | None = None,
        max_in_flight: int | None = None,
        flag: str = "--api-url",
        local_images: bool = False,
    ) -> None:
        if api_key and any("@" in urlsplit(u).netloc for u in api_urls):
            raise DataError(f"an {flag} carries user info and --api-key is given too; pass the credential one way only")
        self.name = name
        self.flag = flag  # the option that gave the URLs, for the endpoint check's advice (e.g. --localizer-url)
        # max_in_flight: per endpoint; None: unbounded (the caller bounds what it sends)
        self.transport = Transport(api_urls, api_key, retry, {CHAT: max_in_flight})
        self._has_key = bool(api_key)
        self.images = ImageCache()
        self.reencode_images = reencode_images
        self.max_request_bytes = max_request_bytes
        self.max_in_flight = max_in_flight
        self.local_images = local_images
        self.slow_reads = False  # a document's images took SLOW_READ_S on the loop: documents go to a thread

    @property
    def endpoints(self) -> list[Endpoint]:
        """The endpoints and their health (the HTTP layer's)."""
        return self.transport.endpoints

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy (the HTTP layer's)."""
        return self.transport.retry

    @property
    def clock(self) -> Callable[[], float]:
        """The clock of health and waits (a test may set it)."""
        return self.transport.clock

    @clock.setter
    def clock(self, value: Callable[[], float]) -> None:
        self.transport.clock = value

    def scrub(self, text: str) -> str:
        """`text` without the API key or URL credentials (for every message this client builds)."""
        return self.transport.scrub(text)

    def hide_secrets(self, reply: Reply) -> Reply:
        """`reply` with the API key and the URLs' credentials taken out of its text and reasoning
        (a server that echoes the request's headers in its answer), nothing else changed."""
        reply.text = self.transport.hide(reply.text)
        if reply.reasoning is not None:
            reply.reasoning = self.transport.hide(reply.reasoning)
        return reply

    def wait_note(self) -> str | None:
        """What the run waits for from this model, if anything (Transport.wait_note)."""
        return self.transport.wait_note()

    def endpoint_stats(self) -> list[dict[str, Any]]:
        """Per endpoint: its URL (redacted), weight, requests sent (each attempt) and errors."""
        return self.transport.endpoint_stats()

    async def aclose(self) -> None:
        """Close the connection pool and drop the image cache."""
        self.images.clear()
        await self.transport.aclose()

    def _ready(self, ref: ImageRef) -> Ready:
        """(what goes in the request, stored bytes, their file's status) of an image where no
        transcoding is needed: from the cache, its file URL (--local-images), or its bytes sent as
        they are as base64; (None, bytes or None, status or None) otherwise. Files are read here
        (page cache, cheap), and so are loaded bytes already in memory (`cached()`: parquet rows
        read ahead); other loads (a parquet read, a merged canvas, a big file) wait for `_encode`.
        What is read is described for the sample's record from the same read (images.NOTED): no
        file is read twice for a sample."""
        b64 = self.images.get(ref)
        if b64 is not None:
            return b64, None, None
        if self.local_images:
            url, facts = file_url_facts(ref, self.reencode_images)
            if url is not None:
                if facts is not None:
                    NOTED.note(facts_key(ref, self.reencode_images), facts)  # from the header just read: no digest
                self.images.put(ref, url, first=True)
                return url, None, None
        peek = getattr(ref.loader, "cached", None)
        data, st = read_small_image_status(ref) if ref.loader is None else (peek() if peek is not None else None, None)
        if data is not None:
            head = jpeg_header(data)
            if passes_through(data, ref, self.reencode_images, head):
                b64 = to_base64(data)  # the bytes as read, encoded once; the record's description from the same read
                key = facts_key(ref, self.reencode_images)
                if not NOTED.knows(key):  # an image sent again in the run keeps its description
                    NOTED.note(key, stored_facts(ref, data, data, head, st))
                self.images.put(ref, b64)
                return b64, data, st
        return None, data, st

    def _encode(self, ref: ImageRef, ready: Ready | None = None) -> bytes:
        """What a request carries of an image: its file URL (--local-images) or its base64,
        transcoded where it must be (blocking: a worker thread's job). `ready`: what `_ready`
        found of it already."""
        b64, data, st = self._ready(ref) if ready is None else ready
        if b64 is None:
            if data is None and ref.loader is not None:
                data = read_small_image(ref)  # a parquet row, a merged canvas: loaded once, for the request and its record
            sent = encode_jpeg(ref, self.reencode_images, data)
            key = facts_key(ref, self.reencode_images)
            if data is not None and not NOTED.knows(key):
                NOTED.note(key, stored_facts(ref, data, sent, st=st))
            b64 = to_base64(sent)
            self.images.put(ref, b64)
        return b64

    async def _encode_images(self, conversation: Conversation) -> list[bytes]:
        """What a request carries of each image of a conversation (`_encode`), in order. Every
        image is read on the event loop (`_ready`: a file URL's header, or a file's bytes and their
        base64), and only what must be transcoded goes to a worker thread, one image after
        another. Reading and base64 are quick; in a worker thread each of a file's system calls
        hands the interpreter lock from the thread to the loop and back, and a document of 40
        images cost more that way than read here: an MM-NIAH run went from 25% to 45% of the ideal
        rate as typed, and from 62% to 69% with --local-images (issue 45). Once a document's reads
        have kept the loop waiting for SLOW_READ_S (files on a network file system, a cold disk),
        every later document of the run is read and encoded whole in a worker thread instead, where
        the waits overlap the loop's work; a request of one or two images stays on the loop."""
        refs = [im for m in conversation.messages for im in m.images]
        loop = asyncio.get_running_loop()
        document = len(refs) > ON_LOOP_IMAGES
        if document and self.slow_reads:
            reading = loop.run_in_executor(None, lambda: [self._encode(r) for r in refs])
            NOTED.expect([facts_key(r, self.reencode_images) for r in refs], reading)  # the record waits for this read
            return await reading
        out = []
        wall, cpu = time.perf_counter(), time.thread_time()
        transcoded = False  # the loop ran other work meanwhile: this document's reads are not timed
        for ref in refs:
            ready = self._ready(ref)
            if ready[0] is None:
                transcoded = True
                encoding = loop.run_in_executor(None, self._encode, ref, ready)
                NOTED.expect([facts_key(ref, self.reencode_images)], encoding)  # the record waits for this read
                out.append(await encoding)
            else:
                out.append(ready[0])
        if document and not transcoded and not self.slow_reads:  # the time the reads waited, not their CPU (nor a GC pause)
            self.slow_reads = (time.perf_counter() - wall) - (time.thread_time() - cpu) >= SLOW_READ_S
        return out

    # --- the endpoint check --------------------------------------------------------------------

    async def check_endpoints(self, timeout_s: float = 10.0) -> None:
        """Raise DataError, in one sentence, when an endpoint URL carries an endpoint's path (a
        pasted `.../v1/chat/completions`), cannot be reached, refuses the key, lacks `/v1`, or does
        not serve this model (by its `GET /models` answer). Any other answer (a 5xx, a 404 under a
        base that ends in /v1, a body that is no model list) passes: what the server does with
        requests is classified per request."""
        for ep in self.endpoints:
            pasted = pasted_route_advice(ep.base, self.flag)
            if pasted is not None:
                raise DataError(pasted)
        for ep in self.endpoints:
            try:
                code, raw = await self.transport.probe(_models_url, ep, timeout_s=timeout_s)
            except Unreachable as exc:
                raise DataError(f"cannot reach {ep.label} ({exc}); start the server or fix {self.flag}") from None
            if code in (401, 403):
                if self._has_key:
                    raise DataError(
                        f"{ep.label} refused the API key (HTTP {code}); pass the right key with --api-key or $OPENAI_API_KEY"
                    )
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

    async def check_local_images(self, ref: ImageRef, folder: Callable[[], Path | None]) -> None:
        """Under --local-images: raise DataError, in one sentence, unless every endpoint answers a
        request of the image file `ref` given by its file:// URL: vLLM reads none without
        --allowed-local-media-path over the images' folder (`folder()`, asked for the advice), a
        server elsewhere cannot. One request of one token an endpoint, before the run's first
        request; each attempt under the run's timeout."""
        url = file_url(ref, self.reencode_images)
        if url is None:
            return
        probe = Conversation([Message("user", [ref, LOCAL_IMAGES_PROBE])])
        body = request_body(self.name, probe, Generation(temperature=0.0, max_tokens=1), [url])
        for ep in self.endpoints:
            what = f"{ep.label} did not answer a request with an image given by its file:// URL"
            try:
                code, raw = await self.transport.probe(_chat_url, ep, body, self.retry.timeout_s)
            except Unreachable as exc:
                raise DataError(f"{what} ({exc}); start it, or drop --local-images") from None
            said = self.scrub(" ".join(error_message(raw).split())[:300])
            if (code == 429 or code >= 500) and not _NAMES_LOCAL_FILES.search(said):
                raise DataError(f"{what} (HTTP {code}: {said}); run again once it answers")  # busy or failing
            if code != 200:
                raise DataError(
                    f"{what} (HTTP {code}: {said}); a server on this machine reads the files under {folder()} "
                    "when allowed (vLLM: --allowed-local-media-path, which --serve vllm passes); start it so, or drop --local-images"
                )

    def _not_found(self, ep: Endpoint) -> str:
        """A 404 on `<base>/models` where the base does not end in /v1: the commonest slip."""
        parts = urlsplit(ep.base)
        fixed = redact_url(urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/v1")))
        return f"{ep.label} has no /models (HTTP 404): the URL probably lacks /v1; try {self.flag} {fixed}"

    # --- requests ------------------------------------------------------------------------------

    async def body(self, conversation: Conversation, generation: Generation) -> bytes:
        """The JSON body of the chat request for `conversation`, images encoded (also what a batch
        line holds, models/batching.py); DataError for a request over the byte budget."""
        return b"".join((await self._pieces(conversation, generation)).parts)

    async def _pieces(self, conversation: Conversation, generation: Generation) -> Pieces:
        pieces = Pieces.of(request_pieces(self.name, conversation, generation, await self._encode_images(conversation)))
        if self.max_request_bytes is not None and pieces.size > self.max_request_bytes:
            raise DataError(
                f"request_too_large: {pieces.size} bytes exceed --max-request-bytes {self.max_request_bytes}; "
                "not sent: downscale with --max-image-side or raise the budget"
            )
        return pieces

    async def complete(self, conversation: Conversation, generation: Generation) -> Reply:
        """Send one conversation under the retry policy; errors come back in Reply.error (scrubbed
        of credentials) with their `status` kind in Reply.error_kind. At most `max_in_flight`
        requests are posted to one endpoint at once; the others wait for a slot (a request waiting
        out a backoff holds none). `generation.timeout_s` bounds each attempt.

        Image problems and requests over the byte budget raise DataError: input faults, not sent.
        """
        pieces = await self._pieces(conversation, generation)
        body: bytes | Pieces = pieces if pieces.size >= PIECES_FROM_BYTES else b"".join(pieces.parts)
        start = time.perf_counter()
        try:
            got = await self.transport.post(_chat_url, body, chat_reply, CHAT, generation.timeout_s)
        except RequestError as exc:
            return Reply(
                error=str(exc),
                error_kind=exc.kind,
                attempts=exc.attempts,
                latency_s=time.perf_counter() - start,
                request_bytes=pieces.size,
                endpoint=exc.endpoint,
                usage=exc.usage,  # what invalid answers before it said they used
            )
        reply = self.hide_secrets(got.value)
        reply.usage = added_usage(got.spent, reply.usage)
        reply.latency_s = time.perf_counter() - start
        reply.attempts = got.attempts
        reply.request_bytes = pieces.size
        reply.endpoint = got.endpoint
        return reply


def chat_reply(raw: bytes) -> Reply:
    """A chat completion's answer (HTTP 200) as a Reply, or InvalidAnswer when it is none."""
    data = load_json(raw, "a chat completion")
    usage = data.get("usage") if isinstance(data, dict) else None
    billed = None if usage is None else clean_usage(usage)  # an answer that is none may be billed all the same
    try:
        choice = data["choices"][0]
        message = choice["message"]
        text = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning") or None
    except (KeyError, IndexError, TypeError, AttributeError):
        raise InvalidAnswer(
            f"invalid_response: not a chat completion: {head(raw)}", reason="sent no chat completion", usage=billed
        ) from None
    if not isinstance(text, str) or (reasoning is not None and not isinstance(reasoning, str)):
        raise InvalidAnswer(f"invalid_response: content is not text: {head(raw)}", reason="sent no text", usage=billed)
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    return Reply(
        text=writable(text),
        finish_reason=finish if isinstance(finish, str) else None,
        usage=billed,  # an impossible count is kept as unknown, never stored
        reasoning=None if reasoning is None else writable(reasoning),
    )


def _model_ids(raw: bytes) -> list[str] | None:
    """The model names of a `GET /models` answer, or None when it is not a model list."""
    try:
        data = json.loads(raw)
        ids = [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError):
        return None
    return ids
