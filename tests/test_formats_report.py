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
    assert r"\textbf{published:Qwen/Qwen2.5-VL-72B-Instruct}" in text  # our run, marked
    assert r"AP50\textsuperscript{ref}" in text and r"$\geq$7" in text
    assert "Bold: our runs" in text


def test_rows_ranked_by_headline_with_published_rows(capsys: pytest.CaptureFixture[str], ref_run: Path) -> None:
    text = _report(capsys, str(ref_run), "--format", "csv", "--rows", "Qwen3-VL-*", "--rows", "qwen2.5-vl-72b")
    rows = list(csv.DictReader(io.StringIO(text)))
    accs = [float(r["Acc@0.5"]) for r in rows]
    assert accs == sorted(accs, reverse=True)
    ours = [r for r in rows if r["ours"] == "yes"]
    assert [r["model"] for r in ours] == ["published:Qwen/Qwen2.5-VL-72B-Instruct"]
    models = {r["model"] for r in rows if r["ours"] == "no"}
    assert "Qwen2.5-VL-72B" in models and all(m.startswith("Qwen3-VL-") or m == "Qwen2.5-VL-72B" for m in models)
    # the run's intervals (score --out keeps score's) fill its interval columns; the papers' rows have none
    assert float(ours[0]["Acc@0.5 lo"]) < float(ours[0]["Acc@0.5"]) < float(ours[0]["Acc@0.5 hi"])
    assert all(r["Acc@0.5 lo"] == "" for r in rows if r["ours"] == "no")


def test_intervals_shown_as_plus_minus(capsys: pytest.CaptureFixture[str], ref_run: Path, tmp_path: Path) -> None:
    """metrics.json's intervals block (the bootstrap's) gives ± on the cells whose value is its
    estimate; a metric without an interval (or with none) stays a bare value."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(ref_run, run)
    metrics: dict[str, Any] = json.loads((run / "metrics.json").read_text())
    metrics["intervals"] = {
        "level": 0.95,
        "metrics": {
            "acc@0.5": {"estimate": metrics["acc@0.5"], "lo": 0.51, "hi": 0.57},
            "acc@0.9": {"estimate": metrics["acc@0.9"], "none": "all draws equal"},
        },
    }
    (run / "metrics.json").write_text(json.dumps(metrics))
    md = _report(capsys, str(run), "--format", "markdown")
    row = next(line for line in md.splitlines() if "published:Qwen" in line)
    assert "**54.0 ± 3.0**" in row and "**18.0**" in row
    assert "± half the width of the 95% bootstrap interval" in md
    text = _report(capsys, str(run), "--format", "csv")
    (only,) = list(csv.DictReader(io.StringIO(text)))
    assert float(only["Acc@0.5 lo"]) == pytest.approx(51.0) and float(only["Acc@0.5 hi"]) == pytest.approx(57.0)
    assert check_latex_tables(_report(capsys, str(run), "--format", "latex")) == 1
