"""The demo's RAG run counts the needles an answer depends on: reasoning-text's distractor
statement stands in the document but not in `meta.needles`, so a sample whose two needed
statements survive retrieval is "kept"; at the demo's budget retrieval keeps the text needles
and drops some others (the needle-kept table is neither all 0.0 nor all 100)."""

from __future__ import annotations

from pathlib import Path

from helpers import small_niah

from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.demo import DISTRACTORS
from needlepoint.benchmarks.mm_niah.rag_demo import rag_config
from needlepoint.core.store import read_records
from needlepoint.models.simulated import SimulatedServer
from needlepoint.run.evaluate import evaluate


def test_the_demo_counts_the_needed_needles_and_shows_retrieval_working(tmp_path: Path) -> None:
    data, options, script = small_niah(tmp_path / "data")
    reasoning = [s for s in MmNiah(**options).load(data) if s.task == "reasoning-text"]
    assert reasoning and all(DISTRACTORS[0] in s.text() for s in reasoning)  # the distractor is in every document
    with SimulatedServer(script=script, default=None) as server:
        result = evaluate(rag_config(data, options, server, tmp_path / "runs", concurrency=4, show_progress=False, report=False))
    records = read_records(result.run_dir / "records.jsonl")
    for s in reasoning:
        rag = records[s.id]["solver"]["rag"]
        assert len(rag["needles"]) == 2 and rag["needles_kept"] is True  # the two statements the answer needs
    tasks = result.metrics["rag"]["tasks"]
    assert tasks["reasoning-text"]["overall"] == 1.0 and tasks["retrieval-text"]["overall"] == 1.0
    overall = {t: v["overall"] for t, v in tasks.items() if v["overall"] is not None}
    assert len(overall) == 4 and 0 < min(overall.values()) < 1  # some needles dropped, none everywhere
