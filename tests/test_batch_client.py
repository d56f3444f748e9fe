"""The Batch API client (models/batch.py) against a local aiohttp server that implements
`/v1/files` and `/v1/batches`: a batch that completes, one that completes partly (an error file),
one that expires half done, and a client killed while waiting that resumes the same batch."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from aiohttp import web

from needlepoint.models.batch import BatchClient


class BatchServer:
    """Files and batches in memory. `mode`: "complete" answers every line; "partial" answers the
    odd lines with an error file line each; "expire" ends as `expired` with the first half answered.
    A batch takes `polls_to_finish` status requests to finish."""

    def __init__(self, mode: str = "complete", polls_to_finish: int = 2) -> None:
        self.mode = mode
        self.polls_to_finish = polls_to_finish
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.created = 0
        self.polls = 0
        app = web.Application()
        app.router.add_post("/v1/files", self.upload)
        app.router.add_get("/v1/files/{id}/content", self.content)
        app.router.add_post("/v1/batches", self.create)
        app.router.add_get("/v1/batches/{id}", self.status)
        self.app = app
        self.url = ""

    async def upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        assert form["purpose"] == "batch"
        file_id = f"file-{len(self.files)}"
        upload = form["file"]
        assert isinstance(upload, web.FileField)
        self.files[file_id] = upload.file.read()
        return web.json_response({"id": file_id, "object": "file", "purpose": "batch"})

    async def content(self, request: web.Request) -> web.Response:
        return web.Response(body=self.files[request.match_info["id"]])

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        assert body["endpoint"] == "/v1/chat/completions" and body["completion_window"] == "24h"
        self.created += 1
        batch_id = f"batch-{self.created}"
        self.batches[batch_id] = {"id": batch_id, "status": "in_progress", "input_file_id": body["input_file_id"], "polls": 0}
        return web.json_response(self.batches[batch_id])

    def _finish(self, batch: dict[str, Any]) -> None:
        lines = [json.loads(x) for x in self.files[batch["input_file_id"]].splitlines()]
        out, err = [], []
        for k, line in enumerate(lines):
            text = "answer to " + line["body"]["messages"][0]["content"]
            ok = {
                "custom_id": line["custom_id"],
                "response": {"status_code": 200, "body": {"choices": [{"message": {"content": text}}]}},
            }
            if self.mode == "partial" and k % 2:
                err.append({"custom_id": line["custom_id"], "error": {"code": "server_error", "message": "simulated"}})
            elif self.mode == "expire" and k >= len(lines) // 2:
                continue
            else:
                out.append(ok)
        batch["status"] = "expired" if self.mode == "expire" else "completed"
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                file_id = f"file-{len(self.files)}"
                self.files[file_id] = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
                batch[name] = file_id

    async def status(self, request: web.Request) -> web.Response:
        batch = self.batches[request.match_info["id"]]
        self.polls += 1
        batch["polls"] += 1
        if batch["status"] == "in_progress" and batch["polls"] >= self.polls_to_finish:
            self._finish(batch)
        return web.json_response({k: v for k, v in batch.items() if k != "polls"})


def _requests(n: int) -> dict[str, dict[str, Any]]:
    return {f"call-{i}": {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(n)}


def test_complete_partial_and_expired_batches(tmp_path: Path) -> None:
    async def go() -> None:
        async with _Servers() as start:
            done = await start(mode="complete")
            seen: list[str] = []
            got = await BatchClient(done.url, tmp_path / "a.jsonl", poll_s=0.01).run(
                _requests(4), lambda b: seen.append(b["status"])
            )
            assert got.status == "completed" and seen[-1] == "completed" and "in_progress" in seen
            assert got.answers["call-2"]["choices"][0]["message"]["content"] == "answer to q2"
            assert len(got.answers) == 4 and not got.errors and not got.unanswered

            partial = await start(mode="partial")
            got = await BatchClient(partial.url, tmp_path / "b.jsonl", poll_s=0.01).run(_requests(4))
            assert sorted(got.answers) == ["call-0", "call-2"] and sorted(got.errors) == ["call-1", "call-3"]
            assert "server_error" in got.errors["call-1"] and not got.unanswered

            expiring = await start(mode="expire")
            got = await BatchClient(expiring.url, tmp_path / "c.jsonl", poll_s=0.01).run(_requests(4))
            assert got.status == "expired" and sorted(got.answers) == ["call-0", "call-1"]
            assert got.unanswered == ["call-2", "call-3"]  # left as failed, for a retry in a new batch

    asyncio.run(go())


def test_a_killed_client_resumes_the_same_batch(tmp_path: Path) -> None:
    async def go() -> None:
        async with _Servers() as start:
            server = await start(mode="complete", polls_to_finish=1000)
            state = tmp_path / "batches.jsonl"
            waiting = asyncio.ensure_future(BatchClient(server.url, state, poll_s=0.01).run(_requests(3)))
            while server.polls < 3:
                await asyncio.sleep(0.01)
            waiting.cancel()  # killed while it waits
            await asyncio.gather(waiting, return_exceptions=True)
            assert server.created == 1 and [json.loads(x).get("batch") for x in state.read_text().splitlines()] == [
                None,
                "batch-1",
            ]
            server.polls_to_finish = 0
            got = await BatchClient(server.url, state, poll_s=0.01).run(_requests(3))
            assert server.created == 1 and got.batch_id == "batch-1" and len(got.answers) == 3  # no second batch paid for
            other = await BatchClient(server.url, state, poll_s=0.01).run(_requests(2))  # other requests: a new batch
            assert server.created == 2 and other.batch_id == "batch-2"

    asyncio.run(go())


class _Servers:
    """Start BatchServers in the running loop; stop them on exit."""

    def __init__(self) -> None:
        self.runners: list[web.AppRunner] = []

    async def __aenter__(self) -> Any:
        async def start(**kw: Any) -> BatchServer:
            server = BatchServer(**kw)
            runner = web.AppRunner(server.app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            server.url = f"http://127.0.0.1:{port}/v1"
            self.runners.append(runner)
            return server

        return start

    async def __aexit__(self, *exc: object) -> None:
        for runner in self.runners:
            await runner.cleanup()
