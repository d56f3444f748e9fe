"""vLLM's context-length refusal (issue 8, point 4): an MM-NIAH document longer than the server's
--max-model-len is answered with a 400 that needlepoint records as `context_too_long`, a property
of the sample, while the documents that fit are answered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from needlepoint.demo import mm_niah
from needlepoint.status import CONTEXT_TOO_LONG, DONE

from .conftest import MAX_MODEL_LEN, MODEL_NAME, Servers, needlepoint, read_records

pytestmark = pytest.mark.vllm


def test_documents_over_the_context_are_context_too_long(servers: Servers, tmp_path: Path) -> None:
    # Documents of about 800, 1,500, 3,000, 6,000, 10,000 and 14,000 tokens (demo lengths, written out).
    data = mm_niah.write_release(tmp_path / "mm_niah", per_task=6, real_length=True, images_per_doc=1)
    rows = [json.loads(line) for line in (data / "mm_niah_val" / "annotations" / "retrieval-text.jsonl").read_text().splitlines()]
    out = tmp_path / "run"
    proc = needlepoint([
        "eval", "mm_niah", "--data", str(data), "--split", "val", "--tasks", "retrieval-text", "--model", MODEL_NAME,
        "--api-url", servers.open.url, "--max-tokens", "8", "--out", str(out), "--no-progress", "--no-report",
    ])  # fmt: skip
    assert proc.returncode != 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    records = read_records(out)
    assert len(records) == len(rows) == 6
    by_length = {
        row["meta"]["context_length"]: rec
        for row, rec in zip(rows, sorted(records, key=lambda r: int(str(r["id"]).rsplit("/", 1)[-1])))
    }
    short = [rec for length, rec in by_length.items() if length < 2000]
    long = [rec for length, rec in by_length.items() if length > 2 * MAX_MODEL_LEN // 1.5]
    assert len(short) == 2 and len(long) == 2, sorted(by_length)
    for rec in short:
        assert rec["status"] == DONE, rec
    for rec in long:
        assert rec["status"] == CONTEXT_TOO_LONG, {k: rec.get(k) for k in ("id", "status", "error")}
        assert str(MAX_MODEL_LEN) in rec["error"], rec["error"]
    # A property of the sample: not offered to --retry-failed, counted apart from answered samples.
    assert "--retry-failed" not in proc.stderr or "context" in proc.stderr, proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert json.dumps(metrics).count(CONTEXT_TOO_LONG) >= 1, metrics.get("run")
