"""A Ref-Adv-s run with failed requests, as records and a header in memory, for the report tests
(the HTML page and the browser test of it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.benchmarks.ref_adv.data import RefAdvSample
from needlepoint.benchmarks.ref_adv.demo import make_rows, write_release
from needlepoint.contract.base import Dataset
from needlepoint.core.records import Record, Turn

HOSTILE = "<script>alert(1)</script> & </pre>"


def sent(text: str, path: str) -> list[dict[str, Any]]:
    """A turn's `sent` messages as the runner records them: a system text, then a user image and text."""
    image = {"type": "image", "path": path, "sha256": "ab" * 32, "width": 640, "height": 480, "bytes": 12345}
    return [
        {"role": "system", "content": [{"type": "text", "text": "You locate objects."}]},
        {"role": "user", "content": [image, {"type": "text", "text": text}]},
    ]


def failed_run(tmp_path: Path, answered: int = 2) -> tuple[Path, RefAdv, Dataset[RefAdvSample], list[Record], dict[str, Any]]:
    """A Ref-Adv-s run of 5 samples: `answered` answered (with `sent` turns), the rest failed
    (backend_error), and a wrong answer among the answered ones."""
    data = write_release(tmp_path / "data", make_rows(5))
    bench = RefAdv(box_format="abs_xyxy")
    samples = bench.load(data)
    recs: list[Record] = []
    for n, s in enumerate(samples):
        if n < answered:
            turn: Turn = {
                "reply": "[[1, 2, 30, 40]]",
                "sent": sent(f"Find the object {n}. {HOSTILE}", str(s.image.path or s.image.key)),
            }
            recs.append(
                {
                    "id": s.id,
                    "status": "done",
                    "turns": [turn],
                    "answer": [[1.0, 2.0, 30.0, 40.0]],
                    "parse_error": None,
                    "scores": {"iou": 0.0, "hit": False},
                }
            )
        else:
            recs.append(
                {
                    "id": s.id,
                    "status": "backend_error",
                    "turns": [{"error": "HTTP 503"}],
                    "answer": None,
                    "parse_error": "backend_error",
                    "error": "HTTP 503",
                    "scores": {"iou": 0.0, "hit": False},
                }
            )
    header: dict[str, Any] = {
        "config": {"benchmark": "ref_adv_s", "model": "m"},
        "identity": {"model": "m"},
        "status": "incomplete",
        "model_label": "m + grounding-dino (agentic)",
    }
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return run_dir, bench, samples, recs, header


def run_block(recs: Sequence[Record]) -> dict[str, Any]:
    """The metrics' `run` block of these records (answered, failed, requested)."""
    failed = sum(r["status"] != "done" for r in recs)
    return {"samples": len(recs), "answered": len(recs) - failed, "failed": failed, "not_requested": 0, "requested": len(recs)}
