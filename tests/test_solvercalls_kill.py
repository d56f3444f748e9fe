"""Never pay for an answer twice: kill -9 series of real `needlepoint eval` processes against local
servers that count every request by its key, for the agentic solver (reasoner + localizer) and the
RAG solver (embeddings, /tokenize, chat). Each round lets the servers answer a few requests, holds
the rest, waits until the process has taken in what it got (every thread asleep), kills it, and
waits until the server has dropped the dead client's held requests; the last run finishes. No
call that got its HTTP 200 is ever requested again."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from helpers.agentic import FMT, LOCALIZER, REASONER, agentic_args, scripts
from helpers.kills import Gate, GatedServer, cli_command, cli_env, kill_series

from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.mc_bench.demo import write_release as write_mc_release
from needlepoint.core.store import read_records
from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME, SIMULATED_MODEL_NAME

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread states from /proc")


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
        done = subprocess.run(cli_command(args), env=cli_env(), capture_output=True, text=True, timeout=300)
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

        clean = subprocess.run(cli_command(args(tmp_path / "clean")), env=cli_env(), capture_output=True, text=True, timeout=300)
        assert clean.returncode == 0, clean.stderr
        expected = Counter(gate.answered)  # what one uninterrupted run pays for, by request
        gate.answered.clear()
        gate.requested.clear()
        gate.rounds.clear()
        out = tmp_path / "run"
        killed = kill_series(args(out), gate, rounds=4, step=max(4, sum(expected.values()) // 6))
        done = subprocess.run(cli_command(args(out)), env=cli_env(), capture_output=True, text=True, timeout=300)
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
