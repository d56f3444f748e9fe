"""`eval --repeats K` on the leaderboard and in paper export (issue 42 item 8): a row "MODEL (mean
± sd over K seeds)" after the repeats' own rows; and the repeats table, whose two spreads are of
one kind and whose repeats are named by their folders (issue 41 item 6)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import statistics
from pathlib import Path

import pytest
from helpers import REF_ADV_PREDICTIONS

from needlepoint.cli import main
from needlepoint.run.predictions_run import write_predictions_run
from needlepoint.run.repeats import sd_of_interval, summary_table


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repeats folder of three Ref-Adv-s runs (Acc@0.5 50, 55, 60) of one model, seeds 40-42."""
    base = tmp_path_factory.mktemp("ref") / "run"
    write_predictions_run("ref_adv_s", REF_ADV_PREDICTIONS, None, base)
    out = tmp_path_factory.mktemp("series") / "repeats-x3-seed40"
    for r, acc in enumerate((0.50, 0.55, 0.60)):
        run = out / f"repeat-{r}"
        shutil.copytree(base, run)
        header = json.loads((run / "run.json").read_text())
        header["identity"]["generation"] = {"seed": 40 + r}
        header["hash"] = f"h{r}"
        header["model_label"] = "org/m"
        header.pop("source")
        (run / "run.json").write_text(json.dumps(header))
        metrics = json.loads((run / "metrics.json").read_text())
        (run / "metrics.json").write_text(json.dumps({**metrics, "acc@0.5": acc}))
    (out / "repeats.json").write_text(json.dumps({"repeats": 3, "seeds": [40, 41, 42]}))
    return out


def test_leaderboard_has_a_mean_row_over_seeds(series: Path, tmp_path: Path) -> None:
    assert main(["report", str(series), "--out", str(tmp_path / "board")]) == 0
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    sd = statistics.stdev([50.0, 55.0, 60.0])
    assert f"| org/m (mean ± sd over 3 seeds) | direct | 1142 | 55.0 ± {sd:.1f} |" in md
    assert md.count("generation.seed=") == 3  # each repeat's own row names its seed
    models = [line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| org/m")]
    assert len(models) == 4 and models[-1] == "org/m (mean ± sd over 3 seeds)"  # the series together, its mean last
    rows = list(csv.DictReader(io.StringIO((tmp_path / "board" / "leaderboard_ref_adv_s.csv").read_text())))
    mean = next(r for r in rows if "mean ± sd" in r["model"])
    assert float(mean["Acc@0.5"]) == pytest.approx(55.0) and mean["source"] == str(series)


def test_paper_export_has_the_mean_row(series: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(series), "--format", "latex"]) == 0
    latex = capsys.readouterr().out
    assert r"\textbf{org/m (mean ± sd over 3 seeds)}".replace("±", r"$\pm$") in latex
    assert r"\textbf{55.0 $\pm$ 5.0}" in latex
    assert main(["report", str(series), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    mean = next(r for r in rows if "mean ± sd" in r["model"])
    assert float(mean["Acc@0.5 sd"]) == pytest.approx(5.0) and mean["ours"] == "yes"


def test_repeats_table_compares_like_with_like() -> None:
    """The sd over repeats beside the sd over samples that repeat-0's interval implies (at its own
    level), the interval's header at that level, and repeats named repeat-0 .. repeat-K-1."""
    summary = {
        "repeats": 3,
        "seeds": [40, 41, 42],
        "level": 0.9,
        "metrics": {
            "Acc@0.5": {
                "values": [50.0, 55.0, 60.0],
                "mean": 55.0,
                "sd": 5.0,
                "min": 50.0,
                "max": 60.0,
                "interval_over_samples": [40.0, 60.0],
                "sd_over_samples": sd_of_interval([40.0, 60.0], 0.9),
            }
        },
        "correctness_changes": {"samples": 4, "changed": 1, "share": 0.25},
    }
    table = summary_table(summary)
    assert table.columns[-2:] == ["sd over samples (repeat-0)", "90% interval over samples (repeat-0)"]
    assert "95%" not in " ".join(table.columns) and "repeat 1" not in table.title and "repeat-0" in table.title
    assert table.rows[0][5] == pytest.approx(20 / (2 * 1.6448536), abs=0.01)  # 6.08: z of 90%
    assert sd_of_interval([40.0, 60.0], 0.95) == pytest.approx(20 / (2 * 1.959964), abs=1e-4)
    assert sd_of_interval(None, 0.95) is None
