"""A benchmark from outside the package (tests/toybench/, a plugin as a user writes one) joins
through the registry alone, and eval, score, report and the HTML report all serve it."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import report_blob

import needlepoint.contract.registry as registry
from needlepoint.cli import build_parser
from needlepoint.cli import main as cli_main
from needlepoint.contract.registry import declaration, names, register, unregister
from needlepoint.core.drawing import render
from needlepoint.core.errors import DataError

SIZE = (200, 150)
SHAPES = [  # id, colour, true box, the simulated model's replies (a second one answers the repair turn)
    ("s1", "red", [20, 30, 80, 90], ['{"bbox": [20, 30, 80, 90]}']),
    ("s2", "blue", [100, 40, 160, 100], ['Here it is: {"bbox_2d": [102, 42, 158, 98]}']),
    ("s3", "green", [50, 50, 110, 110], ["left of the centre", "[50, 50, 110, 110]"]),  # prose first: the repair turn fixes it
    ("s4", "yellow", [10, 10, 60, 60], ["[120, 80, 180, 140]"]),  # wrong
    ("s5", "purple", [130, 20, 190, 80], ['```json\n{"bboxes": [[130, 20, 190, 80]]}\n```']),
]
INSTRUCTION = "Reply with [x1, y1, x2, y2]."


@pytest.fixture
def toy() -> Iterator[None]:
    register("toy_shapes", "toybench")
    yield
    unregister("toy_shapes")


def _data(folder: Path) -> Path:
    """The toy set: one drawn image a sample (its square, and an orange circle beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for i, colour, box, _ in SHAPES:
        x, y = float(box[0]), float(box[1])
        circle = [x + 10, y + 5, x + 30, y + 25] if x < 100 else [x - 40, y, x - 20, y + 20]
        square = [float(v) for v in box]
        (folder / f"{i}.png").write_bytes(render(*SIZE, [(square, colour, "square"), (circle, "orange", "circle")], fmt="PNG"))
        rows.append({"id": i, "image": f"{i}.png", "width": SIZE[0], "height": SIZE[1], "colour": colour, "box": box})
    rows.insert(
        2, {"id": "bad", "image": "s1.png", "width": SIZE[0], "height": SIZE[1], "colour": "red"}
    )  # no box: skipped, and said so
    path = folder / "dev.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _texts(body: dict[str, Any]) -> list[str]:
    """The text parts of a request's first message."""
    return [part["text"] for part in body["messages"][0]["content"] if part.get("type") == "text"]


def _images(body: dict[str, Any]) -> int:
    return sum(part.get("type") == "image_url" for part in body["messages"][0]["content"])


def _command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one sub-command of `needlepoint`."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices[name]
    return parser


def test_a_registered_package_runs_eval_score_report_and_the_html_report(
    toy: None, serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "toy_shapes" in names()
    help_text = build_parser().format_help() + _command_parser("eval").format_help()
    assert "--instruction" in help_text and "(toy_shapes)" in help_text  # its declared flag, named for it

    script = {f"Where is the {c} square? {INSTRUCTION}": replies for _, c, _, replies in SHAPES}
    server = serve(script=script, default=None)
    run = tmp_path / "run"
    data = _data(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    code = cli_main(
        [
            "eval",
            "toy_shapes",
            "--data",
            str(data),
            "--model",
            "sim-model",
            "--api-url",
            server.url,
            "--out",
            str(run),
            "--instruction",
            INSTRUCTION,
            "--no-progress",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    # the declared flag reached the benchmark: every request carried the instruction
    assert len(server.requests) == 6 and all(_texts(b)[-1].endswith(INSTRUCTION) for _, b in server.requests)
    assert all(_images(b) == 1 for _, b in server.requests)  # the image went with every request
    assert out["n"] == 5 and out["accuracy"] == 0.8 and out["split"] == "dev"  # s4 wrong; s3 right after the repair turn
    assert out["run"]["skipped"] == [{"id": "bad", "reason": "no box"}]
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    assert metrics == out
    records = [json.loads(line) for line in (run / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["id"]: r["answer"] for r in records} == {
        "s1": [[20, 30, 80, 90]],
        "s2": [[102, 42, 158, 98]],
        "s3": [[50, 50, 110, 110]],
        "s4": [[120, 80, 180, 140]],
        "s5": [[130, 20, 190, 80]],
    }
    assert [r["id"] for r in records if r["repair_used"]] == ["s3"]

    # score: from the run folder's export, without a model
    assert cli_main(["score", "toy_shapes", "--predictions", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"n": 5, "accuracy": 0.8}

    # report: the package's layout, with its published row beside the run
    board = tmp_path / "board"
    assert cli_main(["report", str(run), "--with-published", "--out", str(board)]) == 0
    with (board / "leaderboard_toy_shapes.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows == [
        ["model", "note", "n", "Acc", "source"],
        ["sim-model", "", "5", "80.0", str(run)],
        ["Toy-Paper-Model", "as printed", "", "42.0", "published: Toy paper, Table 1"],
    ]
    assert "Toy shapes (accuracy %)" in (board / "leaderboard.md").read_text(encoding="utf-8")

    # the HTML report of the run: the declared title and labels, the items from report_items
    page = (run / "report" / "index.html").read_text(encoding="utf-8")
    assert "<h1>Toy shapes · sim-model</h1>" in page
    blob = report_blob(run / "report" / "index.html")
    assert (blob["prompt_label"], blob["sort_label"]) == ("question", "IoU")
    assert [(it["id"], it["p"], it["c"], it["s"]) for it in blob["items"]] == [
        ("s1", f"Where is the red square? {INSTRUCTION}", True, 1.0),
        ("s2", f"Where is the blue square? {INSTRUCTION}", True, pytest.approx(56 * 56 / 3600)),
        ("s3", f"Where is the green square? {INSTRUCTION}", True, 1.0),
        ("s4", f"Where is the yellow square? {INSTRUCTION}", False, 0.0),
        ("s5", f"Where is the purple square? {INSTRUCTION}", True, 1.0),
    ]
    assert blob["filters"] == [{"key": "colour", "values": [["blue", 1], ["green", 1], ["purple", 1], ["red", 1], ["yellow", 1]]}]
    # the image with both boxes (true, then the answer), drawn as a thumbnail of the run's report
    thumb, width, height, _, boxes = blob["items"][3]["im"][0]
    assert (width, height) == SIZE and (run / "report" / thumb).is_file()
    assert [b[:4] for b in boxes] == [[10.0, 10.0, 60.0, 60.0], [120.0, 80.0, 180.0, 140.0]]


def test_a_solver_the_package_declares_runs_with_its_own_flag(
    toy: None, serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = {f"Where is the {c} square? Answer with a JSON box. Look twice.": [json.dumps(box)] for _, c, box, _ in SHAPES}
    server = serve(script=script, default=None)
    data = _data(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    base = ["eval", "toy_shapes", "--data", str(data), "--model", "sim-model", "--api-url", server.url, "--no-progress"]
    assert cli_main([*base, "--hint", "Look twice."]) == 2  # the solver's flag without the solver
    assert "--hint applies to `needlepoint eval toy_shapes --solver hinted`" in capsys.readouterr().err
    assert cli_main([*base, "--solver", "hinted", "--hint", "Look twice.", "--out", str(tmp_path / "run"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0 and len(server.requests) == 5
    header = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert header["model_label"] == "sim-model (hinted)" and header["identity"]["solver.hint"] == "Look twice."
    assert cli_main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "board")]) == 0
    assert "sim-model (hinted),5,100.0," in (tmp_path / "board" / "leaderboard_toy_shapes.csv").read_text(encoding="utf-8")


def test_register_refuses_a_taken_name_and_a_wrong_target(toy: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register("mc_bench", "toybench")
    register("not_toy", "toybench")
    try:
        with pytest.raises(DataError, match="not a Declaration named 'not_toy'; fix or remove that benchmark$"):
            declaration("not_toy")
    finally:
        unregister("not_toy")
    assert declaration("toy_shapes").title == "Toy shapes"


def test_an_entry_point_makes_a_benchmark_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed distribution declaring `needlepoint.benchmarks` entry points (here a
    dist-info folder on sys.path, as pip writes one) adds its benchmarks to every command."""
    info = tmp_path / "toybench_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toybench-plugin\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[needlepoint.benchmarks]\ntoy_shapes = toybench\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_entry_points", None)  # read the installed entry points again
    monkeypatch.setattr(registry, "_loaded", {})
    assert names()[-1] == "toy_shapes" and declaration("toy_shapes").benchmark == "toybench.benchmark:ToyShapes"
    choices = next(a for a in _command_parser("eval")._actions if a.dest == "benchmark").choices
    assert choices is not None and "toy_shapes" in choices
    monkeypatch.setattr(registry, "_entry_points", None)
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere"))
    sys.path.remove(str(tmp_path))
    assert "toy_shapes" not in names()
