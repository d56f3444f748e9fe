"""What `needlepoint report` says about its rows (issue 42 item 7): a label names the setting that
tells two configurations apart, never quotes a prompt template; `--ci-level` at another level than
stored advises a command that does store intervals at that level."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from helpers import REF_ADV_PREDICTIONS

from needlepoint.cli import main
from needlepoint.run.predictions_run import write_predictions_run

TEMPLATE = "You are given an image. " * 25  # about 600 characters, as a prompt template is


@pytest.fixture(scope="module")
def ref_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "run"
    write_predictions_run("ref_adv_s", REF_ADV_PREDICTIONS, None, out)
    return out


def configured(ref_run: Path, folder: Path, **identity: object) -> Path:
    shutil.copytree(ref_run, folder)
    header = json.loads((folder / "run.json").read_text())
    header["identity"].update(identity)
    header["hash"] = folder.name
    header["model_label"] = "org/m"
    (folder / "run.json").write_text(json.dumps(header))
    return folder


def labels(md: str) -> list[str]:
    return [line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| org/m")]


def test_labels_name_the_setting_not_the_template(ref_run: Path, tmp_path: Path) -> None:
    a = configured(ref_run, tmp_path / "runs" / "a", **{"option.answer_format": "json", "prompt": TEMPLATE})
    b = configured(
        ref_run, tmp_path / "runs" / "b", **{"option.answer_format": "grounding-tokens", "prompt": TEMPLATE + "Boxes as tokens."}
    )
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "board")]) == 0
    shown = labels((tmp_path / "board" / "leaderboard.md").read_text())
    assert sorted(shown) == ["org/m [answer_format=grounding-tokens]", "org/m [answer_format=json]"]


def test_labels_name_a_long_setting_by_digest(ref_run: Path, tmp_path: Path) -> None:
    a = configured(ref_run, tmp_path / "runs" / "a", prompt=TEMPLATE)
    b = configured(ref_run, tmp_path / "runs" / "b", prompt=TEMPLATE + "Think first.")
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "board")]) == 0
    shown = labels((tmp_path / "board" / "leaderboard.md").read_text())
    assert len(shown) == 2 and len(set(shown)) == 2
    assert all(re.fullmatch(r"org/m \[prompt #[0-9a-f]{6}\]", label) for label in shown), shown


def test_ci_level_advice_stores_intervals(ref_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`report --ci-level 0.9` over a run stored at 0.95 names a command; run as printed, it makes
    the report show intervals at 0.9 (`score` without --out stores nothing)."""
    run = tmp_path / "run"
    shutil.copytree(ref_run, run)
    capsys.readouterr()
    assert main(["report", str(run), "--ci-level", "0.9", "--out", str(tmp_path / "b1")]) == 0
    err = capsys.readouterr().err
    command = re.search(r"`(needlepoint score [^`]+)`", err)
    assert command is not None, err
    argv = shlex.split(command.group(1))
    assert "--out" in argv and argv[argv.index("--out") + 1] == str(run) and "--ci-level" in argv
    assert main([*argv[1:], "--resamples", "200"]) == 0
    capsys.readouterr()
    assert main(["report", str(run), "--ci-level", "0.9", "--out", str(tmp_path / "b2")]) == 0
    assert "not 0.9" not in capsys.readouterr().err
    md = (tmp_path / "b2" / "leaderboard.md").read_text()
    assert "the run's 90% interval over samples" in md and re.search(r"\d \[[0-9.]+, [0-9.]+\]", md)
    assert "published:Qwen/Qwen2.5-VL-72B-Instruct |" in md  # the same label as before
