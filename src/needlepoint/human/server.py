"""The local web page a person answers on: an aiohttp server over one HumanRun.

Safety: it binds 127.0.0.1 unless told otherwise; every address starts with a random token
(`/<token>/...`, compared in constant time), so that no other page or user of the machine can
read the samples or post answers; images are addressed by sample id and position, never by a
path, and served only when the file, links followed, lies inside the data folder and opens as an
image; every answer is checked
(answers.py) and refused with one sentence; the page's script puts data texts in with
`textContent` only, and the Content-Security-Policy allows no inline script and nothing from
elsewhere.
"""

from __future__ import annotations

import asyncio
import hmac
import io
import json
import secrets
import sys
import threading
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web

from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.images import lies_inside, read_image
from needlepoint.human.kinds import ONE_BOX, declared
from needlepoint.human.runs import HumanRun
from needlepoint.human.views import gold_answer, instructions, sample_view
from needlepoint.report.thumbs import GROUP_COLOURS

__all__ = ["HumanServer"]

ASSETS = ("page.html", "page.css", "page.js", "icon.svg")
TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]  # what a middleware wraps
MAX_POST = 4 << 20  # bytes of one posted answer


def _image_type(data: bytes) -> str:
    """The media type of encoded image bytes, from their signature (never from a file name)."""
    for magic, kind in ((b"\x89PNG", "image/png"), (b"\xff\xd8", "image/jpeg"), (b"GIF8", "image/gif"), (b"BM", "image/bmp")):
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "application/octet-stream"


def _decodes(data: bytes) -> bool:
    """Whether the bytes open as an image (Pillow reads the header only: a cheap check)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            return bool(im.width > 0 and im.height > 0)
    except Exception:  # Pillow raises many types for what is no image
        return False


class HumanServer:
    """The page over `run`. `start()` serves from a thread (tests, embedding); `serve()` until cancelled."""

    def __init__(self, run: HumanRun, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self.run = run
        self.host = host
        self.port = port
        self.token = token or secrets.token_urlsafe(24)
        self.root = run.data if run.data.is_dir() else run.data.parent
        self.declaration = declared(run.bench_name)  # its title and its kind of page
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._scoring: set[asyncio.Future[Any]] = set()  # finish() calls under way
        self._order = run.plan.order()
        self._samples = {s.id: s for s in run.dataset.subset(self._order)}

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/{self.token}/"

    # --- the app -----------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_POST, middlewares=[self._guard])
        app.router.add_get("/{token}/", self._asset)
        app.router.add_get("/{token}/static/{name}", self._asset)
        app.router.add_get("/{token}/api/state", self._state)
        app.router.add_get("/{token}/api/sample", self._sample)
        app.router.add_get("/{token}/api/image", self._image)
        app.router.add_post("/{token}/api/answer", self._answer)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        """Refuse any address without the token (403, the same answer for every wrong one), and
        give every response the safety headers."""
        first = request.path.split("/", 2)[1] if request.path.count("/") >= 1 else ""
        if not hmac.compare_digest(first.encode(), self.token.encode()):
            return web.Response(
                status=403, text="forbidden: open the address needlepoint printed, with its token\n", headers=HEADERS
            )
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(HEADERS)
            raise
        response.headers.update(HEADERS)
        return response

    async def _asset(self, request: web.Request) -> web.Response:
        name = request.match_info.get("name", "page.html")
        if name not in ASSETS:
            return _refuse(404, f"no asset {name[:80]!r}")
        body = resources.files("needlepoint.human").joinpath("assets").joinpath(name).read_bytes()
        return web.Response(body=body, content_type=TYPES[Path(name).suffix], charset="utf-8")

    async def _state(self, request: web.Request) -> web.Response:
        done = self.run.done()
        gold = set(self.run.plan.gold_ids)
        return _json(
            {
                "benchmark": self.run.bench_name,
                "title": self.declaration.title,
                "kind": self.declaration.human,
                "annotator": self.run.annotator,
                "instructions": instructions(self.run.bench_name, self.run.confidence),
                "confidence": self.run.confidence,
                "colours": list(GROUP_COLOURS),
                "order": [{"id": i, "gold": i in gold, "done": i in done} for i in self._order],
                "run": str(self.run.dir),
            }
        )

    def _known(self, request: web.Request) -> Any:
        sample = self._samples.get(request.query.get("id", ""))
        if sample is None:
            raise web.HTTPNotFound(text="no such sample in this plan\n")
        return sample

    async def _sample(self, request: web.Request) -> web.Response:
        sample = self._known(request)
        base = f"/{self.token}/api/image?id={quote(sample.id, safe='')}&i="
        try:
            view = sample_view(self.run.bench_name, sample, lambda i: f"{base}{i}")
        except DataError as exc:  # the data file changed or went away during the session
            return _refuse(409, str(exc))
        record = self.run.done().get(sample.id)
        view.update(
            id=sample.id,
            gold=self.run.plan.is_gold(sample.id),
            given=None if record is None else {"answer": record.get("answer"), "solver": record.get("solver")},
        )
        return _json(view)

    async def _image(self, request: web.Request) -> web.Response:
        sample = self._known(request)
        refs = [sample.image] if self.declaration.human == ONE_BOX else list(sample.images)
        text = request.query.get("i", "")
        if not (
            text.isascii() and text.isdigit() and len(text) <= 6 and int(text) < len(refs)
        ):  # no -1: no counting from the end
            return _refuse(404, "no such image of this sample")
        ref = refs[int(text)]
        if ref.path is not None:
            try:  # the file itself, links followed: a link inside the folder to a file outside is refused
                resolved = await asyncio.to_thread(ref.path.resolve, strict=True)
            except (OSError, RuntimeError):
                return _refuse(404, "the image cannot be read (no such file)")
            if not lies_inside(self.root, resolved):
                return _refuse(403, "that image lies outside the data folder")
            ref = ImageRef(ref.key, resolved)
        try:
            data = await asyncio.to_thread(read_image, ref)
        except (OSError, DataError) as exc:
            return _refuse(404, f"the image cannot be read ({exc})")
        kind = _image_type(data)
        if kind == "application/octet-stream" or not await asyncio.to_thread(_decodes, data):
            return _refuse(415, "that file is not an image")
        return web.Response(body=data, content_type=kind)

    async def _answer(self, request: web.Request) -> web.Response:
        try:
            body = await request.json(loads=_strict_loads)
        except (ValueError, RecursionError):
            return _refuse(400, "the answer is not JSON; reload the page")
        if not isinstance(body, dict):
            return _refuse(400, "the answer is not a JSON object; reload the page")
        try:
            record = self.run.add(
                body.get("id"),  # type: ignore[arg-type]  # checked by add
                body.get("answer"),
                seconds=body.get("seconds", 0.0),
                unsure=body.get("unsure", False),
                note=body.get("note", ""),
                skipped=body.get("skipped", False),
            )
        except DataError as exc:
            return _refuse(400, str(exc))
        out: dict[str, Any] = {"ok": True, "id": record["id"], "scores": None}
        if self.run.plan.is_gold(record["id"]):
            out["gold"] = gold_answer(self.run.bench_name, self.run.dataset, self._samples[record["id"]])
        if not self.run.pending():  # the plan is done: score it (in the background; the page moves on)
            task = asyncio.ensure_future(asyncio.to_thread(self.run.finish))
            task.add_done_callback(_report_failure)
            self._scoring.add(task)
        return _json(out)

    # --- serving -------------------------------------------------------------------------------
    async def open(self) -> None:
        """Bind and start serving (the port is known once this returns)."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:  # port 0: the one the system chose
            self.port = int(sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop serving, once any scoring under way has written its files."""
        if self._scoring:
            await asyncio.gather(*self._scoring, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start(self) -> HumanServer:
        """Serve from a background thread; returns once the port is bound."""
        ready = threading.Event()
        failed: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.open())
            except BaseException as exc:  # reported to the caller of start
                failed.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.close())
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            raise failed[0]
        return self

    def stop(self) -> None:
        """Stop a server `start` began."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(300)  # scoring under way finishes first (close waits for it)


def _report_failure(task: asyncio.Future[Any]) -> None:
    """Say on stderr when scoring the finished plan failed (the answers are safe; a rerun scores again)."""
    if not task.cancelled() and task.exception() is not None:
        print(
            f"needlepoint human: scoring the plan failed ({task.exception()}); rerun the command to score again", file=sys.stderr
        )


def _strict_loads(text: str) -> Any:
    """JSON without NaN or Infinity (a number the scorer cannot use is refused, not parsed)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not a number")

    return json.loads(text, parse_constant=refuse)


def _json(value: Any) -> web.Response:
    return web.Response(text=json.dumps(value, ensure_ascii=False, allow_nan=False), content_type="application/json")


def _refuse(code: int, message: str) -> web.Response:
    return web.Response(status=code, text=json.dumps({"error": message}), content_type="application/json")
