"""`needlepoint report --format markdown|latex|csv [--rows PATTERN]`: rows ranked by the headline
column with the published rows, the report's runs marked, ± from metrics.json's intervals block
where it is there (and nothing where it is not), LaTeX that parses as balanced tables. Run
folders written from the authors' released predictions (tests/data)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import MC_BENCH_RELEASE, REF_ADV_PREDICTIONS, TEST_DATA

from needlepoint.cli import main
from needlepoint.run.predictions_run import write_predictions_run


@pytest.fixture(scope="module")
def ref_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "run"
    write_predictions_run("ref_adv_s", REF_ADV_PREDICTIONS, None, out)
    return out


@pytest.fixture(scope="module")
def mc_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mc") / "run"
    write_predictions_run("mc_bench", TEST_DATA / "mc-bench" / "perturbed_noswap_result.json", MC_BENCH_RELEASE, out, "ours")
    return out


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["report", *args]) == 0
    return capsys.readouterr().out


def _strip_escaped(text: str) -> str:
    return re.sub(r"\\[{}&%$#_]", "", text)


def check_latex_tables(text: str) -> int:
    """Assert that `text` holds balanced LaTeX tables: braces balance on every line and overall,
    every \\begin has its \\end in order, and every row of a tabular has the spec's column count.
    Returns the number of tabulars."""
    plain = _strip_escaped(text)
    depth = 0
    for ch in plain:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0, "a } closes nothing"
    assert depth == 0, "unbalanced braces"
    stack: list[str] = []
    for kind, name in re.findall(r"\\(begin|end)\{(\w+)\}", plain):
        if kind == "begin":
            stack.append(name)
        else:
            assert stack and stack.pop() == name, f"\\end{{{name}}} without its \\begin"
    assert not stack, f"unclosed {stack}"
    tabulars = re.findall(r"\\begin\{tabular\}\{([lrc|]+)\}(.*?)\\end\{tabular\}", text, re.S)
    for spec, body in tabulars:
        columns = len(spec.replace("|", ""))
        rows = [r for r in body.split("\n") if r.strip().endswith(r"\\")]
        assert rows, "a tabular without rows"
        for row in rows:
            cells = re.split(r"(?<!\\)&", row)
            assert len(cells) == columns, f"{len(cells)} cells for {columns} columns: {row}"
    return len(tabulars)


def test_latex_parses_as_balanced_tables(capsys: pytest.CaptureFixture[str], ref_run: Path, mc_run: Path) -> None:
    text = _report(capsys, str(ref_run), str(mc_run), "--format", "latex", "--with-published")
    assert check_latex_tables(text) == 2
    # a rescored published file is marked, never bold as ours (issue 42 item 7)
    assert r"\textbf{published:" not in text and "published:Qwen/Qwen2.5-VL-72B-Instruct ‡ &" in text
    assert r"AP50\textsuperscript{ref}" in text and r"$\geq$7" in text
    assert "‡: a published prediction file rescored with needlepoint" in text


def test_rows_ranked_by_headline_with_published_rows(capsys: pytest.CaptureFixture[str], ref_run: Path) -> None:
    text = _report(capsys, str(ref_run), "--format", "csv", "--rows", "Qwen3-VL-*", "--rows", "qwen2.5-vl-72b")
    rows = list(csv.DictReader(io.StringIO(text)))
    accs = [float(r["Acc@0.5"]) for r in rows]
    assert accs == sorted(accs, reverse=True)
    ours = [r for r in rows if r["ours"] == "rescored"]
    assert [r["model"] for r in ours] == ["published:Qwen/Qwen2.5-VL-72B-Instruct"]
    assert not [r for r in rows if r["ours"] == "yes"]
    models = {r["model"] for r in rows if r["ours"] == "no"}
    assert "Qwen2.5-VL-72B" in models and all(m.startswith("Qwen3-VL-") or m == "Qwen2.5-VL-72B" for m in models)
    # the run's intervals (score --out keeps score's) fill its interval columns; the papers' rows have none
    assert float(ours[0]["Acc@0.5 lo"]) < float(ours[0]["Acc@0.5"]) < float(ours[0]["Acc@0.5 hi"])
    assert all(r["Acc@0.5 lo"] == "" for r in rows if r["ours"] == "no")


def with_intervals(ref_run: Path, folder: Path, level: float, cells: dict[str, Any], **header: Any) -> Path:
    """A copy of the rescored Ref-Adv-s run with an intervals block (and run.json changes)."""
    import shutil

    shutil.copytree(ref_run, folder)
    metrics: dict[str, Any] = json.loads((folder / "metrics.json").read_text())
    metrics["intervals"] = {"level": level, "metrics": cells}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    if header:
        run = json.loads((folder / "run.json").read_text())
        (folder / "run.json").write_text(json.dumps({**run, **header}))
    return folder


def test_intervals_shown_as_bounds(capsys: pytest.CaptureFixture[str], ref_run: Path, tmp_path: Path) -> None:
    """metrics.json's intervals block gives each cell its own metric's interval as "[lo, hi]" (not
    ± half an asymmetric width); a metric without an interval stays a bare value; the caption
    names the level the run stored, not a fixed 95%."""
    metrics = json.loads((ref_run / "metrics.json").read_text())
    run = with_intervals(
        ref_run,
        tmp_path / "run",
        0.9,
        {
            "acc@0.5": {"estimate": metrics["acc@0.5"], "lo": 0.51, "hi": 0.57},
            "acc@0.9": {"estimate": metrics["acc@0.9"], "none": "all draws equal"},
        },
    )
    md = _report(capsys, str(run), "--format", "markdown", "--ci-level", "0.9")
    row = next(line for line in md.splitlines() if "published:Qwen" in line)
    assert "54.0 [51.0, 57.0]" in row and "| 18.0 |" in row and "±" not in row
    assert "the 90% interval over samples" in md and "95%" not in md
    text = _report(capsys, str(run), "--format", "csv", "--ci-level", "0.9")
    (only,) = list(csv.DictReader(io.StringIO(text)))
    assert float(only["Acc@0.5 lo"]) == pytest.approx(51.0) and float(only["Acc@0.5 hi"]) == pytest.approx(57.0)
    assert only["ci level"] == "0.9"
    latex = _report(capsys, str(run), "--format", "latex", "--ci-level", "0.9")
    assert check_latex_tables(latex) == 1
    assert "54.0$_{51.0}^{57.0}$" in latex and "90" in latex


def test_asymmetric_interval_and_tied_values_keep_their_own(
    capsys: pytest.CaptureFixture[str], ref_run: Path, tmp_path: Path
) -> None:
    """[92.5, 100] around 97.5 is shown as such (today: "97.5 ± 3.8"); two metrics of equal value
    each show their own interval (today: neither, as the value matched two intervals)."""
    metrics = json.loads((ref_run / "metrics.json").read_text())
    metrics["acc@0.75"] = metrics["acc@0.9"] = 0.975
    run = tmp_path / "run"
    with_intervals(
        ref_run,
        run,
        0.95,
        {
            "acc@0.75": {"estimate": 0.975, "lo": 0.925, "hi": 1.0},
            "acc@0.9": {"estimate": 0.975, "lo": 0.9, "hi": 0.99},
        },
    )
    stored = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**stored, "acc@0.75": 0.975, "acc@0.9": 0.975}))
    md = _report(capsys, str(run), "--format", "markdown")
    row = next(line for line in md.splitlines() if "published:Qwen" in line)
    assert "| 97.5 [92.5, 100] | 97.5 [90.0, 99.0] |" in row
    assert main(["report", str(run), "--out", str(tmp_path / "board")]) == 0
    board = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "97.5 [92.5, 100]" in board and "97.5 [90.0, 99.0]" in board and "±" not in board
    assert "the run's 95% interval over samples" in board


def test_only_complete_runs_of_ours_are_bold(capsys: pytest.CaptureFixture[str], ref_run: Path, tmp_path: Path) -> None:
    """A model's complete run is bold; the same numbers as a 0-of-30 run or a rescored published
    file are not, each marked and explained under the table (issue 42 item 7)."""
    mine = with_intervals(ref_run, tmp_path / "mine", 0.95, {}, model_label="my-model", source=None)
    metrics = json.loads((ref_run / "metrics.json").read_text())
    partial = with_intervals(ref_run, tmp_path / "partial", 0.95, {}, model_label="half-model", source=None)
    (partial / "metrics.json").write_text(
        json.dumps({**metrics, "run": {"samples": 30, "answered": 0, "failed": 30}, "acc@0.5": 0.1})
    )
    md = _report(capsys, str(mine), str(partial), str(ref_run), "--format", "markdown", "--rows", "none")
    lines = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    assert lines["**my-model**"].count("**") > 4
    half = next(v for k, v in lines.items() if k.startswith("half-model"))
    assert "**" not in half and "*" in half.split("|")[1]
    rescored = next(v for k, v in lines.items() if k.startswith("published:"))
    assert "**" not in rescored and "‡" in rescored
    assert "Bold: our complete runs" in md and "incomplete run" in md and "rescored with needlepoint" in md
    text = _report(capsys, str(mine), str(partial), str(ref_run), "--format", "csv")
    ours = {r["model"].split(" ")[0]: r["ours"] for r in csv.DictReader(io.StringIO(text))}
    assert ours == {"my-model": "yes", "half-model": "incomplete", "published:Qwen/Qwen2.5-VL-72B-Instruct": "rescored"}
