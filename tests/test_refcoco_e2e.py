"""RefCOCO end to end through `needlepoint eval` against a simulated model on 127.0.0.1: per-split
Acc@0.5 under the official reading (as InternVL's evaluator would score the same answers, worked
out by hand here) beside the corrected one, the InternVL-format export, intervals, `--sample`,
the dry run, `report --with-published`, `compare`, and the demo set."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import records, report_blob
from PIL import Image

from needlepoint.cli import main
from needlepoint.models.simulated import SimulatedServer

PROMPT = "Please provide the bounding box coordinate of the region this sentence describes: <ref>{}</ref>"
# (split, expression, target on a 200 x 100 image, the reply, official hit, corrected hit)
CASES = [
    ("refcoco_val", "the red square", [20, 20, 100, 60], "the red square[[100, 200, 500, 600]]", True, True),
    ("refcoco_val", "the blue square", [20, 20, 100, 60], "[[0.1, 0.2, 0.5, 0.6]]", True, False),  # sum < 4: fractions
    ("refcoco_val", "the green circle", [20, 20, 100, 60], "I cannot tell.", False, False),  # zero box / parse error
    ("refcocog_test", "a cat on the right", [100, 50, 200, 100], "<ref>cat</ref><box>[[500, 500, 1000, 1000]]</box>", True, True),
    ("refcocog_test", "a dog", [100, 50, 200, 100], "[[0, 0, 250, 500]]", False, False),
]


def write_release(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines: dict[str, list[str]] = {}
    for i, (split, sent, box, *_) in enumerate(CASES):
        image = Image.new("RGB", (200, 100), (250, 250, 250))
        image.putpixel((i, i), (0, 0, 0))  # each image its own bytes
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        (folder / f"im{i}.png").write_bytes(buf.getvalue())
        lines.setdefault(split, []).append(
            json.dumps({"image": f"im{i}.png", "sent": sent, "bbox": box, "width": 200, "height": 100})
        )
    for split, rows in lines.items():
        (folder / f"{split}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def eval_args(data: Path, url: str, out: Path, *extra: str) -> list[str]:
    return [
        "eval", "refcoco", "--data", str(data), "--model", "m", "--api-url", url, "--model-family", "internvl",
        "--out", str(out), "--no-progress", "--max-retries", "0", *extra,
    ]  # fmt: skip


def test_eval_scores_both_readings_per_split(
    serve: Callable[..., SimulatedServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_release(tmp_path / "data")
    server = serve(script={PROMPT.format(sent): [reply] for _, sent, _, reply, *_ in CASES}, default=None)
    run = tmp_path / "run"
    assert main([*eval_args(data, server.url, run), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    # InternVL's evaluator on these answers: refcoco_val 2 of 3, refcocog_test 1 of 2
    assert metrics["splits"]["refcoco_val"]["official"]["acc@0.5"] == pytest.approx(2 / 3)
    assert metrics["splits"]["refcocog_test"]["official"]["acc@0.5"] == pytest.approx(1 / 2)
    assert metrics["official"]["acc@0.5"] == pytest.approx((2 / 3 + 1 / 2) / 2)  # the cards' mean of splits
    assert metrics["splits"]["refcoco_val"]["corrected"]["acc@0.5"] == pytest.approx(1 / 3)
    assert metrics["corrected"]["acc@0.5"] == pytest.approx((1 / 3 + 1 / 2) / 2) == metrics["acc@0.5"]
    assert (metrics["parse_fail"], metrics["official_zero_box"], metrics["official_unit_scale"]) == (1, 1, 1)
    assert metrics["n"] == 5
    recs = {r["id"]: r for r in records(run)}
    for i, (split, _, _, _, official, corrected) in enumerate(CASES):
        got = recs[f"{split}/{i if split == 'refcoco_val' else i - 3}"]["scores"]
        assert (got["official_hit"], got["hit"]) == (official, corrected), (i, got)
    # the requests: InternVL's prompt after the image, its evaluator's decoding
    bodies = [body for _, body in server.requests]
    assert all(b["max_tokens"] == 100 and b["temperature"] == 0.0 for b in bodies)
    content = bodies[0]["messages"][0]["content"]
    assert [part["type"] for part in content] == ["image_url", "text"]
    # the export in the evaluator's results format: its scoring loop reads it unchanged
    saved = json.loads((run / "internvl_refcoco_val.json").read_text(encoding="utf-8"))
    assert saved[1] == {"answer": "[[0.1, 0.2, 0.5, 0.6]]", "gt_bbox": [20.0, 20.0, 100.0, 60.0], "hw": [100.0, 200.0]}
    # score: the exported answers read back give the same numbers
    assert main(["score", "refcoco", "--predictions", str(run), "--model-family", "internvl", "--json"]) == 0
    rescored = json.loads(capsys.readouterr().out)
    assert {k: rescored[k] for k in ("official", "corrected", "splits")} == {
        k: metrics[k] for k in ("official", "corrected", "splits")
    }
    # intervals on the primary metric and each split's headline
    names = set(metrics["intervals"]["metrics"])
    assert {"corrected/acc@0.5", "official/acc@0.5", "splits/refcocog_test/official/acc@0.5"} <= names
    # the run page
    item = next(it for it in report_blob(run / "report" / "index.html")["items"] if it["id"] == "refcoco_val/1")
    assert ["IoU official", "1.0"] in item["f"] and ["official read as 0-1", "yes"] in item["f"]
    assert item["k"] == {"split": "refcoco_val", "readings": "differ"} and item["c"] is False

    # report: the board in the cards' layout, both readings, the published rows beside them
    board = tmp_path / "board"
    assert main(["report", str(run), "--with-published", "--out", str(board)]) == 0
    with (board / "leaderboard_refcoco.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    mine = {r["reading"]: r for r in rows if r["model"] == "m"}
    assert float(mine["official"]["RefCOCO val"]) == pytest.approx(200 / 3) and float(
        mine["corrected"]["RefCOCO val"]
    ) == pytest.approx(100 / 3)
    assert float(mine["official"]["avg"]) == pytest.approx(175 / 3) and float(mine["corrected"]["avg"]) == pytest.approx(125 / 3)
    assert mine["official"]["prompt"] == "internvl"
    internvl3 = next(r for r in rows if r["model"] == "InternVL3-8B")
    assert (internvl3["RefCOCO val"], internvl3["RefCOCO+ testB"], internvl3["avg"]) == ("92.5", "81.8", "89.6")
    assert (internvl3["prompt"], internvl3["reading"]) == ("internvl", "published (InternVL's evaluator)")
    assert internvl3["source"] == "published: InternVL3 report (arXiv 2504.10479v3), Table 6"
    qwen3 = next(r for r in rows if r["model"] == "Qwen3-VL-8B-Instruct")
    assert (qwen3["RefCOCO val"], qwen3["avg"], qwen3["prompt"]) == ("", "89.1", "qwen3-vl")

    # compare: a second run whose corrected answers are all right
    fixed = serve(
        script={
            PROMPT.format(sent): ["[[100, 200, 500, 600]]" if i < 3 else CASES[i][3]] for i, (_, sent, *_) in enumerate(CASES)
        },
        default=None,
    )
    other = tmp_path / "run2"
    assert main(eval_args(data, fixed.url, other)) == 0
    capsys.readouterr()
    assert main(["compare", str(run), str(other), "--json", "--no-page", "--resamples", "200"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows_by_metric = {m["metric"]: m for m in result["contrasts"][0]["metrics"]}
    assert "corrected/acc@0.5" in rows_by_metric


def test_sample_and_dry_run(serve: Callable[..., SimulatedServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_release(tmp_path / "data")
    server = serve(script={PROMPT.format(sent): [reply] for _, sent, _, reply, *_ in CASES}, default=None)
    out = tmp_path / "bodies.jsonl"
    argv = eval_args(data, server.url, tmp_path / "dry")
    assert main([*argv, "--dry-run", "--dry-run-file", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == 5 and not server.requests
    # --sample draws within splits: two samples, one of each split
    run = tmp_path / "sampled"
    assert main([*eval_args(data, server.url, run), "--sample", "2"]) == 0
    assert sorted(r["id"].split("/")[0] for r in records(run)) == ["refcoco_val", "refcocog_test"]


def test_the_demo_set_runs_with_its_pattern_of_mistakes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from needlepoint.benchmarks.refcoco.demo import build
    from needlepoint.demo import builders

    assert builders()["refcoco"] == "needlepoint.benchmarks.refcoco.demo:build"
    data, options, script = build(tmp_path / "demo")
    assert options == {"model_family": "internvl"} and len(script) == 24
    assert (data / "refcocog_test.jsonl").is_file() and (data / "images" / "COCO_demo_000000000000.jpg").is_file()
    with SimulatedServer(script=script, default=None) as server:
        argv = ["eval", "refcoco", "--data", str(data), "--model", "needlepoint-simulated", "--api-url", server.url]
        assert main([*argv, "--model-family", "internvl", "--out", str(tmp_path / "run"), "--no-progress", "--json"]) == 0
    metrics: dict[str, Any] = json.loads(capsys.readouterr().out)
    # every 8th reply is prose (zero box) and every 8th fractions of the image (read as 0-1 officially)
    assert (metrics["n"], metrics["official_zero_box"], metrics["official_unit_scale"], metrics["parse_fail"]) == (24, 3, 3, 3)
    assert metrics["official"]["acc@0.5"] > metrics["corrected"]["acc@0.5"]


def test_score_reads_internvls_saved_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`needlepoint score` on the files evaluate_grounding.py saves ({split}_<time>.json): its own
    "Precision @ 1" per split under `official`, worked out by hand here."""
    saved = tmp_path / "results"
    saved.mkdir()
    val = [  # 640 x 480 images, target (161.92, 110.88, 469.12, 377.76) = [[253, 231, 733, 787]] on 0-1000
        {"answer": "the man[[253, 231, 733, 787]]", "gt_bbox": [161.92, 110.88, 469.12, 377.76], "hw": [480, 640]},  # hit, both
        {
            "answer": "[[0.253, 0.231, 0.733, 0.787]]",
            "gt_bbox": [161.92, 110.88, 469.12, 377.76],
            "hw": [480, 640],
        },  # 0-1: official hit
        {"answer": "no idea", "gt_bbox": [161.92, 110.88, 469.12, 377.76], "hw": [480, 640]},  # zero box
        {"answer": "[[0, 0, 100, 100]]", "gt_bbox": [161.92, 110.88, 469.12, 377.76], "hw": [480, 640]},  # miss
    ]
    (saved / "refcoco_val_241125103000.json").write_text(json.dumps(val), encoding="utf-8")
    (saved / "refcocog_test_241125103000.json").write_text(json.dumps(val[:1]), encoding="utf-8")
    (saved / "notes.txt").write_text("not a result file", encoding="utf-8")
    assert main(["score", "refcoco", "--predictions", str(saved), "--model-family", "internvl", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["splits"]["refcoco_val"]["official"]["acc@0.5"] == 2 / 4
    assert metrics["splits"]["refcoco_val"]["corrected"]["acc@0.5"] == 1 / 4
    assert metrics["splits"]["refcocog_test"]["official"]["acc@0.5"] == 1.0
    assert metrics["official"]["acc@0.5"] == (2 / 4 + 1.0) / 2
    assert (metrics["official_zero_box"], metrics["official_unit_scale"], metrics["parse_fail"]) == (1, 1, 1)
