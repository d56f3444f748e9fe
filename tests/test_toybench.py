"""A benchmark from outside the package (tests/toybench/, a plugin as a user writes one) joins
through the registry alone, and eval, score, report and the HTML report all serve it."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import report_blob

import needlepoint.benchmarks as registry
from needlepoint.benchmarks import declaration, names, register, unregister
from needlepoint.cli import build_parser
from needlepoint.cli import main as cli_main
from needlepoint.errors import DataError

WORDS = [  # id, word, letter, count, the simulated model's replies (a second one answers the repair turn)
    ("w1", "banana", "a", 3, ["3"]),
    ("w2", "letter", "t", 2, ["There are 2."]),
    ("w3", "needle", "e", 3, ["two"," 3"]),  # prose first: the repair turn fixes it
    ("w4", "point", "p", 1, ["4"]),  # wrong
    ("w5", "mississippi", "s", 4, ["4"]),
]
INSTRUCTION = "Reply with digits."


@pytest.fixture
def toy() -> Iterator[None]:
    register("toy_letters", "toybench")
    yield
    unregister("toy_letters")


def _data(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": i, "word": w, "letter": c, "count": n} for i, w, c, n, _ in WORDS]
    rows.insert(2, {"id": "bad", "word": "empty", "letter": "x"})  # no count: skipped, and said so
    path = folder / "dev.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_registered_package_runs_eval_score_report_and_the_html_report(
    toy: None, serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "toy_letters" in names()
    help_text = build_parser().format_help() + build_parser()._subparsers._group_actions[0].choices["eval"].format_help()  # type: ignore[union-attr]
    assert "--instruction" in help_text and "(toy_letters)" in help_text  # its declared flag, named for it

    script = {f"How often does the letter {c} occur in {w}? {INSTRUCTION}": replies for _, w, c, _, replies in WORDS}
    server = serve(script=script, default=None)
    run = tmp_path / "run"
    data = _data(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    code = cli_main(["eval", "toy_letters", "--data", str(data), "--model", "sim-model", "--api-url", server.url,
                     "--out", str(run), "--instruction", INSTRUCTION, "--no-progress", "--json"])  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    # the declared flag reached the benchmark: every request carried the instruction
    assert len(server.requests) == 6 and all(b["messages"][0]["content"].endswith(INSTRUCTION) for _, b in server.requests)
    assert out["n"] == 5 and out["accuracy"] == 0.8 and out["split"] == "dev"  # w4 wrong; w3 right after the repair turn
    assert out["run"]["skipped"] == [{"id": "bad", "reason": "no count"}]
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    assert metrics == out
    records = [json.loads(line) for line in (run / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["id"]: r["answer"] for r in records} == {"w1": 3, "w2": 2, "w3": 3, "w4": 4, "w5": 4}
    assert [r["id"] for r in records if r["repair_used"]] == ["w3"]

    # score: from the run folder's export, without a model
    assert cli_main(["score", "toy_letters", "--predictions", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"n": 5, "accuracy": 0.8}

    # report: the package's layout, with its published row beside the run
    board = tmp_path / "board"
    assert cli_main(["report", str(run), "--with-published", "--out", str(board)]) == 0
    with (board / "leaderboard_toy_letters.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows == [
        ["model", "note", "n", "Acc", "source"],
        ["sim-model", "", "5", "80.0", str(run)],
        ["Toy-Paper-Model", "as printed", "", "42.0", "published: Toy paper, Table 1"],
    ]
    assert "Toy letters (accuracy %)" in (board / "leaderboard.md").read_text(encoding="utf-8")

    # the HTML report of the run: the declared title and labels, the items from report_items
    page = (run / "report" / "index.html").read_text(encoding="utf-8")
    assert "<h1>Toy letters · sim-model</h1>" in page
    blob = report_blob(run / "report" / "index.html")
    assert (blob["prompt_label"], blob["sort_label"]) == ("word", "error")
    assert [(it["id"], it["p"], it["c"], it["s"]) for it in blob["items"]] == [
        ("w1", "banana", True, 0.0), ("w2", "letter", True, 0.0), ("w3", "needle", True, 0.0),
        ("w4", "point", False, 3.0), ("w5", "mississippi", True, 0.0),
    ]  # fmt: skip
    assert blob["filters"] == [{"key": "letter", "values": [["a", 1], ["e", 1], ["p", 1], ["s", 1], ["t", 1]]}]


def test_a_solver_the_package_declares_runs_with_its_own_flag(
    toy: None, serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = {f"How often does the letter {c} occur in {w}? Answer with a number. Look twice.": [str(n)] for _, w, c, n, _ in WORDS}
    server = serve(script=script, default=None)
    data = _data(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    base = ["eval", "toy_letters", "--data", str(data), "--model", "sim-model", "--api-url", server.url, "--no-progress"]
    assert cli_main([*base, "--hint", "Look twice."]) == 2  # the solver's flag without the solver
    assert "--hint applies to `needlepoint eval toy_letters --solver hinted`" in capsys.readouterr().err
    assert cli_main([*base, "--solver", "hinted", "--hint", "Look twice.", "--out", str(tmp_path / "run"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0 and len(server.requests) == 5
    header = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert header["model_label"] == "sim-model (hinted)" and header["identity"]["solver.hint"] == "Look twice."
    assert cli_main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "board")]) == 0
    assert "sim-model (hinted),5,100.0," in (tmp_path / "board" / "leaderboard_toy_letters.csv").read_text(encoding="utf-8")


def test_register_refuses_a_taken_name_and_a_wrong_target(toy: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register("mc_bench", "toybench")
    register("not_toy", "toybench")
    try:
        with pytest.raises(DataError, match="not a Declaration named 'not_toy'; fix or remove that benchmark$"):
            declaration("not_toy")
    finally:
        unregister("not_toy")
    assert declaration("toy_letters").title == "Toy letters"


def test_an_entry_point_makes_a_benchmark_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed distribution declaring `needlepoint.benchmarks` entry points (here a
    dist-info folder on sys.path, as pip writes one) adds its benchmarks to every command."""
    info = tmp_path / "toybench_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toybench-plugin\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[needlepoint.benchmarks]\ntoy_letters = toybench\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_entry_points", None)  # read the installed entry points again
    monkeypatch.setattr(registry, "_loaded", {})
    assert names()[-1] == "toy_letters" and declaration("toy_letters").benchmark == "toybench.benchmark:ToyLetters"
    ev = build_parser()._subparsers._group_actions[0].choices["eval"]  # type: ignore[union-attr]
    assert "toy_letters" in next(a for a in ev._actions if a.dest == "benchmark").choices  # type: ignore[operator]
    monkeypatch.setattr(registry, "_entry_points", None)
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere"))
    sys.path.remove(str(tmp_path))
    assert "toy_letters" not in names()
