"""The values that flow through a run: conversations sent to a model, its replies, and the
generation settings. Benchmarks build Conversations; models turn them into Replies.

Images stay references (a file path, or bytes in a parquet row) until a model client encodes them
for the request, so a Conversation is cheap to hold and a run's memory does not grow with its
length.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

MAIN = "model"  # the role of the model named by --model, in every turn a record keeps


@dataclass(frozen=True)
class ImageRef:
    """An image to send: a file on disk, or a loader that returns encoded bytes (parquet rows).

    `key` identifies the image for caching and for the run record; `max_side` asks the encoder to
    downscale so that neither side exceeds it.
    """

    key: str
    path: Path | None = None
    loader: Callable[[], bytes] | None = field(default=None, compare=False, repr=False)
    max_side: int | None = None

    def read_bytes(self) -> bytes:
        """The image file's bytes as stored."""
        if self.loader is not None:
            return self.loader()
        assert self.path is not None
        return self.path.read_bytes()


Part = str | ImageRef
"""A piece of a message: text, or an image."""


@dataclass
class Message:
    """One chat message; user messages may interleave text and images."""

    role: Literal["system", "user", "assistant"]
    parts: list[Part]

    @property
    def text(self) -> str:
        """The text parts, joined."""
        return "".join(p for p in self.parts if isinstance(p, str))

    @property
    def images(self) -> list[ImageRef]:
        """The image parts, in order."""
        return [p for p in self.parts if isinstance(p, ImageRef)]


@dataclass
class Conversation:
    """The messages of one request, oldest first."""

    messages: list[Message]

    def with_turn(self, reply: str, user_text: str) -> Conversation:
        """This conversation, followed by the model's reply and a new user message."""
        return Conversation([*self.messages, Message("assistant", [reply]), Message("user", [user_text])])

    def summary(self) -> dict[str, Any]:
        """What a run record keeps of a request: no image bytes."""
        return {
            "messages": len(self.messages),
            "images": [im.key for m in self.messages for im in m.images],
            "text_chars": sum(len(p) for m in self.messages for p in m.parts if isinstance(p, str)),  # no joined copy
        }


@dataclass(frozen=True)
class Generation:
    """Sampling settings sent with every request. None means: leave it to the server."""

    temperature: float | None = 0.0
    top_p: float | None = 1.0
    max_tokens: int | None = 1024
    seed: int | None = 7
    timeout_s: float = 180.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy, for the run header and the call cache's keys (built field by field:
        `dataclasses.asdict` costs a client CPU on every request)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "timeout_s": self.timeout_s,
            "extra": copy.deepcopy(self.extra) if self.extra else {},
        }


@dataclass
class Reply:
    """A model's answer to one request, or why there is none (`error` set)."""

    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    latency_s: float = 0.0
    attempts: int = 1
    error: str | None = None
    request_bytes: int = 0
    error_kind: str | None = None  # a status.REQUEST_FAILURES value when `error` is set
    reasoning: str | None = None  # a reasoning model's `reasoning_content` / `reasoning`, kept apart
    endpoint: str | None = None  # the redacted base URL that answered (or failed last)


class Model(Protocol):
    """Anything that answers a Conversation: the OpenAI-compatible client, a replay of a run's
    records, an in-process model. It bounds its own requests in flight (the one concurrency gate
    is at the model layer); `evaluate(model=...)` runs a benchmark with any of them."""

    name: str

    async def complete(self, conversation: Conversation, generation: Generation) -> Reply:
        """Answer one conversation; failures come back as Reply.error, never as exceptions."""
        ...


# The optional methods a model (or a solver's model or tool) may have; callers test for them with
# isinstance, so a model written for a test needs none of them.


@runtime_checkable
class Scrubs(Protocol):
    """Removes the credentials it knows (its API key) from a message."""

    def scrub(self, text: str) -> str: ...


@runtime_checkable
class WaitNotes(Protocol):
    """Says what a request in flight waits for (a retry, a slow endpoint), or None."""

    def wait_note(self) -> str | None: ...


@runtime_checkable
class ChecksEndpoints(Protocol):
    """A chat client that checks its endpoints answer before a run starts."""

    async def check_endpoints(self) -> None: ...


@runtime_checkable
class Checks(Protocol):
    """A tool (embedder, localizer) that checks its endpoint answers before a run starts."""

    async def check(self) -> None: ...


@runtime_checkable
class Closes(Protocol):
    """Holds connections to close at the end of the event loop that opened them."""

    async def aclose(self) -> None: ...


@runtime_checkable
class CountsEndpoints(Protocol):
    """Counts requests per endpoint (run.json's `endpoints`)."""

    def endpoint_stats(self) -> list[dict[str, Any]]: ...
