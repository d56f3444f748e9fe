"""MM-NIAH end to end: release files on disk -> `needlepoint eval` -> a real HTTP server on
127.0.0.1 -> metrics, leaderboard files, heatmaps, `needlepoint score` (docs/protocols/mm-niah.md).

The server records the JSON body of every request, so the prompt is checked as the model would
see it: text pieces and images in order, generation settings, image sizes.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import io
import json
import math
import random
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from needlepoint.benchmarks.mm_niah.demo import simulated_answer, write_release
from needlepoint.benchmarks.mm_niah.heatmap import draw_all
from needlepoint.benchmarks.mm_niah.judge import judge, official_answer
from needlepoint.cli import main
from needlepoint.models.simulated import ScriptReply, SimulatedServer

TASKS = ["retrieval-text", "retrieval-image", "counting-text", "counting-image", "reasoning-text", "reasoning-image"]
LEADERBOARD_FIELDS = ["question_id", "question", "answer", "response", "context_length", "placed_depth"]
OPTIONS = "\nAnswer with the option's letter from the given choices directly."
OPEN = "\nAnswer the question using a single word or phrase."
MODEL = "org/niah-model"
SLUG = "org__niah-model"


@pytest.fixture
def server() -> Iterator[SimulatedServer]:
    """The simulated model, keeping every request it is sent."""
    with SimulatedServer(default="A", models=(MODEL,), keep_requests=True) as srv:
        yield srv


@contextlib.contextmanager
def no_heatmaps() -> Iterator[None]:
    """Skip drawing heatmaps (seconds of matplotlib) where a test does not look at them."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("needlepoint.benchmarks.mm_niah.heatmap.draw_all", lambda metrics, out_dir: [])
        yield


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with no_heatmaps():
        rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def eval_args(data: Path, url: str, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "mm_niah",
        "--data",
        str(data),
        "--model",
        MODEL,
        "--api-url",
        url,
        "--out",
        str(out),
        "--no-progress",
        "--no-report",
        *extra,
    ]


def decode_image(url: str) -> Image.Image:
    head, _, payload = url.partition(",")
    assert head == "data:image/jpeg;base64", head
    im = Image.open(io.BytesIO(base64.b64decode(payload)))
    im.load()
    return im


def content_of(body: dict[str, Any], sizes: dict[tuple[int, int], str]) -> list[tuple[str, str]]:
    """The one user message as ("text", piece) / ("image", file name) items; images are known by size."""
    assert [m["role"] for m in body["messages"]] == ["user"], "one user message, no system prompt"
    content = body["messages"][0]["content"]
    if isinstance(content, str):
        return [("text", content)]
    out = []
    for part in content:
        if part["type"] == "text":
            out.append(("text", part["text"]))
        else:
            assert part["type"] == "image_url"
            out.append(("image", sizes[decode_image(part["image_url"]["url"]).size]))
    return out


def body_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


# --- a hand-made release -----------------------------------------------------------------------------


def niah_row(
    rid: int,
    context: str,
    question: str,
    images: list[str],
    answer: Any,
    length: int,
    depth: Any = 0.5,
    choices: list[str] | None = None,
    choices_image: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "id": rid,
        "images_list": images,
        "context": context,
        "question": question,
        "answer": answer,
        "meta": {
            "placed_depth": depth,
            "context_length": length,
            "context_length_text": length,
            "context_length_image": 0,
            "num_images": len(images),
            "needles": [],
            "choices": choices,
            "choices_image_path": choices_image,
        },
    }


def write_split(root: Path, rows: dict[str, list[dict[str, Any]]], split: str = "val") -> Path:
    folder = root / f"mm_niah_{split}"
    (folder / "annotations").mkdir(parents=True, exist_ok=True)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for task, task_rows in rows.items():
        text = "".join(json.dumps(r) + "\n" for r in task_rows)
        (folder / "annotations" / f"{task}.jsonl").write_text(text, encoding="utf-8")
    return folder


def save_image(path: Path, size: tuple[int, int], colour: tuple[int, int, int], fmt: str = "JPEG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path, format=fmt)


# Every image has its own size, so the server side can tell which one it got.
IMAGES = {
    "a1.jpg": (40, 30),
    "a2.jpg": (41, 30),
    "b1.jpg": (42, 30),
    "b2.jpg": (43, 30),
    "o1.jpg": (44, 30),
    "o2.jpg": (45, 30),
    "o3.jpg": (46, 30),
    "o4.jpg": (47, 30),
    "c1.jpg": (48, 30),
    "c2.jpg": (49, 30),
    "sub/c3.png": (50, 30),
    "e1.jpg": (51, 30),
}
SIZES = {size: name for name, size in IMAGES.items()}

# The valid rows, with the message the spec says the model must see.
EXPECTED = {
    "ROW-A": [  # text options (reasoning-image)
        ("text", "ROW-A opens here. "),
        ("image", "a1.jpg"),
        ("text", "The middle part."),
        ("image", "a2.jpg"),
        (
            "text",
            " The end.\nWhich way is the camera moving?\nA. The camera is moving left.\nB. The camera is moving right." + OPTIONS,
        ),
    ],
    "ROW-B": [  # image options (retrieval-image), appended after the document's images
        ("image", "b1.jpg"),
        ("text", "ROW-B text between "),
        ("image", "b2.jpg"),
        ("text", " and after.\nWhich of the following images appears in the document?\nA. "),
        ("image", "o1.jpg"),
        ("text", "\nB. "),
        ("image", "o2.jpg"),
        ("text", "\nC. "),
        ("image", "o3.jpg"),
        ("text", "\nD. "),
        ("image", "o4.jpg"),
        ("text", OPTIONS),
    ],
    "ROW-C": [  # open question; adjacent placeholders; a placeholder in the question; a PNG
        ("text", "ROW-C The secret word is violet."),
        ("image", "c1.jpg"),
        ("image", "c2.jpg"),
        ("text", "\nLook at "),
        ("image", "sub/c3.png"),
        ("text", " and answer: what is the secret word?" + OPEN),
    ],
    "ROW-D": [("text", "ROW-D The penguin counted 1 needle. Then it counted 2.\nHow many needles, as a list?" + OPEN)],
    "ROW-E": [("text", "ROW-E "), ("image", "e1.jpg"), ("text", "\nHow many red circles are in each image?" + OPEN)],
}
LENGTHS = {"ROW-E": 900, "ROW-B": 1200, "ROW-D": 2500, "ROW-A": 5000, "ROW-C": 30000}
SKIPPED = {
    "reasoning-text/7": "placeholders",  # 2 placeholders, 1 image
    "counting-image/8": "does not exist",  # image file missing
    "retrieval-text/9": "stay inside",  # ../ escapes the images folder
    "retrieval-text/10": "stay inside",  # an absolute path
}


def handmade_release(root: Path) -> Path:
    folder = root / "mm_niah_val"
    for name, size in IMAGES.items():
        save_image(folder / "images" / name, size, (200, 30 + size[0], 90), "PNG" if name.endswith(".png") else "JPEG")
    save_image(folder / "outside.jpg", (60, 30), (1, 2, 3))
    rows = {
        "reasoning-image": [
            niah_row(
                1,
                "ROW-A opens here. <image>The middle part.<image> The end.",
                "Which way is the camera moving?",
                ["a1.jpg", "a2.jpg"],
                1,
                5000,
                choices=["The camera is moving left.", "The camera is moving right."],
            )
        ],
        "retrieval-image": [
            niah_row(
                2,
                "<image>ROW-B text between <image> and after.",
                "Which of the following images appears in the document?",
                ["b1.jpg", "b2.jpg"],
                2,
                1200,
                choices_image=["o1.jpg", "o2.jpg", "o3.jpg", "o4.jpg"],
            )
        ],
        "retrieval-text": [
            niah_row(
                3,
                "ROW-C The secret word is violet.<image><image>",
                "Look at <image> and answer: what is the secret word?",
                ["c1.jpg", "c2.jpg", "sub/c3.png"],
                "violet",
                30000,
            ),
            niah_row(9, "ROW-H <image>", "Q?", ["../outside.jpg"], "x", 3000),
            niah_row(10, "ROW-I <image>", "Q?", [str((folder / "images" / "a1.jpg").resolve())], "x", 3100),
        ],
        "counting-text": [
            niah_row(
                4,
                "ROW-D The penguin counted 1 needle. Then it counted 2.",
                "How many needles, as a list?",
                [],
                "[1, 2]",
                2500,
                depth=[0.2, 0.6],
            )
        ],
        "counting-image": [
            niah_row(5, "ROW-E <image>", "How many red circles are in each image?", ["e1.jpg"], [3], 900),
            niah_row(8, "ROW-G <image>", "How many?", ["nope.jpg"], [1], 3200),
        ],
        "reasoning-text": [niah_row(7, "ROW-F <image> and <image>", "Q?", ["a1.jpg"], "x", 3300)],
    }
    write_split(root, rows)
    return root


@pytest.fixture(scope="module")
def handmade(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return handmade_release(tmp_path_factory.mktemp("handmade"))


@dataclass
class Run:
    rc: int
    err: str
    out_dir: Path
    bodies: list[dict[str, Any]]


@pytest.fixture(scope="module")
def handmade_run(handmade: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("runs") / "handmade"
    err = io.StringIO()
    with SimulatedServer(default="A", models=(MODEL,), keep_requests=True) as srv:
        with no_heatmaps(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(eval_args(handmade, srv.url, out, "--split", "val", "--concurrency", "1"))
        return Run(rc, err.getvalue(), out, list(srv.bodies()))


def marker(body: dict[str, Any]) -> str:
    return body_text(body)[:5]


# --- the prompt --------------------------------------------------------------------------------------


def test_handmade_run_succeeds(handmade_run: Run) -> None:
    assert handmade_run.rc == 0, handmade_run.err
    assert "Traceback" not in handmade_run.err


@pytest.mark.parametrize("row", sorted(EXPECTED))
def test_prompt_is_the_authors_text_with_images_in_place(handmade_run: Run, row: str) -> None:
    bodies = [b for b in handmade_run.bodies if marker(b) == row]
    assert len(bodies) == 1, f"{row} sent {len(bodies)} times"
    assert content_of(bodies[0], SIZES) == EXPECTED[row]
    assert bodies[0]["model"] == MODEL


def test_images_are_sent_as_stored_when_they_are_jpeg_and_converted_otherwise(handmade: Path, handmade_run: Run) -> None:
    body = next(b for b in handmade_run.bodies if marker(b) == "ROW-A")
    url = next(p for p in body["messages"][0]["content"] if p["type"] == "image_url")["image_url"]["url"]
    assert base64.b64decode(url.partition(",")[2]) == (handmade / "mm_niah_val" / "images" / "a1.jpg").read_bytes()
    body = next(b for b in handmade_run.bodies if marker(b) == "ROW-C")
    urls = [p["image_url"]["url"] for p in body["messages"][0]["content"] if p["type"] == "image_url"]
    assert decode_image(urls[2]).format == "JPEG"  # the PNG became a JPEG


def test_invalid_rows_are_reported_and_never_sent(handmade_run: Run) -> None:
    sent = {marker(b) for b in handmade_run.bodies}
    assert sent == set(EXPECTED), "only the valid rows reach the server"
    assert not sent & {"ROW-F", "ROW-G", "ROW-H", "ROW-I"}
    metrics = json.loads((handmade_run.out_dir / "metrics.json").read_text())
    skipped = {s["id"]: s["reason"] for s in metrics["run"]["skipped"]}
    assert set(skipped) == set(SKIPPED)
    for sid, words in SKIPPED.items():
        assert words in skipped[sid], (sid, skipped[sid])
    assert "2 <image> placeholders but 1 images" in skipped["reasoning-text/7"]
    assert metrics["run"]["samples"] == len(EXPECTED) and metrics["run"]["failed"] == 0
    lines = [line for line in handmade_run.err.splitlines() if "skipped" in line]
    assert len(lines) == 1 and lines[0].startswith("4 row(s) skipped as invalid, not sent"), handmade_run.err
    records = [json.loads(line) for line in (handmade_run.out_dir / "records.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(
        ["reasoning-image/1", "retrieval-image/2", "retrieval-text/3", "counting-text/4", "counting-image/5"]
    )


def test_rows_go_out_shortest_first(handmade_run: Run) -> None:
    order = [marker(b) for b in handmade_run.bodies]
    assert order == sorted(LENGTHS, key=LENGTHS.__getitem__) == ["ROW-E", "ROW-B", "ROW-D", "ROW-A", "ROW-C"]


def test_generation_defaults_follow_the_task(handmade_run: Run) -> None:
    for body in handmade_run.bodies:
        counting = marker(body) in ("ROW-D", "ROW-E")
        assert body["max_tokens"] == (32 if counting else 16), marker(body)
        assert body["temperature"] == 0


def test_max_tokens_flag_overrides_the_task_defaults(
    handmade: Path, tmp_path: Path, server: SimulatedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = run_cli(capsys, *eval_args(handmade, server.url, tmp_path / "run", "--max-tokens", "5"))
    assert rc == 0, err
    assert len(server.bodies()) == len(EXPECTED)
    assert {b["max_tokens"] for b in server.bodies()} == {5}
    assert {b["temperature"] for b in server.bodies()} == {0}


# --- a whole generated val set, scripted answers --------------------------------------------------------


def visible_text(row: dict[str, Any]) -> str:
    """The text the model sees for a release row (the spec's prompt, images taken out)."""
    meta = row["meta"]
    question = row["question"]
    letters = "ABCDEFGHIJ"
    if meta.get("choices"):
        question += "".join(f"\n{letters[i]}. {c}" for i, c in enumerate(meta["choices"])) + OPTIONS
    elif meta.get("choices_image_path"):
        question += "".join(f"\n{letters[i]}. <image>" for i in range(len(meta["choices_image_path"]))) + OPTIONS
    else:
        question += OPEN
    return f"{row['context']}\n{question}".replace("<image>", "")


# --- the official aggregate, re-derived from docs/protocols/mm-niah.md in plain Python (no needlepoint code)

SPEC_EDGES = [1000, 2000, 4000, 8000, 12000, 16000, 24000, 32000, 40000, 48000, 64000]  # 1k .. 64k, left-closed


def spec_aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per task: cells (depth bin x context range) = sum of scores / count, 0 when empty; rows below
    1,000 tokens dropped from the cells; depth = the mean of a list, 1.0 read as 0.99, bin
    int(depth / 0.2); a range's score = the mean of its 5 cells; everything rounded to 6 decimals.
    Overall per range = the mean of the six rounded task scores, rounded. Also the counts, the
    micro accuracy over all rows and the rows below 1k."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_task.setdefault(row["task"], []).append(row)
    tasks = {}
    for task, task_rows in by_task.items():
        sums = [[0.0] * len(SPEC_EDGES) for _ in range(5)]
        counts = [[0] * len(SPEC_EDGES) for _ in range(5)]
        for row in task_rows:
            if row["context_length"] < SPEC_EDGES[0]:
                continue
            x = bisect.bisect_right(SPEC_EDGES, row["context_length"]) - 1
            depths = row["placed_depth"] if isinstance(row["placed_depth"], list) else [row["placed_depth"]]
            depth = sum(depths) / len(depths)
            y = int((0.99 if depth == 1.0 else depth) / 0.2)
            sums[y][x] += row["score"]
            counts[y][x] += 1
        cells = [[s / n if n else 0.0 for s, n in zip(sum_row, count_row)] for sum_row, count_row in zip(sums, counts)]
        scores = [round(sum(cells[y][x] for y in range(5)) / 5, 6) for x in range(len(SPEC_EDGES))]
        tasks[task] = {
            "scores": scores,
            "overall": round(sum(scores) / len(scores), 6),
            "cells": [[round(v, 6) for v in line] for line in cells],
            "counts": counts,
            "micro_accuracy": round(sum(r["score"] for r in task_rows) / len(task_rows), 6),
            "rows": len(task_rows),
            "rows_below_1k": sum(r["context_length"] < SPEC_EDGES[0] for r in task_rows),
            "crashes": dict(Counter(r["crash"] for r in task_rows if r["crash"])),
        }
    overall = [round(sum(t["scores"][x] for t in tasks.values()) / len(tasks), 6) for x in range(len(SPEC_EDGES))]
    return {"tasks": tasks, "overall": {"scores": overall}}


def assert_close(got: Any, want: Any, where: str) -> None:
    """Equal, floats to 1e-9 (summation order may differ in the last bit before rounding)."""
    if isinstance(want, float):
        assert isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=0, abs_tol=1e-9), (where, got, want)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, f"{where}[{i}]")
    else:
        assert got == want, (where, got, want)


QUIRKY = ["**B**", "```json\n[1, 2, 3]\n```", "None", "The answer is A.", "[2]", "2", "the"]


@dataclass
class FullRun:
    data: Path
    run_dir: Path
    expected: dict[str, Any]
    rows: dict[str, list[dict[str, Any]]]
    replies: dict[tuple[str, Any], str]
    sent: int


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> FullRun:
    root = write_release(tmp_path_factory.mktemp("full"), per_task=12)
    annotations = root / "mm_niah_val" / "annotations"
    rng = random.Random(3)
    script: dict[str, list[ScriptReply]] = {}
    replies: dict[tuple[str, Any], str] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    scored = []
    for task in TASKS:
        rows[task] = [json.loads(line) for line in (annotations / f"{task}.jsonl").read_text().splitlines()]
        for i, row in enumerate(rows[task]):
            length = row["meta"]["context_length"]
            reply = QUIRKY[i % len(QUIRKY)] if i % 4 == 3 else simulated_answer(task, row["answer"], length, rng)
            key = visible_text(row)
            assert key not in script, "generated rows must differ in text for the script"
            script[key] = [reply]
            replies[(task, row["id"])] = reply
            verdict = judge(reply, official_answer(task, row["answer"]))
            scored.append(
                {
                    "task": task,
                    "context_length": length,
                    "placed_depth": row["meta"]["placed_depth"],
                    "score": verdict.score,
                    "crash": verdict.crash,
                }
            )
    scored.sort(key=lambda r: r["context_length"])  # the run's order: shortest first, stable
    expected = spec_aggregate(scored)
    run_dir = root / "run"
    with SimulatedServer(script=script, default=None, models=(MODEL,), keep_requests=True) as srv:
        with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
            rc = main(eval_args(root, srv.url, run_dir, "--split", "val", "--concurrency", "8"))
        assert rc == 0, err.getvalue()
        sent = len(srv.bodies())
    return FullRun(root, run_dir, expected, rows, replies, sent)


def test_full_eval_metrics_equal_the_spec_rederived_here(full_run: FullRun) -> None:
    """The run's metrics against `spec_aggregate` (this file's own reading of the spec) over the
    same rows: scores from `judge` (tested rule by rule in test_mm_niah_scoring.py), context
    lengths and depths from the release files."""
    metrics = json.loads((full_run.run_dir / "metrics.json").read_text())
    assert full_run.sent == 72
    assert metrics["run"]["failed"] == 0 and metrics["run"]["skipped"] == []
    assert metrics["split"] == "val"
    assert set(metrics["tasks"]) == set(TASKS)
    for task in TASKS:
        got, want = metrics["tasks"][task], full_run.expected["tasks"][task]
        for key in ("scores", "overall", "cells", "counts", "micro_accuracy", "rows", "rows_below_1k", "crashes"):
            assert_close(got[key], want[key], f"{task} {key}")
    assert_close(metrics["overall"]["scores"], full_run.expected["overall"]["scores"], "overall scores")
    assert any(v for t in TASKS for v in metrics["tasks"][t]["scores"]), "the script should score above zero"
    below = sum(r["meta"]["context_length"] < 1000 for rows in full_run.rows.values() for r in rows)
    assert below > 0, "the set should hold rows below 1k tokens (sent, scored, left out of the official bins)"
    assert sum(metrics["tasks"][t]["rows_below_1k"] for t in TASKS) == below


def test_full_eval_writes_leaderboard_files_in_the_authors_format(full_run: FullRun) -> None:
    folder = full_run.run_dir / "leaderboard"
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{SLUG}_{t}-val.jsonl" for t in TASKS)
    for task in TASKS:
        lines = (folder / f"{SLUG}_{task}-val.jsonl").read_text(encoding="utf-8").splitlines()
        raw = {r["id"]: r for r in full_run.rows[task]}
        assert len(lines) == len(raw)
        lengths = []
        for line in lines:
            row = json.loads(line)
            assert list(row) == LEADERBOARD_FIELDS
            src = raw[row["question_id"]]
            assert row["answer"] == src["answer"]
            assert row["response"] == full_run.replies[(task, src["id"])]
            assert row["context_length"] == src["meta"]["context_length"]
            assert row["placed_depth"] == src["meta"]["placed_depth"]
            assert row["question"].startswith(src["question"])
            lengths.append(row["context_length"])
        assert lengths == sorted(lengths)


def test_scoring_the_leaderboard_files_reproduces_the_run(full_run: FullRun, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = json.loads((full_run.run_dir / "metrics.json").read_text())
    for predictions in (full_run.run_dir / "leaderboard", full_run.run_dir):
        rc, out, err = run_cli(capsys, "score", "mm_niah", "--predictions", str(predictions), "--json")
        assert rc == 0, err
        scored = json.loads(out)
        for task in TASKS:
            assert scored["tasks"][task]["scores"] == metrics["tasks"][task]["scores"], task
            assert scored["tasks"][task]["cells"] == metrics["tasks"][task]["cells"], task
        assert scored["overall"]["scores"] == pytest.approx(metrics["overall"]["scores"], abs=1e-12)


def test_heatmaps_come_with_the_report_per_task_and_overall(full_run: FullRun, tmp_path: Path) -> None:
    """`--no-report` draws no heatmap (they are the report's); the same finished run rerun with the
    report draws one per task and the overall, and the same numbers give the same SVG bytes."""
    assert not (full_run.run_dir / "heatmaps").exists()
    run_dir = tmp_path / "run"
    shutil.copytree(full_run.run_dir, run_dir)
    with SimulatedServer(default="A", models=(MODEL,), keep_requests=True) as srv:
        args = [a for a in eval_args(full_run.data, srv.url, run_dir, "--split", "val") if a != "--no-report"]
        with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
            rc = main(args)
        assert rc == 0, err.getvalue()
        assert srv.bodies() == []  # finished: nothing asked again
    folder = run_dir / "heatmaps"
    for name in [*TASKS, "overall"]:
        png, svg = folder / f"{name}.png", folder / f"{name}.svg"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        text = svg.read_text(encoding="utf-8")
        assert "<svg" in text[:2000] and "<dc:date>" not in text, name
        assert "context length (tokens)" in text  # text kept as text: the browser's Find sees it
    again = draw_all(json.loads((run_dir / "metrics.json").read_text()), tmp_path / "again")
    assert {p.name: p.read_bytes() for p in again if p.suffix == ".svg"} == {p.name: p.read_bytes() for p in folder.glob("*.svg")}
    assert '<img src="heatmaps/overall.png"' in (run_dir / "report" / "index.html").read_text(encoding="utf-8")


# --- the test split --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def test_split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_release(tmp_path_factory.mktemp("testsplit"), per_task=2, split="test")


def test_test_split_exports_for_the_leaderboard_only(
    test_split: Path, tmp_path: Path, server: SimulatedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    rc, _, err = run_cli(capsys, *eval_args(test_split, server.url, run_dir, "--split", "test"))
    assert rc == 0, err
    assert len(server.bodies()) == 12
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert "tasks" not in metrics and metrics["split"] == "test"
    assert "leaderboard" in metrics["note"] and "no answers" in metrics["note"]
    files = sorted(p.name for p in (run_dir / "leaderboard").iterdir())
    assert files == sorted(f"{SLUG}_{t}-test.jsonl" for t in TASKS)
    for name in files:
        for line in (run_dir / "leaderboard" / name).read_text().splitlines():
            row = json.loads(line)
            assert list(row) == LEADERBOARD_FIELDS and row["answer"] is None and row["response"] == "A"
    assert not (run_dir / "heatmaps").exists()

    rc, out, err = run_cli(capsys, "score", "mm_niah", "--predictions", str(run_dir / "leaderboard"))
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("needlepoint: error:") and "no answer" in lines[0], err


def test_test_folder_given_directly_is_not_labelled_val(
    test_split: Path, tmp_path: Path, server: SimulatedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--data .../mm_niah_test` without --split: the folder's name tells the split, so the run is
    a test-split run, never labelled val."""
    run_dir = tmp_path / "run"
    rc, _, err = run_cli(capsys, *eval_args(test_split / "mm_niah_test", server.url, run_dir))
    assert rc == 0, err
    assert json.loads((run_dir / "metrics.json").read_text())["split"] == "test"
    names = sorted(p.name for p in (run_dir / "leaderboard").iterdir())
    assert names == sorted(f"{SLUG}_{t}-test.jsonl" for t in TASKS), names


def test_val_folder_with_split_test_is_refused(
    handmade: Path, tmp_path: Path, server: SimulatedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--data .../mm_niah_val --split test` contradicts itself: refuse rather than label val rows test."""
    rc, _, err = run_cli(capsys, *eval_args(handmade / "mm_niah_val", server.url, tmp_path / "run", "--split", "test"))
    assert rc == 2, "val rows were exported as test-split leaderboard files"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert server.bodies() == []


# --- request size and image size ---------------------------------------------------------------------


def noisy_jpeg(path: Path, size: tuple[int, int], seed: int) -> None:
    rng = random.Random(seed)
    im = Image.frombytes("RGB", size, bytes(rng.getrandbits(8) for _ in range(size[0] * size[1] * 3)))
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, format="JPEG", quality=90)


def test_requests_over_the_byte_budget_are_input_errors_not_sent(
    tmp_path: Path, server: SimulatedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "data" / "mm_niah_val"
    noisy_jpeg(folder / "images" / "big.jpg", (160, 160), 1)
    assert (folder / "images" / "big.jpg").stat().st_size > 12000
    rows = {
        "retrieval-text": [niah_row(0, "SMALL text only.", "Word?", [], "word", 1500)],
        "retrieval-image": [niah_row(1, "BIGGG <image> here.", "Which?", ["big.jpg"], 0, 2000, choices_image=["big.jpg"] * 4)],
        "counting-image": [niah_row(2, "BIGG2 <image>", "How many?", ["big.jpg"], [1], 2100)],
    }
    write_split(tmp_path / "data", rows)
    run_dir = tmp_path / "run"
    rc, _, err = run_cli(capsys, *eval_args(tmp_path / "data", server.url, run_dir, "--max-request-bytes", "8000"))
    assert rc == 3, err  # two samples failed (input errors): the documented exit code
    assert [marker(b) for b in server.bodies()] == ["SMALL"], "requests over budget must not be sent"
    records = {r["id"]: r for r in map(json.loads, (run_dir / "records.jsonl").read_text().splitlines())}
    for sid in ("retrieval-image/1", "counting-image/2"):
        assert records[sid]["status"] == "input_error", records[sid]
        assert "request_too_large" in records[sid]["error"] and "--max-request-bytes" in records[sid]["error"]
    assert records["retrieval-text/0"]["status"] == "done"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["run"]["failed"] == 2
    assert sorted(metrics["run"]["failed_ids"]) == ["counting-image/2", "retrieval-image/1"]
    assert "2 sample(s) failed" in err


def test_max_image_side_shrinks_what_the_server_receives(
    tmp_path: Path, server: SimulatedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "data" / "mm_niah_val"
    noisy_jpeg(folder / "images" / "wide.jpg", (200, 120), 2)
    save_image(folder / "images" / "tall.png", (90, 300), (10, 200, 10), "PNG")
    save_image(folder / "images" / "small.jpg", (50, 40), (10, 10, 200))
    rows = {
        "retrieval-text": [
            niah_row(0, "SIDES <image> <image> <image>", "Word?", ["wide.jpg", "tall.png", "small.jpg"], "word", 1500)
        ]
    }
    write_split(tmp_path / "data", rows)
    rc, _, err = run_cli(capsys, *eval_args(tmp_path / "data", server.url, tmp_path / "run", "--max-image-side", "64"))
    assert rc == 0, err
    (body,) = server.bodies()
    urls = [p["image_url"]["url"] for p in body["messages"][0]["content"] if p["type"] == "image_url"]
    sizes = [decode_image(u).size for u in urls]
    assert sizes[0] == (64, 38) and sizes[1] == (19, 64), sizes  # aspect kept, longest side 64
    assert sizes[2] == (50, 40), "images already small enough stay as they are"
    assert base64.b64decode(urls[2].partition(",")[2]) == (folder / "images" / "small.jpg").read_bytes()


# --- where --data points ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    save_image(root / "mm_niah_val" / "images" / "x.jpg", (30, 30), (90, 90, 90))
    write_split(root, {"retrieval-text": [niah_row(0, "TINY1 <image> text", "Word?", ["x.jpg"], "text", 1500)]})
    return root


@pytest.mark.parametrize(
    ("where", "split"),
    [(".", ["--split", "val"]), (".", []), ("mm_niah_val", []), ("mm_niah_val", ["--split", "val"])],
    ids=["parent+split", "parent", "split-folder", "split-folder+split"],
)
def test_data_may_name_the_parent_or_the_split_folder(
    tiny: Path, tmp_path: Path, server: SimulatedServer, capsys: pytest.CaptureFixture[str], where: str, split: list[str]
) -> None:
    run_dir = tmp_path / "run"
    rc, _, err = run_cli(capsys, *eval_args(tiny / where, server.url, run_dir, *split))
    assert rc == 0, err
    assert [marker(b) for b in server.bodies()] == ["TINY1"]
    assert (run_dir / "leaderboard" / f"{SLUG}_retrieval-text-val.jsonl").is_file()


@pytest.mark.parametrize("kind", ["empty folder", "missing folder", "annotations file", "no task files"])
def test_wrong_data_folder_is_one_sentence_and_exit_2(
    tiny: Path, tmp_path: Path, server: SimulatedServer, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    if kind == "empty folder":
        data = tmp_path / "empty"
        data.mkdir()
    elif kind == "missing folder":
        data = tmp_path / "nowhere"
    elif kind == "annotations file":
        data = tiny / "mm_niah_val" / "annotations" / "retrieval-text.jsonl"
    else:
        data = tmp_path / "mm_niah_val"
        (data / "annotations").mkdir(parents=True)
    rc, out, err = run_cli(capsys, *eval_args(data, server.url, tmp_path / "run", "--split", "val"))
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("needlepoint: error:"), err
    assert "Traceback" not in err and out == ""
    assert server.bodies() == []


def test_demo_release_is_the_same_when_rebuilt_over_itself(tmp_path: Path) -> None:
    """Rebuilding the generated set in place (images already on disk) must give the same rows, or a
    rerun of `needlepoint demo` meets its own run folder as 'a different configuration'."""
    write_release(tmp_path, per_task=4)
    annotations = tmp_path / "mm_niah_val" / "annotations"
    first = {p.name: p.read_text() for p in annotations.iterdir()}
    write_release(tmp_path, per_task=4)
    assert {p.name: p.read_text() for p in annotations.iterdir()} == first
