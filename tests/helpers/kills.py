"""Killing real `needlepoint eval` processes mid-run: a gate that lets a local simulated server
answer a few requests and hold the rest, and a series of runs killed with -9 once the process has
taken in what it got (every thread asleep), then one that finishes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from needlepoint.models.simulated import SimulatedServer, request_key

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread states from /proc")
SRC = Path(__file__).resolve().parents[2] / "src"


def reaped(pid: int) -> bool:
    """Whether the child `pid` has ended and been waited for (by its parent, this process)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # no child of ours any more
        return True
    return False


class Gate:
    """Shared by the servers of a test: lets `allow` more requests through (None: all), holds the
    rest; counts requests and answers (a 200 written out) by key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.allow: int | None = None
        self.requested: Counter[str] = Counter()
        self.answered: Counter[str] = Counter()
        self.held = 0  # requests waiting in `enter`; a killed client's are cancelled when its socket's end is read
        self.round = 0
        self.rounds: dict[str, list[int]] = {}  # the rounds in which each key was answered, for a failure's message

    @property
    def total(self) -> int:
        with self.lock:
            return sum(self.answered.values())

    async def enter(self, key: str) -> None:
        with self.lock:
            self.requested[key] += 1
            self.held += 1
        try:
            while True:  # a killed client's held request is cancelled here (handler_cancellation)
                with self.lock:
                    if self.allow is None or self.allow > 0:
                        if self.allow is not None:
                            self.allow -= 1
                        return
                await asyncio.sleep(0.005)
        finally:
            with self.lock:
                self.held -= 1

    def done(self, key: str) -> None:
        with self.lock:
            self.answered[key] += 1
            self.rounds.setdefault(key, []).append(self.round)

    def settle(self) -> None:
        """Wait until no request is held: those of a killed client must be cancelled before the
        next round lets requests through, or one of them could take a place and be answered to a
        dead socket (counted as answered, then asked again by the next run)."""
        for _ in range(3000):  # bounded: at most about a minute
            with self.lock:
                if self.held == 0:
                    return
            time.sleep(0.02)
        raise AssertionError("requests of a killed client were still held after a minute")


@dataclass
class GatedServer(SimulatedServer):
    """The simulated server (chat, embeddings, /tokenize) behind a Gate. The endpoint checks'
    probes (the models list, a "summarize:" count and embedding) pass uncounted."""

    gate: Any = None

    async def _through(self, request: Any, key: str | None, handler: Any) -> Any:
        if key is None:
            return await handler(request)
        await self.gate.enter(key)
        resp = await handler(request)
        await resp.prepare(request)
        await resp.write_eof()  # on 127.0.0.1 the bytes are in the client's socket now
        if resp.status == 200:
            self.gate.done(key)
        return resp

    async def _chat(self, request: Any) -> Any:
        body = await request.json()
        messages = body.get("messages", [])
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        key = f"chat {body.get('model')} turn {turn}: {request_key(messages)}"
        return await self._through(request, key, super()._chat)

    async def _embeddings(self, request: Any) -> Any:
        body = await request.json()
        if "messages" in body:
            key: str | None = "image " + hashlib.sha1(json.dumps(body["messages"]).encode()).hexdigest()
        else:
            key = None if body.get("input") == ["summarize:"] else "texts " + json.dumps(body.get("input"))
        return await self._through(request, key, super()._embeddings)

    async def _tokenize(self, request: Any) -> Any:
        body = await request.json()
        key = None if body.get("prompt") == "summarize:" else "tokenize " + str(body.get("prompt"))
        return await self._through(request, key, super()._tokenize)


def _asleep(pid: int) -> bool:
    """True when every thread of the process sleeps (state S): it has taken in what it received."""
    try:
        states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in Path(f"/proc/{pid}/task").iterdir()]
    except (OSError, IndexError):
        return False
    return bool(states) and all(s == "S" for s in states)


def cli_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "needlepoint.cli", *args]


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}


def kill_series(args: list[str], gate: Gate, rounds: int, step: int) -> int:
    """Run `needlepoint eval ARGS` `rounds` times, each killed (SIGKILL) once `step` more requests
    were answered and the process has gone quiet; return how many runs were killed mid-run."""
    killed = 0
    for _ in range(rounds):
        gate.settle()
        before = gate.total
        with gate.lock:
            gate.allow = step
            gate.round += 1
        proc = subprocess.Popen(cli_command(args), env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(6000):  # bounded: at most about a minute
                if proc.poll() is not None or gate.total >= before + step:
                    break
                time.sleep(0.01)
            quiet, last = 0, gate.total
            for _ in range(1500):
                if proc.poll() is not None or quiet >= 5:
                    break
                time.sleep(0.02)
                now = gate.total
                quiet = quiet + 1 if now == last and _asleep(proc.pid) else 0
                last = now
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                killed += 1
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
    gate.settle()
    with gate.lock:
        gate.allow = None
        gate.round += 1
    return killed
