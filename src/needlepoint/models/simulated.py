"""A simulated model served over a real local HTTP endpoint, for the demo, tests and benchmarks.

It is honest about what it is: it answers from a script that the demo writes from the ground truth
(with controlled mistakes), and its model name says "simulated". It speaks the OpenAI chat
protocol on 127.0.0.1 only, and can inject the faults real servers show (429 with short or
absurd Retry-After, 5xx, hangs, dropped connections, invalid JSON, vLLM's 400 error bodies, error
bodies that echo the credentials, reasoning replies without content, a wrong key, a model list
without the model asked for) for the tests of the client.

It also serves a simulated embedding model as vLLM serves one (`POST /v1/embeddings` with text
`input` lists or a chat-style `messages` image request, `POST /tokenize`), deterministic and named
as simulated: a text's vector is a bag of its words hashed into 64 signed dimensions, an image's the
vector of its dominant colour's name, and `/tokenize` counts whitespace-separated words. The RAG
baseline's tests, demo and benchmark run against it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit
from urllib.request import url2pathname

from needlepoint.core.conversation import Conversation

SIMULATED_MODEL_NAME = "needlepoint-simulated"
SIMULATED_EMBEDDER_NAME = "needlepoint-simulated-embedder"
EMBED_DIM = 64
_WORD = re.compile(r"[a-z0-9]+")
# Words that say nothing about a piece: left out of the simulated text vectors.
_STOP = frozenset("a an the of is was are in on at to and or what which how many does do did summarize".split())
COLOUR_NAMES = {
    "red": (220, 30, 30),
    "green": (30, 180, 30),
    "blue": (30, 30, 220),
    "yellow": (230, 210, 30),
    "grey": (128, 128, 128),
}

ScriptReply = str | Mapping[str, Any]
"""A scripted answer: its text, or {"text": ..., "finish_reason": ..., "reasoning": ...,
"reasoning_field": "reasoning_content"}; a text of None is sent as `content: null`."""

# vLLM's answers to a prompt over the context and to too many images (as its OpenAI server sends them).
VLLM_CONTEXT_ERROR = {
    "object": "error",
    "message": "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
    "(8000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_IMAGES_ERROR = {
    "object": "error",
    "message": "At most 8 image(s) may be provided in one prompt.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}


# The hostile answers an embedding server may give (SimulatedServer.embed_faults).
EMBED_FAULTS = ("wide", "narrow", "ragged", "nan", "inf", "empty", "zeros", "bool", "text", "short", "index", "deep", "notjson")
OMIT = object()  # a tokenize fault's value that removes the key from the answer (e.g. {"count": OMIT})


def hostile_embeddings(fault: str, answer: dict[str, Any]) -> Any:
    """`answer` (an embeddings answer) spoilt as `fault` says: vectors one number longer or shorter,
    of two lengths, with a NaN, an infinity, no numbers, all zeros, `true` or a string in them; one
    vector too few; duplicate indices; JSON nested 5,000 deep; a body that is not JSON (bytes)."""
    rows = answer["data"]
    first = rows[0]["embedding"]
    if fault == "wide":
        for r in rows:
            r["embedding"] = [*r["embedding"], 0.5]
    elif fault == "narrow":
        for r in rows:
            r["embedding"] = r["embedding"][:-1]
    elif fault == "ragged":
        first.append(0.5)  # one vector longer than the others (a lone vector: longer than the probe's)
    elif fault in ("nan", "inf", "bool", "text"):
        first[0] = {"nan": float("nan"), "inf": float("inf"), "bool": True, "text": "0.5"}[fault]
    elif fault == "empty":
        rows[0]["embedding"] = []
    elif fault == "zeros":
        rows[0]["embedding"] = [0.0] * len(first)
    elif fault == "short":
        answer["data"] = rows[:-1]
    elif fault == "index":
        for r in rows:
            r["index"] = 0
    elif fault == "deep":
        return b"[" * 5000 + b"]" * 5000
    elif fault == "notjson":
        return b"{not json"
    else:
        raise ValueError(f"unknown embedding fault {fault!r}; use one of {', '.join(EMBED_FAULTS)}")
    return answer


def simulated_embedding(text: str) -> list[float]:
    """The simulated embedder's vector of a text: its content words (lower case) hashed into
    EMBED_DIM signed dimensions, plus a fixed pseudo-random part of the whole text (so that, as
    with a real model, a relevant sentence does not always win), unnormalised."""
    vector = [0.0] * EMBED_DIM
    for word in _WORD.findall(text.lower()):
        if word in _STOP:
            continue
        digest = hashlib.sha1(word.encode()).digest()
        vector[digest[0] % EMBED_DIM] += 1.0 if digest[1] % 2 else -1.0
    noise = hashlib.sha1(text.encode()).digest()
    for k in range(0, 8, 2):
        vector[noise[k] % EMBED_DIM] += (noise[k + 1] - 127.5) / 64
    return vector


def colour_name(rgb: Sequence[float]) -> str:
    """The name in COLOUR_NAMES nearest to a mean colour."""
    return min(COLOUR_NAMES, key=lambda n: sum((a - b) ** 2 for a, b in zip(COLOUR_NAMES[n], rgb)))


def simulated_image_embedding(data: bytes) -> list[float]:
    """The simulated embedder's vector of an image: that of its mean colour's name."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        mean = im.convert("RGB").resize((1, 1), Image.Resampling.BOX).getpixel((0, 0))
    return simulated_embedding(colour_name(mean))


def simulated_token_count(text: str) -> int:
    """What the simulated `/tokenize` answers: the number of whitespace-separated words."""
    return len(text.split())


def _first_user(messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
    for m in messages:
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content, []
            if not isinstance(content, list):
                return "", []
            text = "".join(p.get("text", "") for p in content if p.get("type") == "text")
            urls = [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]
            return text, urls
    return "", []


def _read_local_images(messages: list[dict[str, Any]], root: Path | None) -> tuple[int, str] | None:
    """Each image of `messages` given by a file:// URL replaced by the data URL of the file's bytes,
    as vLLM reads one under --allowed-local-media-path `root`; vLLM's refusal otherwise (its status
    and words: vLLM 0.32 answers 500 without the flag, 400 for a file elsewhere)."""
    for m in messages:
        content = m.get("content")
        for part in content if isinstance(content, list) else []:
            image = part.get("image_url") if part.get("type") == "image_url" else None
            if not isinstance(image, dict) or not str(image.get("url", "")).startswith("file:"):
                continue
            url = str(image["url"])
            if root is None:
                return 500, "Cannot load local files without `--allowed-local-media-path`."
            path = Path(url2pathname(urlsplit(url).path))
            if root.resolve() not in path.resolve().parents:
                return 400, f"The file path {path} must be a subpath of `--allowed-local-media-path {root}`."
            image["url"] = "data:image/jpeg;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return None


def request_key(messages: list[dict[str, Any]]) -> str:
    """What the server looks answers up by: the first user message's text, and a hash of its images
    (so that cases sharing a prompt text stay apart)."""
    text, urls = _first_user(messages)
    if not urls:
        return text
    return text + "#" + hashlib.sha1("".join(urls).encode()).hexdigest()[:16]


def script_key(conversation: Conversation) -> str:
    """The key under which the server finds its answer to `conversation` (see request_key)."""
    from needlepoint.core.images import base64_jpeg
    from needlepoint.models.openai_compat import DATA_URL_PREFIX, message_payload

    return request_key(message_payload(conversation, lambda ref: (DATA_URL_PREFIX + base64_jpeg(ref)).decode("ascii")))


_Server = TypeVar("_Server", bound="SimulatedServer")  # start() and `with` give back the subclass started


@dataclass
class SimulatedServer:
    """An OpenAI-compatible server on 127.0.0.1 running in a background thread.

    `script` maps a request key (see request_key; the first user message's text alone also works)
    to the answers for turn 1, 2, ...; `default` answers any other request. `faults` maps a key to a
    list of faults consumed one per request before it is answered: "429", "500", "400", "hang",
    "close", "badjson", "deep" (JSON nested 5,000 deep), "429long" (Retry-After: 100000), "429date" (Retry-After: a date in 2099),
    "context" and "images" (vLLM's 400 bodies), "echo" (a 400 whose body repeats the request's
    Authorization header and URL). `models` is what `GET /v1/models` lists; with `api_key` set, a
    request without that Bearer key gets 401; with `failing` set, every chat request gets 503.

    The embedding side: `embed_models` are the names `/v1/embeddings` and `/tokenize` accept (another
    gets vLLM's 404 "does not exist"); `tokenize=False` leaves `/tokenize` out (404, as a server
    without it); `embed_delay_s` delays each embedding request; `embed_log` keeps (endpoint, number
    of inputs) per embedding or tokenize request, in arrival order. `embed_faults` are consumed one
    per `/v1/embeddings` request, each a hostile answer of EMBED_FAULTS, "hang", an HTTP status
    ("500") or "" (a good answer); `tokenize_faults` one per `/tokenize` request, each "hang" or a dict that replaces keys
    of the answer (e.g. {"count": -1}). An embedding request's HTTP faults are the chat ones: any
    status ("503"; "429" with Retry-After `retry_after_s`), "429long", "429date", "context", "echo".
    `text_vector` and `image_vector` (of the image's bytes) make the vectors, for a test that sets
    each piece's score by hand; `tokenize_delay_s` delays each `/tokenize` request.

    `local_media`, as vLLM's --allowed-local-media-path: a chat request's image given by a file://
    URL under that folder is read and answered as its base64 would be; any other file URL gets
    vLLM's refusal.

    For the tests: `before_answer`, when set, is awaited with each chat request's key before it
    is answered (a test holds a request until something else has happened); `in_flight` counts
    the requests being answered now and `peak` the most at once; with `keep_requests`, `requests` keeps each chat request's (headers, JSON body) and
    `embed_requests` each embedding or tokenize request's (endpoint, JSON body), in arrival order
    (see `bodies`); a body that is not JSON is kept as None.
    """

    script: Mapping[str, list[ScriptReply]] = field(default_factory=dict)
    default: ScriptReply | None = '{"bboxes": [[0, 0, 10, 10]]}'
    delay_s: float = 0.0
    faults: dict[str, list[str]] = field(default_factory=dict)
    retry_after_s: float = 0.05
    log: list[tuple[str, int]] = field(default_factory=list)
    port: int = 0
    models: Sequence[str] = (SIMULATED_MODEL_NAME,)
    api_key: str | None = None
    failing: bool = False
    embed_models: Sequence[str] = (SIMULATED_EMBEDDER_NAME,)
    tokenize: bool = True
    embed_delay_s: float = 0.0
    embed_log: list[tuple[str, int]] = field(default_factory=list)
    embed_faults: list[str] = field(default_factory=list)
    tokenize_faults: list[Any] = field(default_factory=list)
    text_vector: Callable[[str], list[float]] = simulated_embedding
    image_vector: Callable[[bytes], list[float]] = simulated_image_embedding
    tokenize_delay_s: float = 0.0
    keep_requests: bool = False
    before_answer: Callable[[str], Awaitable[None]] | None = None
    local_media: Path | None = None

    def __post_init__(self) -> None:
        self.requests: list[tuple[dict[str, str], Any]] = []
        self.embed_requests: list[tuple[str, Any]] = []
        self.in_flight = 0
        self.peak = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        """The base URL to pass as --api-url."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self: _Server) -> _Server:
        """Start serving; returns self once the port is bound."""
        self._thread = threading.Thread(target=self._serve, name="simulated-model", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        """Stop serving and join the thread (a second call does nothing)."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def bodies(self, endpoint: str = "chat") -> list[Any]:
        """The JSON bodies kept (see `keep_requests`) of "chat", "embeddings" or "tokenize" requests."""
        if endpoint == "chat":
            return [body for _, body in self.requests]
        return [body for kind, body in self.embed_requests if kind == endpoint]

    def __enter__(self: _Server) -> _Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        loop.run_until_complete(self._setup())
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _setup(self) -> None:
        from aiohttp import web

        @web.middleware
        async def observe(request: Any, handler: Any) -> Any:
            return await self._observe_request(request, handler)

        app = web.Application(client_max_size=1 << 30, middlewares=[observe])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/embeddings", self._embeddings)
        if self.tokenize:
            app.router.add_post("/tokenize", self._tokenize)
        self._add_routes(app)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # _server is set once start() has returned

    def _add_routes(self, app: Any) -> None:
        """More routes for a subclass to serve (the Batch API of models/simulated_batch.py)."""

    async def _observe_request(self, request: Any, handler: Any) -> Any:
        """Count the request while it is answered and, with `keep_requests`, keep it."""
        if self.keep_requests and request.method == "POST":
            try:
                body = await request.json()  # aiohttp caches the body for the handler's read
            except ValueError:
                body = None
            if request.path == "/v1/chat/completions":
                self.requests.append((dict(request.headers), body))
            else:
                self.embed_requests.append((request.path.rsplit("/", 1)[-1], body))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1

    def _refused(self, request: Any) -> Any:
        from aiohttp import web

        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            body = {"object": "error", "message": "Unauthorized", "type": "AuthenticationError", "param": None, "code": 401}
            return web.json_response({"error": body}, status=401)
        return None

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]})

    def _unknown_model(self, body: Any) -> Any:
        from aiohttp import web

        model = body.get("model") if isinstance(body, dict) else None
        if model in self.embed_models:
            return None
        message = f"The model `{model}` does not exist."
        return web.json_response({"error": {"message": message, "type": "NotFoundError", "param": None, "code": 404}}, status=404)

    async def _embedding_body(self, request: Any) -> tuple[Any, Any]:
        """An embedding or tokenize request's body, or the refusal to answer instead (a missing
        key, a model this server does not embed with)."""
        refused = self._refused(request)
        if refused is not None:
            return None, refused
        body = await request.json()
        return body, self._unknown_model(body)

    async def _embeddings(self, request: Any) -> Any:
        from aiohttp import web

        body, refusal = await self._embedding_body(request)
        if refusal is not None:
            return refusal
        if self.embed_delay_s:
            await asyncio.sleep(self.embed_delay_s)
        fault = (self.embed_faults.pop(0) if self.embed_faults else "") or None  # "": answered as it should be
        if fault == "hang":
            await asyncio.sleep(3600)
        if fault is not None and fault not in EMBED_FAULTS:
            return self._http_fault(fault, request)
        if "messages" in body:
            self.embed_log.append(("embeddings", 1))
            urls = [p["image_url"]["url"] for m in body["messages"] for p in m.get("content", []) if p.get("type") == "image_url"]
            texts = "".join(p.get("text", "") for m in body["messages"] for p in m.get("content", []) if p.get("type") == "text")
            if urls:
                data = base64.b64decode(urls[0].split(",", 1)[1])
                vectors = [await asyncio.get_running_loop().run_in_executor(None, self.image_vector, data)]
            else:
                vectors = [self.text_vector(texts)]
        else:
            inputs = body.get("input")
            inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
            self.embed_log.append(("embeddings", len(inputs)))
            vectors = [self.text_vector(str(t)) for t in inputs]
        data_rows: list[Any] = [{"index": i, "object": "embedding", "embedding": v} for i, v in enumerate(vectors)]
        tokens = sum(simulated_token_count(str(t)) for t in (body.get("input") or []) if isinstance(t, str))
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        answer: Any = {"object": "list", "model": body["model"], "data": data_rows, "usage": usage}
        if fault is not None:
            answer = hostile_embeddings(fault, answer)
        if isinstance(answer, bytes):
            return web.Response(body=answer, content_type="application/json")
        return web.Response(text=json.dumps(answer), content_type="application/json")  # NaN and Infinity as Python writes them

    async def _tokenize(self, request: Any) -> Any:
        from aiohttp import web

        body, refusal = await self._embedding_body(request)
        if refusal is not None:
            return refusal
        self.embed_log.append(("tokenize", 1))
        fault = self.tokenize_faults.pop(0) if self.tokenize_faults else None
        if fault == "hang":
            await asyncio.sleep(3600)
        if self.tokenize_delay_s:
            await asyncio.sleep(self.tokenize_delay_s)
        n = simulated_token_count(str(body.get("prompt", "")))
        answer = {"count": n, "max_model_len": 512, "tokens": list(range(n)), "token_strs": None}
        if isinstance(fault, dict):
            answer = {k: v for k, v in {**answer, **fault}.items() if v is not OMIT}
        return web.json_response(answer)

    def _http_fault(self, fault: str, request: Any) -> Any:
        """The error answer a fault names: an HTTP status ("503"; a 429 says Retry-After
        `retry_after_s`), "429long"/"429date" (absurd waits), "context"/"images" (vLLM's 400 bodies),
        "echo" (a 400 repeating the request's Authorization header and URL)."""
        from aiohttp import web

        if fault in ("429long", "429date"):
            after = "100000" if fault == "429long" else "Thu, 01 Jan 2099 00:00:00 GMT"
            return web.Response(status=429, text="simulated 429: slow down", headers={"Retry-After": after})
        if fault in ("context", "images"):
            return web.json_response(VLLM_CONTEXT_ERROR if fault == "context" else VLLM_IMAGES_ERROR, status=400)
        if fault == "echo":
            auth = request.headers.get("Authorization", "")
            return web.Response(status=400, text=f"bad request to {request.url} with headers Authorization: {auth}")
        if fault.isdigit():
            headers = {"Retry-After": str(self.retry_after_s)} if fault == "429" else {}
            return web.Response(status=int(fault), text=f"simulated {fault}", headers=headers)
        raise ValueError(f"unknown fault {fault!r}")

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        body = await request.json()
        messages = body.get("messages", [])
        refusal = _read_local_images(messages, self.local_media)
        if refusal is not None:
            return web.json_response({"error": {"message": refusal[1], "code": refusal[0]}}, status=refusal[0])
        key = request_key(messages)
        if key not in self.script:
            key = _first_user(messages)[0]
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        self.log.append((key, turn))
        if self.failing:
            return web.Response(status=503, text="simulated 503: the server is failing")
        pending = self.faults.get(key)
        if pending:
            fault = pending.pop(0)
            if fault.isdigit() or fault in ("429long", "429date", "context", "images", "echo"):
                return self._http_fault(fault, request)
            if fault == "hang":
                await asyncio.sleep(3600)
            if fault == "close":
                request.transport.close()
                return web.Response(status=500)
            if fault == "deep":
                return web.Response(status=200, body=b"[" * 5000 + b"]" * 5000, content_type="application/json")
            if fault == "badjson":
                return web.Response(status=200, text="{not json", content_type="application/json")
        if self.before_answer is not None:
            await self.before_answer(key)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        answers = self.script.get(key)
        reply: ScriptReply | None = answers[min(turn, len(answers) - 1)] if answers else self.default
        if reply is None:
            return web.Response(status=404, text=f"the simulated model has no answer for this request: {key[:80]!r}")
        message: dict[str, Any] = {"role": "assistant"}
        text: str | None
        if isinstance(reply, str):
            text, finish = reply, "stop"
        else:
            raw = reply.get("text", "")
            text, finish = (None if raw is None else str(raw)), str(reply.get("finish_reason", "stop"))
            if reply.get("reasoning") is not None:
                message[str(reply.get("reasoning_field", "reasoning_content"))] = str(reply["reasoning"])
        message["content"] = text
        words = len((text or "").split())
        prompt_words = sum(len(_first_user([m])[0].split()) for m in messages if m.get("role") == "user")
        usage: dict[str, Any] = {"prompt_tokens": prompt_words, "completion_tokens": words, "total_tokens": prompt_words + words}
        if not isinstance(reply, str) and reply.get("reasoning") is not None:  # counted as OpenAI does: within completion
            thought = len(str(reply["reasoning"]).split())
            usage.update(completion_tokens=words + thought, total_tokens=prompt_words + words + thought)
            usage["completion_tokens_details"] = {"reasoning_tokens": thought}
        return web.Response(
            text=json.dumps(
                {
                    "id": "sim",
                    "object": "chat.completion",
                    "model": SIMULATED_MODEL_NAME,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            ),
            content_type="application/json",
        )
