"""OpenAI's Batch API (`/v1/files`, `/v1/batches`): send many chat requests as one batch, at the
price the provider gives batches, and map the answers back to their requests.

`BatchClient.run(requests)` uploads the requests (custom id -> chat request body) as JSONL,
creates the batch, polls it (calling `progress` with each status), streams the output and error
files line by line and returns a `BatchOutcome`: the answers by custom id, the errors by custom
id, the lines that could not be read (`invalid`, by the custom id they name) and the ids a batch
that ended without finishing (expired, failed, cancelled) left unanswered.

Money is never spent twice and a paid answer is never dropped:
- Every request (upload, create, poll, list, download) retries connection errors, timeouts, 429
  and 5xx with the HTTP layer's backoff (models/http.RetryPolicy). Only a 404 says a batch (or an
  expired batch's file) is gone (`BatchGone`); nothing else sends its requests again.
- The creation intent (the uploaded file id, the custom ids) is appended to the state file
  (`<run>/batches.jsonl`) before `POST /v1/batches`, and the batch id right after it answers.
  An intent without its batch (a kill during the POST, or a POST that failed) is looked up in the
  provider's batch list by its input file id (`recover`) before anything is created again; a
  failed POST is looked up the same way before it is retried.
- A malformed line of an output file is that request's `invalid` entry; the others are kept.
- An answer without an `id`, a batch that does not finish within the deadline (the API's 24 h
  completion window by default) or a poll that fails for good raise `BatchStopped`: one sentence,
  the batch kept in the state file, so that rerunning the same command waits for it again.

`needlepoint eval --batch` sends its requests through `submit` and `wait` (models/batching.py):
there the state entries list their custom ids, so that a rerun waits for the batch that holds a
request whatever else it held (`known_ids`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from needlepoint.core import status
from needlepoint.core.errors import RequestError
from needlepoint.core.files import AppendLog
from needlepoint.core.redact import redact_url, scrub, url_secrets
from needlepoint.models.http import InvalidAnswer, RetryPolicy, endpoint, error_message, head, read_answer, retry_after_s

__all__ = [
    "BatchClient",
    "BatchGone",
    "BatchOutcome",
    "BatchStopped",
    "COMPLETION_WINDOW_H",
    "FINISHED",
    "MAX_LINE_BYTES",
    "batch_key",
]

FINISHED = ("completed", "expired", "failed", "cancelled")  # a batch in one of these states changes no more
CHAT_PATH = "/v1/chat/completions"
COMPLETION_WINDOW_H = 24.0  # the completion window the batches are created with ("24h"), the default deadline
MAX_LINE_BYTES = 256 * 1024 * 1024  # a longer output line is not read (it is that request's invalid line)
LIST_PAGES = 50  # pages of 100 batches looked through for a batch whose creation was not seen
_CUSTOM_ID = re.compile(rb'"custom_id"\s*:\s*"((?:[^"\\]|\\.){1,200})"')


class BatchGone(RequestError):
    """The provider no longer knows a batch (404), or the files of a batch it ended: its requests
    may go out again."""


class BatchStopped(BaseException):
    """A batch the run cannot follow for now (no id in an answer, the deadline passed, polls failing
    for good): the run stops taking samples, says `str(exc)` (one sentence: what to do next), and
    the samples waiting for the batch stay unrecorded, so that a rerun waits for it. A
    BaseException so that no sample's error handling records it as that sample's fault."""


class _Transient(RequestError):
    """A request that failed for good with a transient failure (connection, timeout, 429, 5xx)."""


@dataclass
class BatchOutcome:
    """What a finished batch answered: `answers` (custom id -> the response body of a 200),
    `errors` (custom id -> message, from the error file or a non-200 line), `invalid` (custom id ->
    why its line could not be read: not JSON, nested too deep, too long), `unanswered` (ids with
    none of these, left by an expired, failed or cancelled batch), its id and final status."""

    batch_id: str
    status: str
    answers: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)
    unanswered: list[str] = field(default_factory=list)


def batch_key(custom_ids: list[str]) -> str:
    """The digest that names a set of requests in the state file."""
    return hashlib.sha256("\n".join(sorted(custom_ids)).encode("utf-8")).hexdigest()[:32]


class BatchClient:
    """Batches against one OpenAI-compatible endpoint (module docstring). `poll_s` is the wait
    between status requests; `state` the run folder's batch file; `retry` the HTTP layer's retry
    policy; `deadline_h` how long one wait polls an unfinished batch before `BatchStopped`."""

    def __init__(
        self,
        base_url: str,
        state: Path,
        api_key: str | None = None,
        poll_s: float = 30.0,
        retry: RetryPolicy | None = None,
        deadline_h: float = COMPLETION_WINDOW_H,
    ) -> None:
        self.base = base_url
        self.label = redact_url(base_url)
        self.state = Path(state)
        self.poll_s = poll_s
        # a Batch API request costs nothing (creation is looked up before it is retried): at least
        # the default retries, whatever --max-retries says for the chat requests
        policy = retry or RetryPolicy()
        self.retry = dataclasses.replace(policy, max_retries=max(policy.max_retries, RetryPolicy.max_retries))
        self.deadline_h = deadline_h
        self._secrets = [api_key, *url_secrets(base_url)]
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    # --- the state file ------------------------------------------------------------------------

    def _entries(self) -> list[dict[str, Any]]:
        """The state file's entries, in order (none when it is missing; a torn last line skipped)."""
        try:
            lines = self.state.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError):
                continue  # a torn last line
            if isinstance(entry, dict):
                out.append(entry)
        return out

    def _append(self, entry: dict[str, Any]) -> None:
        log = AppendLog(self.state)
        log.append(entry)
        log.close()

    def _known(self, key: str) -> str | None:
        """The batch id the state file holds for a set of requests, if any (the last line wins)."""
        found = None
        for entry in self._entries():
            if entry.get("key") == key and isinstance(entry.get("batch"), str):
                found = entry["batch"]
        return found

    def known_ids(self) -> dict[str, str]:
        """Custom id -> the batch that was last created for it (state entries that list their
        ids; `submit` writes them), so that a rerun waits for a batch it already paid for."""
        found: dict[str, str] = {}
        for entry in self._entries():
            if isinstance(entry.get("batch"), str) and isinstance(entry.get("ids"), list):
                for cid in entry["ids"]:
                    found[str(cid)] = entry["batch"]
        return found

    def _open_intents(self) -> list[dict[str, Any]]:
        """Creation intents whose batch id was never written (a kill or a failure during the POST)."""
        entries = self._entries()
        settled = {e.get("input_file") for e in entries if isinstance(e.get("batch"), str)}
        settled |= {e.get("settled") for e in entries if isinstance(e.get("settled"), str)}
        return [e for e in entries if isinstance(e.get("intent"), str) and e["intent"] not in settled]

    async def recover(self, session: aiohttp.ClientSession | None = None) -> None:
        """Look up the batch of each open creation intent in the provider's batch list (by its
        input file id) and record it, so that `known_ids` names it; an intent with no batch there
        is marked settled (its POST never created one: its requests may go out again)."""
        intents = self._open_intents()
        if not intents:
            return
        if session is None:
            async with aiohttp.ClientSession() as own:
                return await self.recover(own)
        for intent in intents:
            try:
                batch_id = await self._find(session, intent["intent"])
            except RequestError as exc:  # not knowing whether it was created, creating it again could pay twice
                raise BatchStopped(
                    f"the batch list of {self.label} could not be read to find the batch of input file "
                    f"{intent['intent']} ({exc}); rerun the same command when the endpoint answers"
                ) from None
            if batch_id is None:
                self._append({"settled": intent["intent"], "key": intent.get("key")})
            else:
                self._append(_batch_entry(intent.get("key"), batch_id, intent["intent"], list(intent.get("ids") or [])))

    # --- requests ------------------------------------------------------------------------------

    async def _send(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        form: Callable[[], aiohttp.FormData] | None = None,
        tries: int | None = None,
    ) -> Any:
        """One request under the retry policy, its JSON answer; BatchGone for a 404, RequestError
        for another 4xx, _Transient when every try failed transiently."""
        url = endpoint(self.base, path)

        async def once() -> tuple[int, bytes, float | None]:
            data = form() if form is not None else None  # a form is written once: one per attempt
            timeout = aiohttp.ClientTimeout(total=self.retry.timeout_s)
            async with session.request(method, url, headers=self._headers, json=json_body, data=data, timeout=timeout) as resp:
                return resp.status, await read_answer(resp), retry_after_s(resp.headers.get("Retry-After"))

        raw = await self._retrying(path, once, tries if tries is not None else self.retry.max_retries + 1, "no answer")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            message = f"{self.label} {method} {path}: the answer is not JSON: {head(raw, 100)}"
            raise _Transient(status.BACKEND_ERROR, self._scrub(message)) from None

    async def _retrying(
        self, path: str, once: Callable[[], Awaitable[tuple[int, bytes, float | None]]], attempts: int, silence: str
    ) -> bytes:
        """`once()` (status, body, Retry-After) under the retry policy until it answers 200: its
        body. A 404 is BatchGone, another 4xx RequestError; timeouts, connection errors, 429 and
        5xx are tried again, and _Transient names the last once every try failed."""
        why = ""
        for attempt in range(attempts):
            retry_after = None
            try:
                code, raw, retry_after = await once()
            except asyncio.TimeoutError:
                why = f"timeout: {silence} within {self.retry.timeout_s:g} s"
            except aiohttp.ClientError as exc:
                why = f"connection: {exc.__class__.__name__}: {exc}"
            except InvalidAnswer as exc:  # over MAX_ANSWER_BYTES
                why = str(exc)
            else:
                if code == 200:
                    return raw
                if code == 404:
                    raise BatchGone(
                        status.BACKEND_ERROR, self._scrub(f"{self.label} {path}: http_404: {error_message(raw)[:300]}")
                    )
                if code != 429 and code < 500:
                    raise RequestError(status.BACKEND_ERROR, self._scrub(f"{self.label} {path}: http_{code}: {head(raw, 300)}"))
                why = f"http_{code}: {head(raw)}"
            if attempt + 1 < attempts:
                await asyncio.sleep(self.retry.delay(attempt, retry_after))
        raise _Transient(status.BACKEND_ERROR, self._scrub(f"{self.label} {path}: {why} (gave up after {attempts} attempts)"))

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    def _id(self, answer: Any, what: str, stop: str) -> str:
        """The `id` of an answer, or BatchStopped (one sentence, `stop` what to do next)."""
        got = answer.get("id") if isinstance(answer, dict) else None
        if isinstance(got, str) and got:
            return got
        raise BatchStopped(f"{self.label} answered {what} without an id, so the batch cannot be followed; {stop}")

    async def check(self) -> str | None:
        """Why this endpoint cannot take batches (one sentence), or None: `GET /v1/files` and
        `GET /v1/batches` must answer, as OpenAI's do, before a run relies on them."""
        async with aiohttp.ClientSession() as session:
            for path in ("files?purpose=batch", "batches?limit=1"):
                name = "/v1/" + path.split("?")[0]
                try:
                    got = await self._send(session, "GET", path, tries=2)
                except RequestError as exc:
                    why = str(exc).removeprefix(f"{self.label} {path}: ")
                    return (
                        f"--batch needs OpenAI's Batch API, but GET {name} at {self.label} answered {why}: "
                        "drop --batch or give an --api-url that has /v1/files and /v1/batches"
                    )
                if not isinstance(got, dict):
                    return f"--batch needs OpenAI's Batch API, but GET {name} at {self.label} answered no list: drop --batch"
        return None

    async def _find(self, session: aiohttp.ClientSession, file_id: str) -> str | None:
        """The batch created from the input file `file_id`, looked up in the provider's batch list."""
        after: str | None = None
        for _ in range(LIST_PAGES):
            page = await self._send(session, "GET", "batches?limit=100" + (f"&after={after}" if after else ""))
            rows = page.get("data") if isinstance(page, dict) else None
            if not isinstance(rows, list):
                return None
            for row in rows:
                if isinstance(row, dict) and row.get("input_file_id") == file_id and isinstance(row.get("id"), str):
                    return str(row["id"])
            last = rows[-1].get("id") if rows and isinstance(rows[-1], dict) else None
            if not (isinstance(page, dict) and page.get("has_more") and isinstance(last, str)):
                return None
            after = last
        return None

    async def submit(self, lines: Sequence[tuple[str, bytes]], session: aiohttp.ClientSession | None = None) -> str:
        """Upload `lines` (custom id, the JSON body of a chat request) as a JSONL file, record the
        intent to create their batch, create it and record its id before returning: a kill from
        then on resumes it, a kill during the creation looks it up (module docstring)."""
        if session is None:
            async with aiohttp.ClientSession() as own:
                return await self.submit(lines, own)
        ids = [cid for cid, _ in lines]
        key = batch_key(ids)
        data = b"".join(
            b'{"custom_id":'
            + json.dumps(cid).encode("utf-8")
            + b',"method":"POST","url":"'
            + CHAT_PATH.encode()
            + b'","body":'
            + body
            + b"}\n"
            for cid, body in lines
        )

        def form() -> aiohttp.FormData:
            out = aiohttp.FormData()
            out.add_field("purpose", "batch")
            out.add_field("file", data, filename="requests.jsonl", content_type="application/jsonl")
            return out

        uploaded = await self._send(session, "POST", "files", form=form)
        file_id = self._id(uploaded, "POST /v1/files", "nothing was sent to a batch: check the endpoint's Batch API and rerun")
        self._append({"key": key, "intent": file_id, "requests": len(ids), "ids": ids, "at": time.time()})
        batch_id = await self._create(session, file_id, key)
        self._append(_batch_entry(key, batch_id, file_id, ids))  # on disk before the first wait
        return batch_id

    async def _create(self, session: aiohttp.ClientSession, file_id: str, key: str) -> str:
        """POST /v1/batches for an uploaded file; a transient failure is looked up in the batch
        list (the POST may have created it) before the POST is tried again."""
        body = {
            "input_file_id": file_id,
            "endpoint": CHAT_PATH,
            "completion_window": "24h",
            "metadata": {"needlepoint_key": key},
        }
        attempts = self.retry.max_retries + 1
        for attempt in range(attempts):
            try:
                created = await self._send(session, "POST", "batches", json_body=body, tries=1)
            except _Transient:
                if attempt + 1 == attempts:
                    raise
                await asyncio.sleep(self.retry.delay(attempt, None))
                found = await self._find(session, file_id)
                if found is not None:
                    return found
                continue
            stop = (
                f"its creation is recorded in {self.state}: check the provider's batch list for input file "
                f"{file_id} before you rerun, as a rerun looks it up there"
            )
            return self._id(created, "POST /v1/batches", stop)
        raise AssertionError("unreachable")

    async def wait(
        self,
        batch_id: str,
        ids: Sequence[str],
        progress: Callable[[dict[str, Any]], None] | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> BatchOutcome:
        """Poll a batch until it changes no more (calling `progress` with each status), then stream
        its output and error files; `ids` are the requests the caller waits for (the rest
        unanswered). BatchGone when the provider no longer knows it, BatchStopped when it cannot
        be followed for now (past the deadline, polls failing for good)."""
        if session is None:
            async with aiohttp.ClientSession() as own:
                return await self.wait(batch_id, ids, progress, own)
        rerun = f"it is kept in {self.state}: rerun the same command to wait for it again"
        deadline = time.monotonic() + self.deadline_h * 3600
        while True:
            try:
                batch = await self._send(session, "GET", f"batches/{batch_id}")
            except BatchGone:
                raise
            except RequestError as exc:
                raise BatchStopped(f"batch {batch_id} could not be polled ({exc}); {rerun}") from None
            if not isinstance(batch, dict):
                batch = {}
            batch.setdefault("id", batch_id)
            if progress is not None:
                progress(batch)
            if batch.get("status") in FINISHED:
                break
            if time.monotonic() >= deadline:
                raise BatchStopped(
                    f"batch {batch_id} did not finish within --batch-deadline {self.deadline_h:g} h "
                    f"(it is {batch.get('status')}); {rerun} (or cancel it at the provider first, and the "
                    "requests it left unanswered go out again)"
                )
            await asyncio.sleep(self.poll_s)
        outcome = BatchOutcome(batch_id, str(batch["status"]))
        for name in ("output_file_id", "error_file_id"):
            file_id = batch.get(name)
            if isinstance(file_id, str) and file_id:
                try:
                    await self._read_file(session, file_id, outcome)
                except BatchGone:
                    raise  # its answers can no longer be read (the file expired): its requests go out again
                except RequestError as exc:
                    raise BatchStopped(f"the answers of batch {batch_id} could not be read ({exc}); {rerun}") from None
        outcome.unanswered = [i for i in ids if i not in outcome.answers and i not in outcome.errors and i not in outcome.invalid]
        return outcome

    async def run(
        self, requests: Mapping[str, dict[str, Any]], progress: Callable[[dict[str, Any]], None] | None = None
    ) -> BatchOutcome:
        """Send `requests` (custom id -> chat request body) as one batch, or resume the batch the
        state file holds for them; wait for it to finish and return what it answered."""
        ids = list(requests)
        async with aiohttp.ClientSession() as session:
            await self.recover(session)
            batch_id = self._known(batch_key(ids))
            if batch_id is None:
                batch_id = await self.submit([(i, json.dumps(requests[i]).encode("utf-8")) for i in ids], session)
            return await self.wait(batch_id, ids, progress, session)

    # --- output files --------------------------------------------------------------------------

    async def _read_file(self, session: aiohttp.ClientSession, file_id: str, outcome: BatchOutcome) -> None:
        """Stream a file's lines into `outcome` (retried from its start on a transient failure:
        a line read twice lands in the same place)."""
        path = f"files/{file_id}/content"
        url = endpoint(self.base, path)

        async def once() -> tuple[int, bytes, float | None]:
            timeout = aiohttp.ClientTimeout(total=None, sock_read=self.retry.timeout_s)
            async with session.get(url, headers=self._headers, timeout=timeout) as resp:
                if resp.status == 200:
                    async for line in _lines(resp.content.iter_chunked(1 << 16)):
                        _read_line(line, outcome)
                    return 200, b"", None
                return resp.status, await resp.content.read(4096), retry_after_s(resp.headers.get("Retry-After"))

        await self._retrying(path, once, self.retry.max_retries + 1, "no data")

    @staticmethod
    def _read_lines(raw: bytes, outcome: BatchOutcome) -> None:
        """Each line of an output or error file into `outcome`, by its custom id."""
        for line in raw.splitlines():
            _read_line(line, outcome)


def _batch_entry(key: Any, batch_id: str, file_id: str, ids: list[str]) -> dict[str, Any]:
    return {"key": key, "batch": batch_id, "input_file": file_id, "requests": len(ids), "ids": ids}


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The lines of a stream of chunks; a line over MAX_LINE_BYTES comes as its first
    MAX_LINE_BYTES bytes and the rest of it is skipped."""
    buf = bytearray()
    skipping = False
    async for chunk in chunks:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                if not skipping:
                    buf += chunk[start:]
                    if len(buf) > MAX_LINE_BYTES:
                        yield bytes(buf[:MAX_LINE_BYTES])
                        buf.clear()
                        skipping = True
                break
            if not skipping:
                buf += chunk[start:end]
                yield bytes(buf)
            buf.clear()
            skipping = False
            start = end + 1
    if buf and not skipping:
        yield bytes(buf)


def _read_line(line: bytes, outcome: BatchOutcome) -> None:
    """One line of an output or error file into `outcome`, by its custom id; a line that cannot
    be read is its custom id's `invalid` entry (where the line names one)."""
    if not line.strip():
        return
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        entry = None
    if not isinstance(entry, dict) or not isinstance(entry.get("custom_id"), str):
        named = _CUSTOM_ID.search(line[:4096])
        if named is None:
            return  # names no request: the requests it may have answered stay unanswered
        try:
            cid = json.loads(b'"' + named.group(1) + b'"')
        except ValueError:
            return
        if cid not in outcome.answers:
            why = "not JSON" if entry is None else "not a batch output line"
            outcome.invalid[cid] = f"invalid_response: the batch's output line for this request is {why}: {head(line, 100)}"
        return
    cid = entry["custom_id"]
    got = entry.get("response")
    response: dict[str, Any] = got if isinstance(got, dict) else {}
    if response.get("status_code") == 200 and isinstance(response.get("body"), dict):
        outcome.answers[cid] = response["body"]
        outcome.invalid.pop(cid, None)
    else:
        error = entry.get("error") or response.get("body") or "no answer"
        outcome.errors[cid] = json.dumps(error) if not isinstance(error, str) else error
