"""Serve needlepoint's simulated OpenAI-compatible model in its own process, for benchmarks.

    python perf/serve_simulated.py [--delay-ms 100] [--capacity K] [--port 0] [--reply TEXT] [--script FILE] [--stats FILE]

Prints the base URL (e.g. http://127.0.0.1:41234/v1) as the first line on stdout, then serves
until killed (SIGTERM or Ctrl-C). Every request gets the same reply after --delay-ms; the default
reply is a box in the JSON schema the Ref-Adv-s prompt asks for, so no repair turn is triggered.

With --capacity K at most K requests are answered at once (each takes --delay-ms); the others wait
their turn, as on a GPU server whose batch is full. One endpoint then serves at most
K / delay requests per second (perf/bench_endpoints.py).

With --script FILE (a JSON object: request key -> answers per turn, see SimulatedServer), requests
are answered from the script as in the demo, and a request the script does not know gets a 404.
It stands in for a vLLM server in the Slurm test (tests/test_slurm.py).

With --bytes-only, a chat request's body is counted as it arrives, neither kept nor parsed, and
every request gets --reply (`BytesOnlyServer`, a bare HTTP/1.1 server): a Python server that
parses each body (json.loads of a 4 MB MM-NIAH document takes about 17 ms here), or even
aiohttp's that only gathers it (about 6 ms), spends on the two shared cores what a real server
spends on its own. --script does not go with it. An image given by its file:// URL (`eval
--local-images`) is read from disk, in a thread during the delay, as a server that reads the
files itself does.

With --stats FILE, SIGUSR1 writes {"requests": n, "first": t0, "last": t1, "head": [t0, ...]} to FILE
(atomically): the number of chat requests received since the previous SIGUSR1 and the arrival
times (time.time(), taken once the body is read, just before the delay) of the first and the last
of them, and of the first 16 (`head`: a benchmark drops the probes a command sends before its run,
e.g. `eval --local-images`' one request); the counters then start again. A benchmark sends SIGUSR1
before a run (to reset) and after it (to read).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import threading
import time
from typing import Any
from urllib.request import url2pathname

from needlepoint.models.simulated import SimulatedServer

_FILE_URL = re.compile(rb'"file://([^"]+)"')
DEFAULT_REPLY = '```json\n{"bboxes": [[100, 100, 300, 260]]}\n```'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=0.0, help="answer each request after this many ms (default 0)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    parser.add_argument("--reply", default=DEFAULT_REPLY, help="the reply text for every request")
    parser.add_argument("--capacity", type=int, help="answer at most this many requests at once (default: no limit)")
    parser.add_argument("--script", help="JSON file of scripted answers (request key -> list of answers per turn)")
    parser.add_argument("--model", action="append", help="a model name GET /v1/models lists (repeat; default the simulated name)")
    parser.add_argument("--stats", help="file that SIGUSR1 writes the request count and arrival times to")
    parser.add_argument("--bytes-only", action="store_true", help="read chat bodies without parsing them; one reply for all")
    ns = parser.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    script = None
    if ns.script:
        with open(ns.script, encoding="utf-8") as fh:
            script = json.load(fh)
    if ns.bytes_only and ns.script:
        parser.error("--bytes-only answers every request with --reply: it does not read a --script")
    server: Any
    if ns.bytes_only:
        server = BytesOnlyServer(ns.reply, ns.delay_ms / 1000.0, ns.port, ns.capacity)
    else:
        cls = SimulatedServer if not ns.capacity else _capped(ns.capacity)
        if script is not None:
            server = cls(script=script, default=None, delay_s=ns.delay_ms / 1000.0, port=ns.port)
        else:
            server = cls(default=ns.reply, delay_s=ns.delay_ms / 1000.0, port=ns.port)
    if ns.model:
        server.models = tuple(ns.model)
    log = _ArrivalLog()
    server.log = log  # counts and times requests instead of keeping them all
    if ns.stats:
        signal.signal(signal.SIGUSR1, lambda *_: log.dump(ns.stats))
    server.start()
    print(server.url, flush=True)
    try:
        while not stop.wait(3600):
            pass
    finally:
        server.stop()
    return 0


def _capped(capacity: int) -> type[SimulatedServer]:
    """The simulated server answering at most `capacity` requests at once."""

    class Capped(SimulatedServer):
        _gate: asyncio.Semaphore | None = None

        async def _chat(self, request: Any) -> Any:
            if self._gate is None:  # created on the server's own loop
                self._gate = asyncio.Semaphore(capacity)
            async with self._gate:
                return await super()._chat(request)

    return Capped


def _answer(reply: str) -> bytes:
    """The chat completion every --bytes-only request gets, as a whole HTTP/1.1 response."""
    body = json.dumps(
        {
            "id": "sim",
            "object": "chat.completion",
            "model": "bench",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()
    return _response(200, body)


def _response(code: int, body: bytes) -> bytes:
    reason = {200: "OK", 404: "Not Found"}.get(code, "")
    head = f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class BytesOnlyServer:
    """The simulated model for long bodies (--bytes-only): a bare HTTP/1.1 server on asyncio's
    transports that counts each chat body's bytes as they come and keeps none of them, answering
    `reply` after `delay_s`. aiohttp's server, which gathers a body in a stream of small pieces and
    joins them, spent about 6 ms of CPU on each 4.3 MB MM-NIAH body here: 200 such requests took
    1.2 s of the two cores the measured client runs on, and held the rate of a client that sent
    ready-made bodies at 29-37% of the ideal (72-94% with this server; perf/NOTES.md). An image
    given by its file:// URL (--local-images) is read from disk, in a thread during the delay, as a
    server that reads the files itself does; a body is kept only up to its first image's URL, and
    whole when that URL is a file's. `GET /v1/models` lists `models`; anything else is a 404."""

    def __init__(self, reply: str, delay_s: float, port: int = 0, capacity: int | None = None) -> None:
        self.answer = _answer(reply)
        self.delay_s = delay_s
        self.port = port
        self.capacity = capacity
        self.models: tuple[str, ...] = ("needlepoint-simulated",)
        self.log: Any = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> BytesOnlyServer:
        self._thread = threading.Thread(target=self._serve, name="bytes-only", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        gate = asyncio.Semaphore(self.capacity) if self.capacity else None
        server = loop.run_until_complete(loop.create_server(lambda: _Connection(self, gate), "127.0.0.1", self.port))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        loop.run_forever()
        server.close()
        loop.close()


class _Connection(asyncio.Protocol):
    """One client connection of BytesOnlyServer: requests one after another (HTTP/1.1 keep-alive)."""

    def __init__(self, server: BytesOnlyServer, gate: asyncio.Semaphore | None) -> None:
        self.server = server
        self.gate = gate
        self.head = b""
        self.method = self.path = b""
        self.left: int | None = None  # body bytes still to come; None while reading a head
        self.chat = False
        self.answering: set[asyncio.Task[None]] = set()  # kept until they end (the loop holds tasks weakly)
        self.pieces: list[bytes] = []
        self.files: bool | None = None  # whether the images come by file:// URL (None: not known yet)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        while data:
            if self.left is None:
                self.head += data
                end = self.head.find(b"\r\n\r\n")
                if end < 0:
                    return
                data = self.head[end + 4 :]
                self._start(self.head[:end])
                self.head = b""
                if self.left:
                    continue
                self._finish()
                continue
            piece, data = data[: self.left], data[self.left :]
            self.left -= len(piece)
            if self.chat and self.files is not False:  # undecided, or decided for files: kept
                self.pieces.append(piece)
                if self.files is None:  # the first image's URL tells (orjson's spacing)
                    seen = b"".join(self.pieces[-2:])
                    at = seen.find(b'"url":"')
                    if at >= 0 and len(seen) >= at + 14:
                        self.files = seen.startswith(b"file://", at + 7)
                        if not self.files:
                            self.pieces = []
            if not self.left:
                self._finish()

    def _start(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        method, path = (lines[0].split(b" ") + [b"", b""])[:2]
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        self.method, self.path, self.left = method, path, length
        self.chat = method == b"POST" and path == b"/v1/chat/completions"
        self.pieces, self.files = [], None

    def _finish(self) -> None:
        self.left = None
        if self.method == b"GET" and self.path == b"/v1/models":
            listed = {"object": "list", "data": [{"id": m, "object": "model"} for m in self.server.models]}
            self.transport.write(_response(200, json.dumps(listed).encode()))
        elif not self.chat:
            self.transport.write(_response(404, b'{"error": {"message": "not found"}}'))
        else:
            self.server.log.append(("", 0))
            paths = [url2pathname(m.group(1).decode()) for m in _FILE_URL.finditer(b"".join(self.pieces))] if self.files else []
            self.pieces = []
            task = asyncio.ensure_future(self._answer(paths))
            self.answering.add(task)
            task.add_done_callback(self.answering.discard)

    async def _answer(self, paths: list[str]) -> None:
        if self.gate is not None:
            await self.gate.acquire()
        try:
            loop = asyncio.get_running_loop()
            reading = loop.run_in_executor(None, _read_files, paths) if paths else None
            await asyncio.sleep(self.server.delay_s)
            if reading is not None:
                await reading
        finally:
            if self.gate is not None:
                self.gate.release()
        if not self.transport.is_closing():
            self.transport.write(self.server.answer)


def _read_files(paths: list[str]) -> None:
    for path in paths:
        with open(path, "rb") as fh:
            fh.read()


HEAD_ARRIVALS = 16  # the first arrivals kept one by one: a command's probes come before its run


class _ArrivalLog(list):
    """A request log that keeps only the count, the first and last arrival times and the first
    HEAD_ARRIVALS of them (a benchmark drops the probes that a command sends before its run)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.count, self.first, self.last = 0, None, None
        self.head: list[float] = []

    def append(self, item: object) -> None:  # called by the server per request
        now = time.time()
        with self._lock:
            self.count += 1
            if self.first is None:
                self.first = now
            self.last = now
            if len(self.head) < HEAD_ARRIVALS:
                self.head.append(now)

    def dump(self, path: str) -> None:
        """Write the counters to `path` atomically and start again."""
        with self._lock:
            stats = {"requests": self.count, "first": self.first, "last": self.last, "head": self.head}
            self._reset()
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(stats, fh)
        os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
