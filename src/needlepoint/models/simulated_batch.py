"""The simulated model with OpenAI's Batch API: `/v1/files`, `/v1/files/{id}/content`,
`/v1/batches`, `/v1/batches/{id}`, on 127.0.0.1 in a background thread, for `eval --batch`
against `needlepoint demo --serve` and in the tests.

Each line of a batch is answered by POSTing its body to the server's own `/v1/chat/completions`,
so a batch answers exactly as the live path does (the same script, the same usage). Counters say
what a client did: `uploads`, `created` (batches created), `polls` and `listed` (batch list
pages); `inputs` keeps each uploaded file's custom ids.

Faults a test sets (attributes): `poll_errors` (the next N status polls answer 500),
`create_errors` (the next N batch creations create the batch and answer 500: the answer lost),
`create_stall_s` (a creation answers only after this many seconds: a kill during the POST),
`no_id` ("files" or "batches": that answer carries no `id`, the batch created all the same) and
`corrupt` (a function of (line number, custom id, line) -> the bytes written for that output line).
"""

from __future__ import annotations

import json
from typing import Any

from needlepoint.models.simulated import SimulatedServer

__all__ = ["BatchServer"]


class BatchServer(SimulatedServer):
    """Batches on top of SimulatedServer. A batch takes `polls_to_finish` status requests to
    finish, and never while `hold` is set. The first `partial_batches` batches created answer their
    odd lines with an error-file line each; the first `expire_batches` end `expired` with only the
    first half of their lines answered."""

    polls_to_finish: int = 2
    hold: bool = False
    partial_batches: int = 0
    expire_batches: int = 0
    poll_errors: int = 0
    create_errors: int = 0
    create_stall_s: float = 0.0
    no_id: str = ""
    corrupt: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.inputs: list[list[str]] = []
        self.uploads = 0
        self.created = 0
        self.polls = 0
        self.listed = 0

    def _add_routes(self, app: Any) -> None:
        app.router.add_post("/v1/files", self._upload)
        app.router.add_get("/v1/files", self._files)
        app.router.add_get("/v1/files/{id}/content", self._content)
        app.router.add_post("/v1/batches", self._create)
        app.router.add_get("/v1/batches", self._list)
        app.router.add_get("/v1/batches/{id}", self._batch)

    async def _observe_request(self, request: Any, handler: Any) -> Any:
        if request.path.startswith(("/v1/files", "/v1/batches")):
            return await handler(request)  # an upload's form is read once, by its handler
        return await super()._observe_request(request, handler)

    async def _upload(self, request: Any) -> Any:
        from aiohttp import web

        form = await request.post()
        if form.get("purpose") != "batch" or not hasattr(form.get("file"), "file"):
            return _refusal(400, "upload the batch's JSONL as `file` with purpose `batch`")
        self.uploads += 1
        file_id = f"file-{len(self.files)}"
        self.files[file_id] = form["file"].file.read()
        self.inputs.append([json.loads(line)["custom_id"] for line in self.files[file_id].splitlines()])
        if self.no_id == "files":
            return web.json_response({"object": "file", "purpose": "batch"})
        return web.json_response({"id": file_id, "object": "file", "purpose": "batch"})

    async def _files(self, request: Any) -> Any:
        from aiohttp import web

        rows = [{"id": f, "object": "file", "purpose": "batch"} for f in self.files]
        return web.json_response({"object": "list", "data": rows, "has_more": False})

    async def _list(self, request: Any) -> Any:
        """Batches newest first, `limit` a page, `after` the last id of the page before."""
        from aiohttp import web

        self.listed += 1
        rows = [self._shown(b) for b in reversed(self.batches.values())]
        after = request.query.get("after")
        if after is not None:
            ids = [r["id"] for r in rows]
            rows = rows[ids.index(after) + 1 :] if after in ids else []
        limit = int(request.query.get("limit", "20"))
        page = rows[:limit]
        return web.json_response(
            {"object": "list", "data": page, "has_more": len(rows) > limit, "last_id": page[-1]["id"] if page else None}
        )

    async def _content(self, request: Any) -> Any:
        from aiohttp import web

        file_id = request.match_info["id"]
        if file_id not in self.files:
            return _refusal(404, "no such file")
        return web.Response(body=self.files[file_id], content_type="application/jsonl")

    async def _create(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.json()
        if body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h":
            return _refusal(400, "a batch is of /v1/chat/completions requests, with completion_window 24h")
        if body.get("input_file_id") not in self.files:
            return _refusal(404, "no such file")
        self.created += 1
        batch_id = f"batch-{self.created}"
        total = len(self.files[body["input_file_id"]].splitlines())
        self.batches[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "status": "in_progress",
            "input_file_id": body["input_file_id"],
            "request_counts": {"total": total, "completed": 0, "failed": 0},
            "polls": 0,
            "partial": self.created <= self.partial_batches,
            "expire": self.created <= self.expire_batches,
            "metadata": body.get("metadata"),
        }
        if self.create_stall_s:
            import asyncio

            await asyncio.sleep(self.create_stall_s)
        if self.create_errors > 0:
            self.create_errors -= 1
            return _refusal(500, "simulated: the batch was created, its answer lost")
        if self.no_id == "batches":
            return web.json_response({k: v for k, v in self._shown(self.batches[batch_id]).items() if k != "id"})
        return web.json_response(self._shown(self.batches[batch_id]))

    @staticmethod
    def _shown(batch: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in batch.items() if k not in ("polls", "partial", "expire")}

    async def _batch(self, request: Any) -> Any:
        from aiohttp import web

        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _refusal(404, "no such batch")
        self.polls += 1
        if self.poll_errors > 0:
            self.poll_errors -= 1
            return _refusal(500, "simulated: the status is not available now")
        batch["polls"] += 1
        if batch["status"] == "in_progress" and not self.hold and batch["polls"] >= self.polls_to_finish:
            await self._finish(batch)
        return web.json_response(self._shown(batch))

    async def _finish(self, batch: dict[str, Any]) -> None:
        """Answer the batch's lines through the live chat route, then write its output and error files."""
        import aiohttp

        lines = [json.loads(x) for x in self.files[batch["input_file_id"]].splitlines()]
        out: list[dict[str, Any]] = []
        err: list[dict[str, Any]] = []
        async with aiohttp.ClientSession() as session:
            for k, line in enumerate(lines):
                cid = line["custom_id"]
                if batch["expire"] and k >= len(lines) // 2:
                    continue
                if batch["partial"] and k % 2:
                    err.append({"custom_id": cid, "response": None, "error": {"code": "server_error", "message": "simulated"}})
                    continue
                async with session.post(f"{self.url}/chat/completions", json=line["body"]) as resp:
                    answer = await resp.json(content_type=None)
                    code = resp.status
                out.append({"custom_id": cid, "response": {"status_code": code, "body": answer}, "error": None})
        batch["status"] = "expired" if batch["expire"] else "completed"
        batch["request_counts"].update(completed=len(out), failed=len(err))
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                file_id = f"file-{len(self.files)}"
                lines = [json.dumps(r).encode() for r in rows]
                if self.corrupt is not None and name == "output_file_id":
                    lines = [self.corrupt(k, r["custom_id"], x) for k, (r, x) in enumerate(zip(rows, lines, strict=True))]
                self.files[file_id] = b"".join(x + b"\n" for x in lines)
                batch[name] = file_id


def _refusal(status: int, message: str) -> Any:
    """An error answer in OpenAI's shape."""
    from aiohttp import web

    return web.json_response({"error": {"message": message}}, status=status)
