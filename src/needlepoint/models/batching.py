"""`needlepoint eval --batch`: a model whose requests go out as OpenAI batches (models/batch.py)
instead of one HTTP request each, so that the runner and the solvers stay as they are.

`BatchingModel.complete` builds the chat request exactly as the HTTP client does, queues it under
a custom id (a digest of its body: the same request has the same id in every run) and awaits its
answer. A collector sends the queue as one batch once every sample in flight is waiting for an
answer (the caller says how many samples are in flight: `expect` and `recorded`), or, where it
cannot know, once the queue has been quiet for `quiet_s`. A repair turn arrives after its
sample's first answer and goes out in the next batch, and so on until no sample asks more.

Before sending, the batch of each creation intent the run folder's state file
(`<run>/batches.jsonl`) holds without its batch id is looked up at the provider (a kill during
`POST /v1/batches`), and each request whose id the state file names is waited for in that batch:
a needlepoint killed while waiting or creating, rerun, waits for the batch it already paid for.
Only a batch the provider no longer knows (404) has its requests sent again. A request the batch
did not answer (an error line, or a batch that expired, failed or was cancelled) comes back as a
`backend_error` reply (retryable with `--retry-failed`, which sends it in a new batch); a line of
the output file that cannot be read is that request's `invalid_response` (a `backend_error`
whose message says so), the other answers of the file are kept.

A batch that cannot be followed for now (an answer without an id, polls failing for good, the
deadline passed) raises `BatchStopped` in every call waiting for it: the run stops taking
samples, those samples stay unrecorded, and `stopped` holds the sentence (what to do next).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from needlepoint.core import status
from needlepoint.core.conversation import Conversation, Generation, Reply
from needlepoint.core.errors import RequestError
from needlepoint.models.batch import COMPLETION_WINDOW_H, BatchClient, BatchGone, BatchOutcome, BatchStopped
from needlepoint.models.http import InvalidAnswer
from needlepoint.models.openai_compat import OpenAICompatModel, chat_reply

__all__ = ["BATCH_STATE", "MAX_BATCH_BYTES", "MAX_BATCH_REQUESTS", "BatchingModel", "batch_progress", "custom_id_of"]

BATCH_STATE = "batches.jsonl"  # in the run folder
MAX_BATCH_REQUESTS = 50_000  # OpenAI's limit of requests per batch (also the samples --batch keeps in flight)
MAX_BATCH_BYTES = 190 * 1024 * 1024  # OpenAI takes batch files of up to 200 MB; a larger queue is split


@dataclass
class _Call:
    custom_id: str
    body: bytes
    future: asyncio.Future[Any]
    settled: bool = False


def custom_id_of(body: bytes) -> str:
    """The custom id of a request body: a digest of it, the same in every run."""
    return "np-" + hashlib.sha256(body).hexdigest()[:32]


def batch_progress(
    out: TextIO | None = None, every_s: float = 300.0, clock: Callable[[], float] = time.monotonic
) -> Callable[[dict[str, Any]], None]:
    """A progress callback that prints one plain line (no terminal needed) per change of a
    batch's status or counts, `batch ID: in_progress, 3/10 completed, 1 failed`, and the same line
    with the time waited at least every `every_s` seconds while nothing changes."""
    shown: dict[str, tuple[str, float]] = {}
    started: dict[str, float] = {}

    def show(batch: dict[str, Any]) -> None:
        got = batch.get("request_counts")
        counts: dict[str, Any] = got if isinstance(got, dict) else {}
        key = str(batch.get("id"))
        line = (
            f"batch {key}: {batch.get('status')}, {counts.get('completed', 0)}/{counts.get('total', '?')} "
            f"completed, {counts.get('failed', 0)} failed"
        )
        now = clock()
        start = started.setdefault(key, now)
        last = shown.get(key)
        if last is not None and last[0] == line and now - last[1] < every_s:
            return
        shown[key] = (line, now)
        waited = f" (waiting {_minutes(now - start)})" if last is not None and last[0] == line else ""
        print(line + waited, file=out or sys.stderr, flush=True)

    return show


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


class BatchingModel:
    """The `Model` of a `--batch` run (module docstring): `inner` builds the requests and names the
    endpoint; `state` is the run folder's batch file; `poll_s` the wait between status requests."""

    def __init__(
        self,
        inner: OpenAICompatModel,
        state: Path,
        api_key: str | None = None,
        poll_s: float = 30.0,
        quiet_s: float = 30.0,
        progress: Callable[[dict[str, Any]], None] | None = None,
        deadline_h: float = COMPLETION_WINDOW_H,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.reencode_images = inner.reencode_images
        self.label = inner.endpoints[0].label
        self.client = BatchClient(inner.endpoints[0].base, state, api_key, poll_s, inner.retry, deadline_h)
        self.quiet_s = quiet_s
        self.progress = progress
        self._queue: list[_Call] = []
        self._waiting = 0  # requests queued or in a batch, not answered yet
        self._active: int | None = None  # samples in flight (None: unknown, the quiet time decides)
        self._left = 0
        self._workers = 0
        self._wake: asyncio.Event | None = None
        self._collector: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._known: dict[str, str] | None = None
        self.stopped: str | None = None  # why a batch could not be followed (BatchStopped), once one could not

    # --- what the caller says about the samples in flight --------------------------------------

    def expect(self, samples: int, workers: int) -> None:
        """The run answers `samples` samples, `workers` at a time."""
        self._left, self._workers = samples, workers
        self._active = min(samples, workers)

    def recorded(self, *_: Any) -> None:
        """A sample's record is stored (RunOptions.on_record): one fewer in flight."""
        if self._active is None:
            return
        self._left = max(0, self._left - 1)
        self._active = min(self._left, self._workers)
        self._kick()

    # --- the Model interface -------------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """`text` without the credentials (the inner client's scrub)."""
        return self.inner.scrub(text)

    def wait_note(self) -> str | None:
        """What the run waits for: its batches, when any is out."""
        return f"waiting for {len(self._sending)} batch(es)" if self._sending else None

    async def aclose(self) -> None:
        """Stop the collector and close the inner client."""
        tasks = [t for t in (self._collector, *self._sending) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.inner.aclose()

    async def complete(self, conversation: Conversation, generation: Generation) -> Reply:
        """Queue the request for the next batch and wait for its answer (module docstring). Image
        problems and requests over the byte budget raise DataError, as the HTTP client's do."""
        body = await self.inner.body(conversation, generation)
        loop = asyncio.get_running_loop()
        size = len(body)
        call = _Call(custom_id_of(body), body, loop.create_future())
        del body  # the call holds it until it is uploaded, no longer
        self._queue.append(call)
        self._waiting += 1
        self._start()
        self._kick()
        try:
            got = await call.future
        finally:
            if not call.settled:  # cancelled while waiting
                self._settle(call, None)
        if isinstance(got, Reply):
            got.request_bytes = size
            return got
        try:
            reply = self.inner.hide_secrets(chat_reply(json.dumps(got).encode("utf-8")))
        except InvalidAnswer as exc:
            return Reply(
                error=self.scrub(str(exc)),
                error_kind=status.BACKEND_ERROR,
                request_bytes=size,
                endpoint=self.label,
                usage=exc.usage,
            )
        reply.request_bytes = size
        reply.endpoint = self.label
        return reply

    # --- the collector -------------------------------------------------------------------------

    def _start(self) -> None:
        if self._collector is None or self._collector.done():
            self._wake = asyncio.Event()
            self._collector = asyncio.ensure_future(self._collect())

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _settle(self, call: _Call, value: Any, error: BaseException | None = None) -> None:
        """Answer a call (an answer body, a Reply, or `error`); it waits no more from here on, so
        that the next check counts only samples still waiting."""
        if call.settled:
            return
        call.settled = True
        self._waiting -= 1
        if call.future.done():
            return
        if error is not None:
            call.future.set_exception(error)
        else:
            call.future.set_result(value)

    def _ready(self) -> bool:
        """Every sample in flight waits for an answer: no more requests can come before one."""
        return self._active is not None and self._waiting >= self._active

    async def _collect(self) -> None:
        assert self._wake is not None
        while True:
            if self._queue and not self._ready():
                try:
                    await asyncio.wait_for(self._wake.wait(), self.quiet_s)
                except asyncio.TimeoutError:
                    self._flush()  # quiet for quiet_s: send what there is
            elif self._queue:
                self._flush()
            else:
                await self._wake.wait()
            self._wake.clear()

    def _flush(self) -> None:
        """Send the queue: requests a batch of the state file holds wait for it, the rest go out as
        new batches (at most MAX_BATCH_REQUESTS requests and MAX_BATCH_BYTES each)."""
        queued, self._queue = self._queue, []
        task = asyncio.ensure_future(self._send(queued))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, calls: list[_Call]) -> None:
        try:
            if self._known is None:
                await self.client.recover()  # batches whose creation was not seen to its end
                self._known = self.client.known_ids()
            by_batch: dict[str, list[_Call]] = {}
            fresh: list[_Call] = []
            for call in calls:
                known = self._known.get(call.custom_id)
                if known is None:
                    fresh.append(call)
                else:
                    by_batch.setdefault(known, []).append(call)
            again = await asyncio.gather(*(self._resume(batch_id, group) for batch_id, group in by_batch.items()))
            fresh.extend(c for group in again for c in group)
            await asyncio.gather(*(self._new(chunk) for chunk in _chunks(fresh)))
        except BatchStopped as exc:
            self.stopped = self.stopped or str(exc)
            for call in calls:  # each waiting sample stops unrecorded: a rerun waits for the batch
                self._settle(call, None, exc)
        except BaseException as exc:
            for call in calls:
                self._settle(call, None, exc if isinstance(exc, Exception) else asyncio.CancelledError())
            if not isinstance(exc, Exception):
                raise

    async def _resume(self, batch_id: str, calls: list[_Call]) -> list[_Call]:
        """Wait for a batch the state file names; return the calls it left unanswered (an error
        or no answer): those go out again in a new batch, as they would on --retry-failed."""
        try:
            outcome = await self.client.wait(batch_id, _ids(calls), self.progress)
        except BatchGone:
            return calls  # the provider no longer knows it (or its files expired): ask again
        left = []
        for call in calls:
            answer = outcome.answers.get(call.custom_id)
            if answer is not None:
                self._settle(call, answer)
            else:  # an error, an unreadable line, no answer: asked again, as --retry-failed asks
                left.append(call)
        return left

    def _invalid(self, outcome: BatchOutcome, cid: str) -> Reply:
        return Reply(
            error=f"{self.scrub(outcome.invalid[cid])[:500]} (batch {outcome.batch_id})",
            error_kind=status.BACKEND_ERROR,
            endpoint=self.label,
        )

    async def _new(self, calls: list[_Call]) -> None:
        """Send `calls` as one new batch and resolve each from its outcome."""
        ids = _ids(calls)
        try:
            batch_id = await self.client.submit(_unique(calls))
            for call in calls:
                call.body = b""  # uploaded: a long wait holds no request bodies
            assert self._known is not None
            self._known.update(dict.fromkeys(ids, batch_id))
            outcome = await self.client.wait(batch_id, ids, self.progress)
        except RequestError as exc:
            for call in calls:
                self._settle(call, Reply(error=str(exc), error_kind=exc.kind, endpoint=self.label))
            return
        self._resolve(calls, outcome)

    def _resolve(self, calls: list[_Call], outcome: BatchOutcome) -> None:
        for call in calls:
            cid = call.custom_id
            if cid in outcome.answers:
                self._settle(call, outcome.answers[cid])
                continue
            if cid in outcome.invalid:
                self._settle(call, self._invalid(outcome, cid))
                continue
            if cid in outcome.errors:
                error = f"batch {outcome.batch_id} answered this request with an error: {self.scrub(outcome.errors[cid])[:500]}"
            else:
                error = f"batch {outcome.batch_id} ended {outcome.status} without answering this request"
            self._settle(call, Reply(error=error, error_kind=status.BACKEND_ERROR, endpoint=self.label))


def _ids(calls: list[_Call]) -> list[str]:
    return list(dict.fromkeys(c.custom_id for c in calls))


def _unique(calls: list[_Call]) -> list[tuple[str, bytes]]:
    """One batch line per distinct request (identical requests share their answer)."""
    seen: dict[str, bytes] = {}
    for call in calls:
        seen.setdefault(call.custom_id, call.body)
    return list(seen.items())


def _chunks(calls: list[_Call]) -> list[list[_Call]]:
    """`calls` in groups a batch takes: MAX_BATCH_REQUESTS distinct requests, MAX_BATCH_BYTES."""
    out: list[list[_Call]] = []
    current: list[_Call] = []
    ids: set[str] = set()
    size = 0
    for call in calls:
        new = call.custom_id not in ids
        if current and new and (len(ids) >= MAX_BATCH_REQUESTS or size + len(call.body) > MAX_BATCH_BYTES):
            out.append(current)
            current, ids, size = [], set(), 0
            new = True
        current.append(call)
        if new:
            ids.add(call.custom_id)
            size += len(call.body)
    if current:
        out.append(current)
    return out
