"""OpenAI's Batch API (`/v1/files`, `/v1/batches`): send many chat requests as one batch, at the
price the provider gives batches, and map the answers back to their requests.

`BatchClient.run(requests)` uploads the requests (custom id -> chat request body) as JSONL,
creates the batch, polls it (calling `progress` with each status), downloads the output and error
files and returns a `BatchOutcome`: the answers by custom id, the errors by custom id, and the
ids a batch that ended without finishing (expired, failed, cancelled) left unanswered. The batch
id is appended to a state file (`<run>/batches.jsonl`) right after the batch is created and
before any wait, keyed by a digest of the custom ids it holds, so that a needlepoint killed while
waiting resumes the same batch instead of paying for it twice.

`needlepoint eval --batch` sends its requests through `submit` and `wait` (models/batching.py):
there the state entries list their custom ids, so that a rerun waits for the batch that holds a
request whatever else it held (`known_ids`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from needlepoint.core.errors import RequestError
from needlepoint.core.files import AppendLog
from needlepoint.core.redact import redact_url, scrub
from needlepoint.models.http import endpoint

__all__ = ["BatchClient", "BatchOutcome", "FINISHED", "batch_key"]

FINISHED = ("completed", "expired", "failed", "cancelled")  # a batch in one of these states changes no more
CHAT_PATH = "/v1/chat/completions"


@dataclass
class BatchOutcome:
    """What a finished batch answered: `answers` (custom id -> the response body of a 200),
    `errors` (custom id -> message, from the error file or a non-200 line), `unanswered` (ids
    with neither, left by an expired, failed or cancelled batch), its id and final status."""

    batch_id: str
    status: str
    answers: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    unanswered: list[str] = field(default_factory=list)


def batch_key(custom_ids: list[str]) -> str:
    """The digest that names a set of requests in the state file."""
    return hashlib.sha256("\n".join(sorted(custom_ids)).encode("utf-8")).hexdigest()[:32]


class BatchClient:
    """Batches against one OpenAI-compatible endpoint (module docstring). `poll_s` is the wait
    between status requests; `state` the run folder's batch file."""

    def __init__(self, base_url: str, state: Path, api_key: str | None = None, poll_s: float = 30.0) -> None:
        self.base = base_url
        self.label = redact_url(base_url)
        self.state = Path(state)
        self.poll_s = poll_s
        self._secrets = [api_key]
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

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
            except ValueError:
                continue  # a torn last line
            if isinstance(entry, dict):
                out.append(entry)
        return out

    def _known(self, key: str) -> str | None:
        """The batch id the state file holds for a set of requests, if any (the last line wins)."""
        found = None
        for entry in self._entries():
            if entry.get("key") == key and isinstance(entry.get("batch"), str):
                found = entry["batch"]
        return found

    async def _json(self, session: aiohttp.ClientSession, method: str, path: str, **kw: Any) -> Any:
        url = endpoint(self.base, path)
        try:
            async with session.request(method, url, headers=self._headers, **kw) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    text = raw[:300].decode("utf-8", "replace")
                    raise RequestError("backend_error", scrub(f"{self.label} {path}: http_{resp.status}: {text}", self._secrets))
        except aiohttp.ClientError as exc:
            raise RequestError("backend_error", scrub(f"{self.label} {path}: {exc}", self._secrets)) from None
        if path.endswith("/content"):
            return raw
        try:
            return json.loads(raw)
        except ValueError:
            raise RequestError("backend_error", f"{self.label} {path}: the answer is not JSON") from None

    def known_ids(self) -> dict[str, str]:
        """Custom id -> the batch that was last created for it (state entries that list their
        ids; `submit` writes them), so that a rerun waits for a batch it already paid for."""
        found: dict[str, str] = {}
        for entry in self._entries():
            if isinstance(entry.get("batch"), str) and isinstance(entry.get("ids"), list):
                for cid in entry["ids"]:
                    found[str(cid)] = entry["batch"]
        return found

    async def submit(self, lines: Sequence[tuple[str, bytes]], session: aiohttp.ClientSession | None = None) -> str:
        """Upload `lines` (custom id, the JSON body of a chat request) as a JSONL file, create their
        batch and append its id to the state file before returning: a kill from then on resumes it."""
        if session is None:
            async with aiohttp.ClientSession() as own:
                return await self.submit(lines, own)
        ids = [cid for cid, _ in lines]
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
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", data, filename="requests.jsonl", content_type="application/jsonl")
        uploaded = await self._json(session, "POST", "files", data=form)
        created = await self._json(
            session,
            "POST",
            "batches",
            json={"input_file_id": uploaded["id"], "endpoint": CHAT_PATH, "completion_window": "24h"},
        )
        batch_id = str(created["id"])
        log = AppendLog(self.state)  # on disk before the first wait: a kill from here on resumes this batch
        log.append({"key": batch_key(ids), "batch": batch_id, "input_file": uploaded["id"], "requests": len(ids), "ids": ids})
        log.close()
        return batch_id

    async def wait(
        self,
        batch_id: str,
        ids: Sequence[str],
        progress: Callable[[dict[str, Any]], None] | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> BatchOutcome:
        """Poll a batch until it changes no more (calling `progress` with each status), then read its
        output and error files; `ids` are the requests the caller waits for (the rest unanswered)."""
        if session is None:
            async with aiohttp.ClientSession() as own:
                return await self.wait(batch_id, ids, progress, own)
        while True:
            batch = await self._json(session, "GET", f"batches/{batch_id}")
            if progress is not None:
                progress(batch)
            if batch.get("status") in FINISHED:
                break
            await asyncio.sleep(self.poll_s)
        outcome = BatchOutcome(batch_id, str(batch["status"]))
        for name in ("output_file_id", "error_file_id"):
            file_id = batch.get(name)
            if file_id:
                self._read_lines(await self._json(session, "GET", f"files/{file_id}/content"), outcome)
        outcome.unanswered = [i for i in ids if i not in outcome.answers and i not in outcome.errors]
        return outcome

    async def run(
        self, requests: Mapping[str, dict[str, Any]], progress: Callable[[dict[str, Any]], None] | None = None
    ) -> BatchOutcome:
        """Send `requests` (custom id -> chat request body) as one batch, or resume the batch the
        state file holds for them; wait for it to finish and return what it answered."""
        ids = list(requests)
        async with aiohttp.ClientSession() as session:
            batch_id = self._known(batch_key(ids))
            if batch_id is None:
                batch_id = await self.submit([(i, json.dumps(requests[i]).encode("utf-8")) for i in ids], session)
            return await self.wait(batch_id, ids, progress, session)

    @staticmethod
    def _read_lines(raw: bytes, outcome: BatchOutcome) -> None:
        """Each line of an output or error file into `outcome`, by its custom id."""
        for line in raw.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("custom_id"), str):
                continue
            cid = entry["custom_id"]
            got = entry.get("response")
            response: dict[str, Any] = got if isinstance(got, dict) else {}
            if response.get("status_code") == 200 and isinstance(response.get("body"), dict):
                outcome.answers[cid] = response["body"]
            else:
                error = entry.get("error") or response.get("body") or "no answer"
                outcome.errors[cid] = json.dumps(error) if not isinstance(error, str) else error
