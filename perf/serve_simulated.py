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

With --bytes-only, a chat request's body is read but not parsed, and every request gets --reply:
a Python server that parses each body (json.loads of a 4 MB MM-NIAH document takes about 17 ms
here) answers at most a few dozen such requests a second, less than the client it measures; a
real server parses on its own cores. --script does not go with it. An image given by its file://
URL (`eval --local-images`) is read from disk, as a server that reads the files itself does.

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
    cls = SimulatedServer if not ns.capacity else _capped(ns.capacity)
    cls = _bytes_only(cls, ns.reply) if ns.bytes_only else cls
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


def _bytes_only(base: type[SimulatedServer], reply: str) -> type[SimulatedServer]:
    """`base` answering every chat request with `reply` after reading its body unparsed."""
    answer = json.dumps(
        {
            "id": "sim",
            "object": "chat.completion",
            "model": "bench",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()

    class BytesOnly(base):  # type: ignore[valid-type,misc]
        async def _chat(self, request: Any) -> Any:
            from aiohttp import web

            body = await request.read()
            first = body.find(b'"url":"')  # the first image's URL (orjson's spacing); a file URL: --local-images
            if first >= 0 and body.startswith(b"file://", first + 7):  # the server reads the files
                for found in _FILE_URL.finditer(body):
                    with open(url2pathname(found.group(1).decode()), "rb") as fh:
                        fh.read()
            self.log.append(("", 0))
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            return web.Response(body=answer, content_type="application/json")

    return BytesOnly


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
