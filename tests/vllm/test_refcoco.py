"""RefCOCO end to end through a real vLLM: the demo's converted JSONL split -> `needlepoint eval
refcoco --splits ... --model-family qwen2.5-vl` -> vLLM serving the tiny random Qwen2.5-VL ->
records scored under both readings, metrics per split, the InternVL-format export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from needlepoint.benchmarks.refcoco import demo
from needlepoint.core.status import DONE

from .conftest import MODEL_NAME, Servers, needlepoint, read_records, vllm_counter

pytestmark = pytest.mark.vllm

SPLIT = "refcocog_val"


def test_one_split_end_to_end(servers: Servers, tmp_path: Path) -> None:
    data = demo.write_release(tmp_path / "refcoco", demo.make_rows(per_split=3))
    out = tmp_path / "run"
    server = servers.open
    before = vllm_counter(server, "vllm:request_success_total")
    args = ["eval", "refcoco", "--data", str(data), "--splits", SPLIT, "--model", MODEL_NAME, "--api-url", server.url]
    args += ["--model-family", "qwen2.5-vl", "--max-tokens", "24", "--temperature", "0", "--out", str(out), "--no-progress"]
    proc = needlepoint(args)
    assert proc.returncode == 0, proc.stderr[-3000:]

    records = read_records(out)
    assert sorted(r["id"] for r in records) == [f"{SPLIT}/{i}" for i in range(3)]
    for rec in records:
        assert rec["status"] == DONE, rec
        first: dict[str, Any] = rec["turns"][0]
        assert first["error"] is None and first["usage"]["completion_tokens"] > 0, first
        assert isinstance(first["reply"], str) and first["reply"], first
        got = rec["scores"]
        # both readings scored every reply: a parse error is a miss, a failed official parse the zero box
        assert 0.0 <= got["iou"] <= 1.0 and 0.0 <= got["official_iou"] <= 1.0, got
        assert got["hit"] == (got["iou"] >= 0.5) and got["official_hit"] == (got["official_iou"] >= 0.5), got
        assert (rec["parse_error"] is None) == bool(rec["answer"]), rec
    assert vllm_counter(server, "vllm:request_success_total") - before == sum(len(r["turns"]) for r in records)

    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics["splits"]) == [SPLIT] and metrics["n"] == 3
    assert metrics["splits"][SPLIT]["official"]["acc@0.5"] == metrics["official"]["acc@0.5"]
    hits = sum(r["scores"]["official_hit"] for r in records)
    assert metrics["official"]["acc@0.5"] == hits / 3
    assert metrics["parse_fail"] == sum(bool(r["parse_error"]) for r in records)
    assert metrics["official_zero_box"] == sum(bool(r["scores"]["official_zero_box"]) for r in records)
    exported = json.loads((out / f"internvl_{SPLIT}.json").read_text())
    assert [e["answer"] for e in exported] == [r["turns"][-1]["reply"] for r in sorted(records, key=lambda r: r["id"])]
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    assert (out / "report" / "index.html").exists()
