"""Never pay for an answer twice: kill -9 series of real `needlepoint eval` processes against local
servers that count every request by its key, for the agentic solver (reasoner + localizer) and the
RAG solver (embeddings, /tokenize, chat). Each round lets the servers answer a few requests, holds
the rest, waits until the process has taken in what it got (every thread asleep), kills it, and
waits until the server has dropped the dead client's held requests; the last run finishes. No
call that got its HTTP 200 is ever requested again."""

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
from helpers.agentic import FMT, LOCALIZER, REASONER, agentic_args, scripts

from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.mc_bench.demo import write_release as write_mc_release
from needlepoint.core.store import read_records
from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME, SIMULATED_MODEL_NAME, SimulatedServer, request_key

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread states from /proc")
SRC = Path(__file__).resolve().parents[1] / "src"


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


def _cli(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "needlepoint.cli", *args]


def _env() -> dict[str, str]:
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
        proc = subprocess.Popen(_cli(args), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def test_agentic_kill_series_pays_no_answer_twice(tmp_path: Path) -> None:
    folder, _ = write_mc_release(tmp_path / "mc", pairs=6)
    bench = McBench(box_format=FMT)
    samples = bench.load(folder)
    reasoner_script, localizer_script = scripts(bench, samples)
    gate = Gate()
    with (
        GatedServer(script=reasoner_script, default=None, models=(REASONER,), gate=gate) as reasoner,
        GatedServer(script=localizer_script, default=None, models=(LOCALIZER,), gate=gate) as localizer,
    ):
        out = tmp_path / "run"
        args = agentic_args(folder, reasoner.url, localizer.url, out, "--no-report", "--concurrency", "3")
        killed = kill_series(args, gate, rounds=4, step=3)
        done = subprocess.run(_cli(args), env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert killed >= 3  # the kills landed mid-run
    assert sum(gate.requested.values()) > sum(gate.answered.values())  # some held requests died with a process
    twice = {k: gate.rounds[k] for k, n in gate.answered.items() if n > 1}
    assert not twice, f"answered calls requested again after kill -9 (the rounds that answered them): {twice}"
    records = read_records(out / "records.jsonl")
    assert len(records) == len(samples) and {r["status"] for r in records.values()} == {"done"}
    # every call is in its record once, those answered before a kill marked as reused
    turns = [t for r in records.values() for t in r["turns"]]
    assert len(turns) == len(gate.answered) and any(t.get("reused") for t in turns)
    assert not any((out / "cache" / "calls").iterdir())  # a finished sample's calls are dropped with its record


def test_rag_kill_series_pays_no_embedding_count_or_chat_twice(tmp_path: Path) -> None:
    from needlepoint.benchmarks.mm_niah.demo import write_release

    folder = write_release(tmp_path / "niah", per_task=2)
    gate = Gate()
    with GatedServer(default="sings", models=(SIMULATED_MODEL_NAME,), gate=gate) as server:

        def args(out: Path) -> list[str]:
            return [
                "eval",
                "mm_niah",
                "--data",
                str(folder),
                "--model",
                SIMULATED_MODEL_NAME,
                "--api-url",
                server.url,
                "--solver",
                "rag",
                "--embed-model",
                SIMULATED_EMBEDDER_NAME,
                "--embed-url",
                server.url,
                "--rag-max-tokens",
                "40",
                "--out",
                str(out),
                "--no-progress",
                "--no-report",
                "--concurrency",
                "3",
            ]

        clean = subprocess.run(_cli(args(tmp_path / "clean")), env=_env(), capture_output=True, text=True, timeout=300)
        assert clean.returncode == 0, clean.stderr
        expected = Counter(gate.answered)  # what one uninterrupted run pays for, by request
        gate.answered.clear()
        gate.requested.clear()
        gate.rounds.clear()
        out = tmp_path / "run"
        killed = kill_series(args(out), gate, rounds=4, step=max(4, sum(expected.values()) // 6))
        done = subprocess.run(_cli(args(out)), env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert killed >= 3
    assert sum(gate.requested.values()) > sum(gate.answered.values())
    extra = {k: (gate.rounds[k], expected[k]) for k, n in gate.answered.items() if n > expected[k]}
    assert not extra, f"answered calls requested again after kill -9 (rounds that answered, once-through): {extra}"
    assert gate.answered == expected
    records = read_records(out / "records.jsonl")
    same = read_records(tmp_path / "clean" / "records.jsonl")
    assert {k: r["solver"]["rag"] for k, r in records.items()} == {k: r["solver"]["rag"] for k, r in same.items()}
    assert not any((out / "cache" / "calls").iterdir())
