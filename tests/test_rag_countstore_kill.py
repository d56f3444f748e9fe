"""Token counts are paid once a run, across samples and across kill -9: a series of real
`needlepoint eval --solver rag` processes killed mid-run (the kill machinery of
tests/helpers/kills.py), then one that finishes; the server is asked each distinct piece once in
all, though the demo's documents share most of their pieces."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from helpers.kills import Gate, GatedServer, cli_command, cli_env, kill_series

from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.demo import write_release
from needlepoint.benchmarks.mm_niah.rag import document
from needlepoint.core.store import read_records
from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME, SIMULATED_MODEL_NAME

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread states from /proc")


def test_a_killed_and_rerun_rag_run_asks_each_distinct_piece_once(tmp_path: Path) -> None:
    folder = write_release(tmp_path / "niah", per_task=2)
    shared = Counter(p for s in MmNiah(split="val").load(folder) for p in set(document(s).text_pieces) if p)
    assert sum(shared.values()) > 2 * len(shared)  # most pieces are in several documents
    gate = Gate()
    out = tmp_path / "run"
    args = [
        "eval", "mm_niah", "--data", str(folder), "--model", SIMULATED_MODEL_NAME, "--solver", "rag",
        "--embed-model", SIMULATED_EMBEDDER_NAME, "--rag-max-tokens", "40", "--out", str(out),
        "--no-progress", "--no-report", "--concurrency", "3",
    ]  # fmt: skip
    with GatedServer(default="sings", models=(SIMULATED_MODEL_NAME,), gate=gate) as server:
        urls = ["--api-url", server.url, "--embed-url", server.url]
        killed = kill_series([*args, *urls], gate, rounds=4, step=5)
        done = subprocess.run(cli_command([*args, *urls]), env=cli_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert killed >= 3  # the kills landed mid-run
    counted = {k: n for k, n in gate.answered.items() if k.startswith("tokenize ")}
    twice = {k: n for k, n in counted.items() if n > 1}
    assert not twice, f"token counts paid again (across samples or after kill -9): {twice}"
    assert set(counted) == {f"tokenize {p}" for p in shared}
    records = read_records(out / "records.jsonl")
    assert len(records) == 12 and {r["status"] for r in records.values()} == {"done"}
