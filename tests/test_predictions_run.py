"""Issue 23 item 3: saved predictions (the authors' released files) written as run folders by
`needlepoint score BENCH --predictions FILE --out DIR`, scored as `score` scores the file, read by
`report`, and paired sample by sample with a model run on the same data (same ids, same judgement).
Real files (the Ref-Adv-s authors' released predictions, MC-Bench's results file), a real server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import MC_BENCH_RELEASE, REF_ADV_PREDICTIONS, TEST_DATA, one_sentence, ref_eval_args, scripted_ref_release

from needlepoint.cli import main
from needlepoint.core.store import read_records


def _json(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict[str, Any]:
    assert main(args) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _without_run(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k != "run"}


def test_ref_adv_authors_predictions_become_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = _json(capsys, ["score", "ref_adv_s", "--predictions", str(REF_ADV_PREDICTIONS), "--json"])
    out = tmp_path / "predictions"
    written = _json(capsys, ["score", "ref_adv_s", "--predictions", str(REF_ADV_PREDICTIONS), "--out", str(out), "--json"])
    assert _without_run(written) == plain  # the same numbers as `score` without --out
    assert written["run"]["answered"] == written["run"]["samples"] == 1142 and written["run"]["failed"] == 0
    assert json.loads((out / "metrics.json").read_text()) == written
    # the folder scores as the file does
    assert _json(capsys, ["score", "ref_adv_s", "--predictions", str(out), "--json"]) == plain

    header = json.loads((out / "run.json").read_text())
    assert header["config"]["model"] == "published:Qwen/Qwen2.5-VL-72B-Instruct"
    assert header["status"] == "complete" and header["source"]["kind"] == "published"
    assert header["identity"]["option.prompt_mode"] == "direct"
    records = read_records(out / "records.jsonl")
    assert list(records) == [str(i) for i in range(1142)]  # a model run's ids: the release's row index
    assert sum(r["scores"]["hit"] for r in records.values()) == 617
    assert sum(bool(r.get("parse_error")) for r in records.values()) == 8

    board = tmp_path / "board"
    assert main(["report", str(out), "--out", str(board)]) == 0
    md = (board / "leaderboard.md").read_text()
    row = next(line for line in md.splitlines() if "published:Qwen/Qwen2.5-VL-72B-Instruct" in line)
    # the published row's numbers, each with its bootstrap interval (the folder's metrics carry them)
    assert [cell.split(" ")[0] for cell in row.split(" | ")[3:9]] == ["54.0", "40.1", "18.0", "57.0", "52.7", "41.1"]
    assert all(" ± " in cell or " [" in cell for cell in row.split(" | ")[3:9])  # as the leaderboard writes intervals

    # the same command again rewrites the folder; a folder of something else is refused
    assert main(["score", "ref_adv_s", "--predictions", str(REF_ADV_PREDICTIONS), "--out", str(out)]) == 0
    capsys.readouterr()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["score", "ref_adv_s", "--predictions", str(REF_ADV_PREDICTIONS), "--out", str(other)]) == 2
    assert "not empty" in one_sentence(capsys.readouterr().err)
    assert main(["score", "ref_adv_s", "--predictions", str(out), "--out", str(tmp_path / "again")]) == 2
    assert "is a run folder already" in one_sentence(capsys.readouterr().err)
    assert main(["score", "ref_adv_s", "--predictions", str(REF_ADV_PREDICTIONS), "--label", "x"]) == 2
    assert "--label" in one_sentence(capsys.readouterr().err)


def test_a_predictions_run_pairs_with_a_model_run(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model run's exported predictions, written back as a run, give the model run's ids, IoUs,
    hits and dataset fingerprint: the two pair sample by sample."""
    data, _, _, script = scripted_ref_release(tmp_path)
    server = serve(script=script, default=None)
    model_run = tmp_path / "model-run"
    assert main(ref_eval_args(data, server.url, model_run, "--no-report", "--json")) == 0
    capsys.readouterr()
    exported = tmp_path / "exported.jsonl"
    shutil.copy(model_run / "predictions_ref_adv.jsonl", exported)
    out = tmp_path / "predictions"
    args = ["score", "ref_adv_s", "--predictions", str(exported), "--data", str(data), "--out", str(out), "--json"]
    written = _json(capsys, args)

    theirs, ours = read_records(model_run / "records.jsonl"), read_records(out / "records.jsonl")
    assert sorted(ours) == sorted(theirs)
    for sid, rec in theirs.items():
        assert ours[sid]["scores"]["iou"] == pytest.approx(rec["scores"]["iou"], abs=1e-12)
        assert ours[sid]["scores"]["hit"] == rec["scores"]["hit"]
        assert ours[sid].get("parse_error") == rec.get("parse_error")
    model_metrics = json.loads((model_run / "metrics.json").read_text())
    for key in ("acc@0.5", "acc@0.75", "acc@0.9", "bins", "parse_fail"):
        assert written[key] == model_metrics[key]
    model_header = json.loads((model_run / "run.json").read_text())
    header = json.loads((out / "run.json").read_text())
    assert header["identity"]["dataset"] == model_header["identity"]["dataset"]
    assert header["config"]["model"] == "published:org/m"

    board = tmp_path / "board"
    assert main(["report", str(tmp_path / "model-run"), str(out), "--out", str(board)]) == 0
    md = (board / "leaderboard.md").read_text()
    assert "published:org/m" in md and "| org/m |" in md


def test_mc_bench_results_file_becomes_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = TEST_DATA / "mc-bench" / "perturbed_noswap_result.json"
    annotations = MC_BENCH_RELEASE
    plain = _json(capsys, ["score", "mc_bench", "--predictions", str(results), "--data", str(annotations), "--json"])
    out = tmp_path / "mc"
    args = ["score", "mc_bench", "--predictions", str(results), "--data", str(annotations), "--out", str(out)]
    written = _json(capsys, [*args, "--label", "perturbed", "--json"])
    assert _without_run(written) == plain
    assert written["official"]["ap50"] == pytest.approx(0.6562401387740078, abs=1e-12)
    assert written["run"]["samples"] == 2000
    # the folder re-scores as the file (its data path is in run.json)
    assert _json(capsys, ["score", "mc_bench", "--predictions", str(out), "--json"]) == plain
    header = json.loads((out / "run.json").read_text())
    assert header["config"]["model"] == "published:perturbed"
    records = read_records(out / "records.jsonl")
    assert len(records) == 2000
    boxes = sum(r["scores"]["boxes"] for r in records.values())
    assert boxes == len(json.loads(results.read_text()))
    assert main(["report", str(out), "--out", str(tmp_path / "board")]) == 0
    assert "published:perturbed" in (tmp_path / "board" / "leaderboard.md").read_text()


def test_mm_niah_leaderboard_files_become_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from needlepoint.benchmarks.mm_niah.ranges import TASKS
    from needlepoint.benchmarks.mm_niah.response_files import write_response_files

    rows = {
        task: [
            {
                "question_id": i,
                "question": "q?",
                "answer": "[1, 2]" if task.startswith("counting") else (1 if task.endswith("image") else "paris"),
                "response": "[1, 2]" if i % 2 else ("B" if task.endswith("image") else "Paris."),
                "context_length": 1000 + 3000 * i,
                "placed_depth": [0.5, 0.7] if task.startswith("counting") else 0.5,
            }
            for i in range(4)
        ]
        for task in TASKS
    }
    files = tmp_path / "files"
    write_response_files(files, "their_model", "val", rows)
    plain = _json(capsys, ["score", "mm_niah", "--predictions", str(files), "--json"])
    out = tmp_path / "niah"
    written = _json(capsys, ["score", "mm_niah", "--predictions", str(files), "--out", str(out), "--json"])
    assert _without_run(written) == plain
    assert _json(capsys, ["score", "mm_niah", "--predictions", str(out), "--json"]) == plain
    records = read_records(out / "records.jsonl")
    assert len(records) == 4 * len(TASKS) and f"{TASKS[0]}/3" in records
    assert json.loads((out / "run.json").read_text())["config"]["model"] == "published:their_model"
    assert main(["report", str(out), "--out", str(tmp_path / "board")]) == 0
    capsys.readouterr()

    write_response_files(files, "another", "val", rows)  # two models in one folder: one run holds one
    assert main(["score", "mm_niah", "--predictions", str(files), "--out", str(tmp_path / "two")]) == 2
    assert "2 models" in one_sentence(capsys.readouterr().err)


def test_another_models_predictions_run_is_never_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42.4: `score --out DIR` rewrites DIR only for the same command again; a predictions run
    of another model (or file) there is refused in one sentence, its files untouched."""
    out = tmp_path / "predictions"
    args = ["score", "ref_adv_s", "--predictions", str(REF_ADV_PREDICTIONS), "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main([*args, "--label", "someone-else"]) == 2
    line = one_sentence(capsys.readouterr().err)
    assert f"--out {out} holds the predictions run of published:Qwen/Qwen2.5-VL-72B-Instruct" in line
    assert "name another --out folder" in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert main(args) == 0  # the same command again still rewrites its own run
    capsys.readouterr()
    assert main([*args[:-1], str(tmp_path / "theirs"), "--label", "someone-else"]) == 0
