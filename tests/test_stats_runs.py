"""Intervals through the CLI: metrics.json gets an `intervals` block and keeps every other key as it
was, the terminal and the run page show them, the leaderboard shows ±, and the flags switch them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import prompt_key, ref_eval_args, run_quiet, untimed

from needlepoint.benchmarks.ref_adv import RefAdv
from needlepoint.benchmarks.ref_adv.demo import make_rows, write_release
from needlepoint.cli import main


@pytest.fixture
def runs(serve: Any, tmp_path: Path) -> dict[str, Path]:
    """The same 30 cases answered twice by one simulated model that boxes two cases in three right:
    with intervals (and the report), and with --no-ci."""
    data = write_release(tmp_path / "data", make_rows(30, seed=3))
    samples = RefAdv(box_format="abs_xyxy").load(data)
    right = {prompt_key(s): [json.dumps({"bboxes": [list(s.gt)]})] for i, s in enumerate(samples) if i % 3}
    server = serve(script=right)
    with_ci, without = tmp_path / "ci", tmp_path / "no_ci"
    assert main(ref_eval_args(data, server.url, with_ci, "--resamples", "200")) == 0
    assert main(ref_eval_args(data, server.url, without, "--no-ci", "--no-report")) == 0
    return {"ci": with_ci, "no_ci": without, "data": data}


def test_intervals_block_leaves_the_other_keys_as_they_were(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    with_ci = json.loads((runs["ci"] / "metrics.json").read_text())
    without = json.loads((runs["no_ci"] / "metrics.json").read_text())
    block = with_ci.pop("intervals")
    assert untimed(with_ci) == untimed(without) and "intervals" not in without
    assert block["resamples"] == 200 and block["level"] == 0.95 and block["unit"] == "case" and block["units"] == 30
    acc = block["metrics"]["acc@0.5"]
    assert acc["estimate"] == with_ci["acc@0.5"] == 20 / 30
    assert acc["lo"] < acc["estimate"] < acc["hi"]
    page = (runs["ci"] / "report" / "index.html").read_text()
    assert "95% intervals" in page and "acc@0.5" in page


def _interval_shown(board: str) -> bool:
    """A board cell with its interval: "62.5 ± 3.1" (before issue 41 item 6) or "62.5 [30.6, 86.3]"."""
    import re

    return " ± " in board or re.search(r"\d \[\d+(\.\d+)?, \d+(\.\d+)?\]", board) is not None


def test_terminal_and_leaderboard_show_intervals(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["score", "ref_adv_s", "--predictions", str(runs["ci"]), "--resamples", "300", "--ci-level", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "90% interval %" in out and "[" in out
    assert main(["score", "ref_adv_s", "--predictions", str(runs["ci"]), "--resamples", "300", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["intervals"]["resamples"] == 300
    assert main(["report", str(runs["ci"]), "--out", str(tmp_path / "board")]) == 0
    shown = (tmp_path / "board" / "leaderboard.md").read_text()
    assert _interval_shown(shown)
    assert main(["report", str(runs["ci"]), "--no-ci", "--out", str(tmp_path / "plain")]) == 0
    assert not _interval_shown((tmp_path / "plain" / "leaderboard.md").read_text())
    assert main(["report", str(runs["ci"]), "--ci-level", "0.9", "--out", str(tmp_path / "other")]) == 0
    err = capsys.readouterr().err
    assert "not 0.9" in err and " ± " not in (tmp_path / "other" / "leaderboard.md").read_text()


@pytest.mark.parametrize(
    "flags, message",
    [(["--ci-level", "95"], "--ci-level is 95.0; give a level between 0 and 1"), (["--resamples", "-3"], "--resamples is -3")],
)
def test_bad_flags_are_one_sentence(flags: list[str], message: str) -> None:
    code, err = run_quiet(
        ["score", "ref_adv_s", "--predictions", "tests/data/ref-adv-s/qwen25a72b_direct_predictions.jsonl", *flags]
    )
    assert code == 2 and message in err and "Traceback" not in err
