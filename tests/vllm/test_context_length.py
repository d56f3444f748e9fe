"""vLLM's context-length refusal: an MM-NIAH document longer than the server's --max-model-len is
answered with a 400 that needlepoint records as `context_too_long`, a property of the sample,
while the documents that fit are answered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from needlepoint.benchmarks.mm_niah import demo as mm_niah
from needlepoint.core.status import CONTEXT_TOO_LONG, DONE

from .conftest import MAX_MODEL_LEN, MODEL_NAME, Servers, needlepoint, read_records

pytestmark = pytest.mark.vllm


def test_documents_over_the_context_are_context_too_long(servers: Servers, tmp_path: Path) -> None:
    # Documents declared 800, 1,500, 3,000, 6,000, 10,000 and 14,000 tokens long, written out in full.
    data = mm_niah.write_release(tmp_path / "mm_niah", per_task=6, real_length=True, images_per_doc=1)
    rows = [json.loads(line) for line in (data / "mm_niah_val" / "annotations" / "retrieval-text.jsonl").read_text().splitlines()]
    out = tmp_path / "run"
    proc = needlepoint(
        [
            "eval",
            "mm_niah",
            "--data",
            str(data),
            "--split",
            "val",
            "--tasks",
            "retrieval-text",
            "--model",
            MODEL_NAME,
            "--api-url",
            servers.open.url,
            "--max-tokens",
            "8",
            "--out",
            str(out),
            "--no-progress",
            "--no-report",
        ]
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    records = read_records(out)
    assert len(records) == len(rows) == 6
    by_length = {
        row["meta"]["context_length"]: rec
        for row, rec in zip(rows, sorted(records, key=lambda r: int(str(r["id"]).rsplit("/", 1)[-1])))
    }
    # The tiny tokenizer spends about two characters a token on the filler: documents declared
    # under 2,000 tokens are about 2,200 and 4,100 tokens long; those declared over 5,000 are
    # 15,000 and more. The one declared 3,000 (about 8,100 tokens before the images) may go either way.
    short = [rec for length, rec in by_length.items() if length < 2000]
    long = [rec for length, rec in by_length.items() if length > 5000]
    assert len(short) == 2 and len(long) == 3, sorted(by_length)
    for rec in short:
        assert rec["status"] == DONE, rec
    for rec in long:
        assert rec["status"] == CONTEXT_TOO_LONG, {k: rec.get(k) for k in ("id", "status", "error")}
        assert str(MAX_MODEL_LEN) in rec["error"], rec["error"]
    assert {r["status"] for r in records} <= {DONE, CONTEXT_TOO_LONG}
    # A property of the sample: a failed run (not 0, not bad input), no advice to rerun them, a
    # summary line naming how many exceeded the context, counted apart from the answered samples.
    too_long = sum(r["status"] == CONTEXT_TOO_LONG for r in records)
    assert proc.returncode not in (0, 2), proc.stderr[-3000:]
    assert "rerun with --retry-failed" not in proc.stderr, proc.stderr
    assert any("context" in line and str(too_long) in line for line in proc.stderr.splitlines()), proc.stderr
    counts = json.loads((out / "metrics.json").read_text())["run"]
    assert counts["answered"] == sum(r["status"] == DONE for r in records), counts
    assert counts["failed_by_kind"] == {CONTEXT_TOO_LONG: too_long}, counts
