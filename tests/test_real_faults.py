"""Exit codes, runs that never shrink, one rule for numbers, Qwen2.5-VL box frames, and the small
things a first run trips over. Real local HTTP servers, real files, real processes."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, one_sentence, ref_eval_args, report_blob, run_cli, scripted_ref_release, write_jsonl_release
from helpers.cli import ctrl_c_stops

from needlepoint.benchmarks.mm_niah.benchmark import shown_answer
from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.benchmarks.ref_adv.demo import make_rows
from needlepoint.cli import build_parser, main
from needlepoint.core import numeric, status
from needlepoint.core.errors import DataError
from needlepoint.core.files import json_text, write_json
from needlepoint.core.geometry import AbsFrame, check_abs_frame, iou, model_frame, smart_resize, to_absolute
from needlepoint.core.store import RunStore, read_records
from needlepoint.report.html import _heatmap_section, write_run_report
from needlepoint.run.evaluate import evaluate, score


def _strict(text: str) -> Any:
    """Parse JSON the way a strict reader does: NaN and Infinity are errors."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} in strict JSON")

    return json.loads(text, parse_constant=refuse)


# --- exit codes -----------------------------------------------------------------------------------


def test_exit_codes_answered_failed_and_resumed(serve: Any, tmp_path: Path) -> None:
    """0 when every sample was answered; 3 when some failed (the run is kept); a rerun with
    --retry-failed finishes it and exits 0."""
    data, _, keys, script = scripted_ref_release(tmp_path)
    server = serve(
        script=script, default=None, faults={keys[2]: ["500"], keys[5]: ["500"]}
    )  # transient: --retry-failed asks again
    out = tmp_path / "run"
    done = run_cli(ref_eval_args(data, server.url, out))
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and "--retry-failed" in done.stderr
    records = read_records(out / "records.jsonl")
    assert len(records) == 8 and sum(r["status"] in status.FAILED for r in records.values()) == 2
    again = run_cli(ref_eval_args(data, server.url, out, "--retry-failed"))
    assert again.returncode == 0, again.stderr
    assert all(r["status"] == status.DONE for r in read_records(out / "records.jsonl").values())
    clean = run_cli(ref_eval_args(data, server.url, tmp_path / "clean"))
    assert clean.returncode == 0, clean.stderr


@pytest.mark.parametrize("sigint", ["default", "ignored"])  # ignored: a background job of a non-interactive shell
def test_sigterm_exits_130_without_traceback_and_keeps_records(serve: Any, tmp_path: Path, sigint: str) -> None:
    data, _, keys, script = scripted_ref_release(tmp_path, n=6)
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint == "ignored" else ctrl_c_stops
    server = serve(script=script, default=None, faults={k: ["hang"] for k in keys[2:]})
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "needlepoint.cli", *ref_eval_args(data, server.url, out, "--concurrency", "1")],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignore,
    )
    try:
        deadline = time.monotonic() + 120
        while len(read_records(out / "records.jsonl")) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert len(read_records(out / "records.jsonl")) == 2


def test_report_marks_incomplete_runs_and_parse_failures_exclude_failed_requests(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, _, keys, script = scripted_ref_release(tmp_path)
    script[keys[0]] = ["no box here", "still none"]  # a true parse failure
    server = serve(script=script, default=None, faults={keys[1]: ["500"]})  # a failed request
    out = tmp_path / "run"
    assert main(ref_eval_args(data, server.url, out)) == 3
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["parse_fail"] == 1 and metrics["parse_errors"] == {"no_bbox_found": 1}
    assert metrics["run"]["failed_by_kind"] == {"backend_error": 1} and metrics["n"] == 7  # scored: the answered samples
    blob = report_blob(out / "report" / "index.html")
    errors = {it["id"]: it["e"] for it in blob["items"]}
    assert errors["0"] == "no_bbox_found" and errors["1"] is None  # the failure is not shown again as a parse error
    capsys.readouterr()
    assert main(["report", str(out), "--out", str(tmp_path / "lb")]) == 0
    captured = capsys.readouterr()
    md = (tmp_path / "lb" / "leaderboard.md").read_text(encoding="utf-8")
    assert "org/m (incomplete: 7 answered, 1 failed of 8)" in md
    assert "incomplete run" in captured.err
    row = next(line for line in md.splitlines() if line.startswith("| org/m"))
    assert row.split("|")[-3].strip() == "1"  # parse fail: 1, not 2


def test_mc_bench_failed_requests_are_not_parse_errors(serve: Any, tmp_path: Path) -> None:
    from needlepoint.benchmarks.mc_bench import demo as demo_mc

    data, options, script = demo_mc.build(tmp_path / "mc")
    first = next(iter(script))
    server = serve(script=script, default=None, faults={first: ["500"]})
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME

    result = evaluate(
        benchmark="mc_bench",
        data=data,
        model=SIMULATED_MODEL_NAME,
        api_urls=server.url,
        options=options,
        out=tmp_path / "run",
        max_retries=0,
        show_progress=False,
    )
    assert result.metrics["run"]["failed_by_kind"] == {"backend_error": 1}
    assert "backend_error" not in result.metrics["parse_errors"]
    notes = [row[0] for t in result.benchmark.tables(result.metrics) for row in t.rows if t.title == "MC-Bench notes"]
    assert not any(n.startswith("parse errors backend_error") for n in notes)


# --- never shrink a finished run ----------------------------------------------------------------


def test_limit_never_shrinks_a_finished_run(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=10)
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    assert main(ref_eval_args(data, server.url, out)) == 0
    before = json.loads((out / "metrics.json").read_text())
    sent = len(server.requests)
    assert main(ref_eval_args(data, server.url, out, "--limit", "5")) == 0
    assert len(server.requests) == sent  # nothing requested again
    after = json.loads((out / "metrics.json").read_text())
    assert after["n"] == before["n"] == 10 and after == before
    assert len((out / "predictions_ref_adv.jsonl").read_text().splitlines()) == 10
    page = (out / "report" / "index.html").read_text(encoding="utf-8")
    assert "10 samples" in page


def test_limit_bounds_what_is_requested(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=10)
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    assert main(ref_eval_args(data, server.url, out, "--limit", "4")) == 0
    assert sum(turn == 0 for _, turn in server.log) == 4
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n"] == 4 and metrics["run"]["not_requested"] == 6
    assert json.loads((out / "run.json").read_text())["status"] == "complete"  # complete at its limit
    assert main(ref_eval_args(data, server.url, out, "--limit", "7")) == 0
    assert sum(turn == 0 for _, turn in server.log) == 7 and json.loads((out / "metrics.json").read_text())["n"] == 7


def test_failed_start_leaves_no_folder_that_blocks(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=3)
    monkeypatch.chdir(tmp_path)
    dead = "http://127.0.0.1:9/v1"
    assert main(ref_eval_args(data, dead, None)) == 2
    assert not any((tmp_path / "runs").rglob("run.json"))
    assert main(ref_eval_args(data, dead, tmp_path / "named")) == 2
    assert not (tmp_path / "named").exists()
    server = serve(script=script, default=None)
    # another configuration (a different prompt mode) must not meet a half-made run
    assert main(ref_eval_args(data, server.url, None, "--prompt-mode", "direct", "--repair-on-length-only")) == 0
    capsys.readouterr()


def test_score_refuses_another_benchmarks_run_and_reads_data_from_run_json(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=4)
    server = serve(script=script, default=None)
    ref_run = tmp_path / "ref_run"
    assert main(ref_eval_args(data, server.url, ref_run)) == 0
    capsys.readouterr()
    assert main(["score", "mc_bench", "--predictions", str(ref_run)]) == 2
    assert "run folder of ref_adv_s, not mc_bench" in one_sentence(capsys.readouterr().err)

    from needlepoint.benchmarks.mc_bench import demo as demo_mc
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME

    mc_data, options, mc_script = demo_mc.build(tmp_path / "mc")
    mc_server = serve(script=mc_script, default=None)
    result = evaluate(
        benchmark="mc_bench",
        data=mc_data,
        model=SIMULATED_MODEL_NAME,
        api_urls=mc_server.url,
        options=options,
        out=tmp_path / "mc_run",
        show_progress=False,
    )
    assert main(["score", "mc_bench", "--predictions", str(result.run_dir), "--json"]) == 0  # no --data
    printed = json.loads(capsys.readouterr().out)
    assert printed["official"] == result.metrics["official"]


# --- one rule for numbers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag", [["--temperature", "nan"], ["--top-p", "inf"], ["--timeout", "nan"], ["--temperature", "-1"], ["--top-p", "1.5"]]
)
def test_non_finite_flags_are_refused(flag: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _, _, _ = scripted_ref_release(tmp_path, n=2)
    assert main(ref_eval_args(data, "http://127.0.0.1:9/v1", tmp_path / "r", *flag)) == 2
    assert flag[0] in one_sentence(capsys.readouterr().err)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("body", ['{"top_k": NaN}', '{"top_k": 1e999}', '{"x": [-Infinity]}', '{"top_k": 1' + "0" * 400 + "}"])
def test_extra_body_with_non_finite_numbers_is_refused(body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _, _, _ = scripted_ref_release(tmp_path, n=2)
    assert main(ref_eval_args(data, "http://127.0.0.1:9/v1", None, "--extra-body", body)) == 2
    assert "--extra-body" in one_sentence(capsys.readouterr().err)


def test_numbers_rule() -> None:
    for bad in (math.nan, math.inf, -math.inf, 10**400, -(10**400), True, "1", None, [1]):
        assert not numeric.is_finite(bad), bad
    for good in (0, -3, 2.5, 10**300, 1e308):
        assert numeric.is_finite(good), good
    with pytest.raises(DataError, match="negative size"):
        numeric.size(-1, "here", "`width`")
    with pytest.raises(DataError, match="an integer of 401 digits"):
        numeric.finite(10**400, "here")


def test_mc_bench_score_with_huge_integer_is_one_sentence(tmp_path: Path) -> None:
    from needlepoint.benchmarks.mc_bench import demo as demo_mc

    data, _, _ = demo_mc.build(tmp_path / "mc")
    release = json.loads((data / "mc-bench_v0.2_val.json").read_text())
    image_id = release["images"][0]["id"]
    for i, bad in enumerate(["10" + "0" * 400, "NaN", "1e999"]):
        preds = tmp_path / f"p{i}.json"
        preds.write_text(f'[{{"image_id": {image_id}, "category_id": 1, "bbox": [1, 2, {bad}, 4], "score": 1}}]')
        done = run_cli(["score", "mc_bench", "--predictions", str(preds), "--data", str(data)])
        assert done.returncode == 2, done.stderr
        assert "OverflowError" not in done.stderr
        sentence = one_sentence(done.stderr)  # a 400-digit number is refused by the reader, NaN by the box check
        assert "not four finite numbers" in sentence or "holds a number beyond float range" in sentence


def test_ref_adv_predictions_with_nan_box_are_refused(tmp_path: Path) -> None:
    row = {
        "row_idx": 0,
        "gt_bbox_xyxy": [0, 0, 10, 10],
        "pred_box_xyxy_first": [0, 0, 10, 10],
        "distractor_count": 2,
        "parse_error": "",
    }
    good = json.dumps(row)
    for bad in ("[NaN, 0, 10, 10]", "[0, 0, Infinity, 10]", "[0, 0, 1" + "0" * 400 + ", 10]"):
        path = tmp_path / "p.jsonl"
        line = json.dumps({**row, "pred_box_xyxy_first": "BOX"}).replace('"BOX"', bad)
        path.write_text(good + "\n" + line + "\n")
        done = run_cli(["score", "ref_adv_s", "--predictions", str(path)])
        assert done.returncode == 2, done.stderr
        sentence = one_sentence(done.stderr)
        assert "line 2" in sentence and ("finite" in sentence or "beyond float range" in sentence)


def test_distractor_counts_follow_the_numbers_rule(tmp_path: Path) -> None:
    from needlepoint.benchmarks.ref_adv import distractor_count

    for bad in (math.nan, math.inf, 10**400, "NaN", "1e999"):
        with pytest.raises(DataError, match="here: the distractor count"):
            distractor_count(bad, "here")
    row = {"row_idx": 0, "gt_bbox_xyxy": [0, 0, 10, 10], "pred_box_xyxy_first": [0, 0, 10, 10], "parse_error": ""}
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({**row, "distractor_count": "D"}).replace('"D"', "NaN") + "\n")
    done = run_cli(["score", "ref_adv_s", "--predictions", str(path)])
    assert done.returncode == 2 and "line 1" in one_sentence(done.stderr)


def test_data_files_refuse_non_finite_and_negative_sizes(tmp_path: Path) -> None:

    rows = make_rows(2)
    for value, words in (
        ("-640", "negative size"),
        ("NaN", "not a finite number"),
        ("1e999", "not a finite number|beyond float range"),
    ):
        folder = write_jsonl_release(tmp_path / f"d{len(value)}{value[:2]}", rows)
        lines = (folder / "data.jsonl").read_text().splitlines()
        lines[0] = json.dumps({**json.loads(lines[0]), "width": "W"}).replace('"W"', value)
        (folder / "data.jsonl").write_text("\n".join(lines) + "\n")
        with pytest.raises(DataError, match=words):
            RefAdv(box_format="abs_xyxy").load(folder / "data.jsonl")

    from needlepoint.benchmarks.mc_bench import demo as demo_mc
    from needlepoint.benchmarks.mc_bench.groundtruth import load_groundtruth

    data, _, _ = demo_mc.build(tmp_path / "mc")
    release = json.loads((data / "mc-bench_v0.2_val.json").read_text())
    for field, bad in (("width", -5), ("area", -1.0)):
        broken = json.loads(json.dumps(release))
        (broken["images"] if field == "width" else broken["annotations"])[0][field] = bad
        path = tmp_path / f"mc_{field}.json"
        path.write_text(json.dumps(broken))
        with pytest.raises(DataError):
            load_groundtruth(path)
    text = json.dumps(release).replace(f'"width": {release["images"][0]["width"]}', '"width": 1' + "0" * 400, 1)
    path = tmp_path / "mc_huge.json"
    path.write_text(text)
    with pytest.raises(DataError, match="finite|beyond float range"):
        load_groundtruth(path)


def test_every_json_written_is_strict(serve: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        json_text({"x": math.nan})
    with pytest.raises(ValueError):
        write_json(tmp_path / "m.json", {"x": math.inf})
    data, _, keys, script = scripted_ref_release(tmp_path, n=4)
    script[keys[0]] = ['{"bboxes": [[NaN, 1, 5, 5]]}', '{"bboxes": [[1, 1, Infinity, 5]]}']
    script[keys[1]] = ['{"bboxes": [[1e999, 1, 5, 5], [1, 2, 3, 4]]}']
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    assert main(ref_eval_args(data, server.url, out)) == 0
    for path in [*out.rglob("*.json"), *out.rglob("*.jsonl")]:
        text = path.read_text(encoding="utf-8")
        for line in text.splitlines() if path.suffix == ".jsonl" else [text]:
            _strict(line)
    records = read_records(out / "records.jsonl")
    assert records["0"]["parse_error"] == "no_bbox_found"  # a NaN box is no box
    assert records["1"]["answer"] == [[1.0, 2.0, 3.0, 4.0]]


def test_runs_write_no_numpy_warnings(tmp_path: Path) -> None:
    """Boxes of zero area and boxes near float's limit (areas overflow to inf) score quietly."""
    from needlepoint.benchmarks.mc_bench import demo as demo_mc

    data, _, _ = demo_mc.build(tmp_path / "mc")
    release = json.loads((data / "mc-bench_v0.2_val.json").read_text())
    preds = tmp_path / "p.json"
    image_id = release["images"][0]["id"]
    preds.write_text(
        json.dumps(
            [
                {"image_id": image_id, "category_id": 1, "bbox": [0, 0, 0, 0], "score": 1},
                {"image_id": image_id, "category_id": 1, "bbox": [0, 0, 1e308, 1e308], "score": 1},
            ]
        )
    )
    done = run_cli(["score", "mc_bench", "--predictions", str(preds), "--data", str(data)])
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    ref = tmp_path / "p.jsonl"
    ref.write_text(
        json.dumps(
            {
                "row_idx": 0,
                "gt_bbox_xyxy": [0, 0, 10, 10],
                "pred_box_xyxy_first": [-1e308, -1e308, 1e308, 1e308],
                "distractor_count": 2,
                "parse_error": "",
            }
        )
        + "\n"
    )
    done = run_cli(["score", "ref_adv_s", "--predictions", str(ref), "--json"])
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["acc@0.5"] == 0.0


# --- box frames of Qwen2.5-VL -------------------------------------------------------------------


def test_smart_resize_matches_qwens_rule() -> None:
    # worked by hand from the processor's rule (round to 28, then floor/ceil by one scale factor)
    assert smart_resize(640, 480) == (644, 476)  # round: 22.86 -> 23, 17.14 -> 17
    assert smart_resize(2000, 1500) == (1148, 840)  # area over 28*28*1280: floor(41.3), floor(30.98)
    assert smart_resize(20, 30) == (56, 84)  # area under 56*56: ceil(1.63), ceil(2.45)
    assert smart_resize(70, 42) == (56, 56)  # Python's round: 2.5 -> 2, 1.5 -> 2
    assert smart_resize(1000, 1000, factor=32, min_pixels=100, max_pixels=512 * 512) == (512, 512)


def test_abs_frame_maps_boxes_back_from_the_resized_frame() -> None:
    frame = AbsFrame("qwen-smart-resize")
    assert model_frame(2000, 1500, None, frame) == (1148, 840)
    assert model_frame(2000, 1500, None, AbsFrame()) is None  # official: pixels of the image sent
    assert model_frame(2000, 1500, 1000, frame) == smart_resize(1000, 750)  # downscaled first, then resized
    gt = (1000.0, 750.0, 1400.0, 1050.0)
    in_frame = [gt[0] * 1148 / 2000, gt[1] * 840 / 1500, gt[2] * 1148 / 2000, gt[3] * 840 / 1500]
    back = to_absolute(in_frame, "abs_xyxy", 2000, 1500, model_frame(2000, 1500, None, frame))
    assert iou(back, gt) == pytest.approx(1.0)
    assert iou(to_absolute(in_frame, "abs_xyxy", 2000, 1500, None), gt) == 0.0  # read as pixels: a miss


def test_abs_frame_flags_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DataError, match="needs --box-format abs_xyxy"):
        check_abs_frame("qwen-smart-resize", "norm_1000_xyxy")
    with pytest.raises(DataError, match="only applies with --abs-frame qwen-smart-resize"):
        check_abs_frame(None, "abs_xyxy", factor=28)
    with pytest.raises(DataError, match="exceeds"):
        check_abs_frame("qwen-smart-resize", "abs_xyxy", min_pixels=10_000, max_pixels=5_000)
    with pytest.raises(DataError, match="unknown"):
        check_abs_frame("qwen", "abs_xyxy")
    assert RefAdv(box_format="abs_xyxy").identity() == RefAdv(box_format="abs_xyxy", abs_frame="official").identity()


def test_ref_adv_run_with_qwen_frame(serve: Any, tmp_path: Path) -> None:
    """A model that answers the exact box in its resized frame scores IoU 1 with the frame, less without."""
    data, rows, keys, _ = scripted_ref_release(tmp_path, n=4)
    samples = RefAdv(box_format="abs_xyxy").load(data)
    script = {}
    for k, s in zip(keys, samples):
        fw, fh = smart_resize(int(s.width), int(s.height))
        x1, y1, x2, y2 = s.gt
        script[k] = [json.dumps({"bbox_2d": [x1 * fw / s.width, y1 * fh / s.height, x2 * fw / s.width, y2 * fh / s.height]})]
    server = serve(script=script, default=None)
    assert main(ref_eval_args(data, server.url, tmp_path / "q", "--abs-frame", "qwen-smart-resize")) == 0
    assert main(ref_eval_args(data, server.url, tmp_path / "o")) == 0
    q = read_records(tmp_path / "q" / "records.jsonl")
    o = read_records(tmp_path / "o" / "records.jsonl")
    assert all(r["scores"]["iou"] == pytest.approx(1.0) for r in q.values())
    assert any(r["scores"]["iou"] < 0.999 for r in o.values())
    header = json.loads((tmp_path / "q" / "run.json").read_text())
    assert header["identity"]["option.abs_frame"] == "qwen-smart-resize"
    assert header["identity"]["option.abs_frame_max_pixels"] == 28 * 28 * 1280


# --- first run and small things -----------------------------------------------------------------


def test_readme_creates_a_venv_before_pip_install() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "-m venv" in text and "activate" in text
    assert text.index("-m venv") < text.index("pip install -e .")
    assert ".ci/run" in text and "installs" in text


def _run_here(bench: RefAdv, samples: Any, url: str, store: RunStore, options: Any) -> None:
    """`runner.run` of the default solver in this process against the server at `url`; closes `store`."""
    import asyncio

    from needlepoint.core.conversation import Generation
    from needlepoint.models.openai_compat import OpenAICompatModel
    from needlepoint.run.runner import run
    from needlepoint.solvers.default import DefaultSolver

    model = OpenAICompatModel("m", [url], None)

    async def go() -> None:
        try:
            await run(bench, samples, model, store, Generation(), options, DefaultSolver(bench))
        finally:
            await model.aclose()

    try:
        asyncio.run(go())
    finally:
        store.close()


def test_progress_lines_without_a_terminal(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from needlepoint.run.runner import RunOptions

    data, _, _, script = scripted_ref_release(tmp_path, n=3)
    server = serve(script=script, default=None, delay_s=0.2)
    bench = RefAdv(box_format="abs_xyxy")
    store = RunStore.open(tmp_path / "run", {"hash": "h", "identity": {}})
    _run_here(bench, bench.load(data), server.url, store, RunOptions(concurrency=1, progress_every_s=0.05))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("ref_adv_s: ")]
    assert lines[-1].startswith("ref_adv_s: 3/3 answered")
    assert len(lines) >= 2 and any("/3 answered" in line and not line.startswith("ref_adv_s: 3/3") for line in lines)
    assert "\r" not in err and "\x1b" not in err  # plain lines, no terminal control


@pytest.mark.parametrize("threaded", [False, True])
def test_each_record_is_down_with_its_calls_logged_and_the_run_holds_outcomes(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threaded: bool
) -> None:
    """The runner writes a record on the event loop, and a long one in its writer thread once a
    write was slow (with `threaded`: every write counts as slow and every line as long, so the first
    record is written on the loop and the others in the thread): when `on_record` sees a record it
    is in the file, and the sample's answered call is in the run's one log of calls (no file of its
    own); the log is gone once the run is compacted; what the progress figure reads (and the run
    holds) is each record's outcome, without the turns."""
    import threading

    import needlepoint.run.runner as runner
    from needlepoint.run.runner import RunOptions
    from needlepoint.solvers.calls import CALLS_DIR, calls_path, compact, read_logs, sample_name

    if threaded:
        monkeypatch.setattr(runner, "THREAD_WRITE_BYTES", 0)
        monkeypatch.setattr(runner, "SLOW_WRITE_S", 0.0)
    writers: list[str] = []
    keep = runner._keep

    def kept(*args: Any) -> None:
        writers.append(threading.current_thread().name.split("_")[0])
        keep(*args)

    monkeypatch.setattr(runner, "_keep", kept)
    data, _, _, script = scripted_ref_release(tmp_path, n=4)
    server = serve(script=script, default=None)
    bench = RefAdv(box_format="abs_xyxy")
    samples = bench.load(data)
    store = RunStore.open(tmp_path / "run", {"hash": "h", "identity": {}})
    seen: list[tuple[str, bool, bool]] = []
    figures: list[list[dict[str, Any]]] = []
    running = bench.running

    def spy(records: Any) -> str:
        figures.append([dict(r) for r in records])
        return running(records)

    bench.running = spy  # type: ignore[method-assign]  # a spy on this one object's running figure

    def on_record(sample: Any, record: Any) -> None:
        on_disk = sample.id in read_records(store.records_path)
        logged = sample_name(sample.id) in read_logs(store.dir / CALLS_DIR)
        seen.append((sample.id, on_disk and logged, calls_path(store.dir, sample.id).exists()))

    _run_here(bench, samples, server.url, store, RunOptions(concurrency=2, progress_every_s=0.01, on_record=on_record))
    assert sorted(i for i, _, _ in seen) == sorted(s.id for s in samples)
    assert writers == ["MainThread", *["needlepoint-records"] * 3] if threaded else ["MainThread"] * 4, writers
    assert all(on_disk and not own for _, on_disk, own in seen), seen
    stored = read_records(store.records_path)
    compact(store.dir, stored)
    assert not any((store.dir / CALLS_DIR).iterdir())
    assert all(r["turns"] for r in stored.values())  # the file keeps the turns
    last = figures[-1]
    assert sorted(r["id"] for r in last) == sorted(stored)
    assert all("turns" not in r and r["scores"] == stored[r["id"]]["scores"] for r in last)


def test_report_finds_runs_recursively_and_names_what_it_skipped(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, _, _, _ = scripted_ref_release(tmp_path, n=3)
    server = serve()  # one box for every request, whatever the prompt
    root = tmp_path / "runs"
    assert main(ref_eval_args(data, server.url, root / "ref_adv_s" / "org_m" / "20260101-000000")) == 0
    assert (
        main(ref_eval_args(data, server.url, root / "ref_adv_s" / "other" / "deep" / "20260102-000000", "--prompt-mode", "cot"))
        == 0
    )
    unfinished = root / "ref_adv_s" / "org_m" / "20250101-000000"
    unfinished.mkdir(parents=True)
    (unfinished / "run.json").write_text(json.dumps({"config": {"benchmark": "ref_adv_s", "model": "org/m"}, "created": "2025"}))
    capsys.readouterr()
    assert main(["report", str(root), "--out", str(tmp_path / "lb")]) == 0
    captured = capsys.readouterr()
    with (tmp_path / "lb" / "leaderboard_ref_adv_s.csv").open(encoding="utf-8") as fh:
        sources = {line.rsplit(",", 1)[-1].strip() for line in fh.read().splitlines()[1:]}
    assert sources == {
        str(root / "ref_adv_s" / "org_m" / "20260101-000000"),
        str(root / "ref_adv_s" / "other" / "deep" / "20260102-000000"),
    }
    assert f"skipped {unfinished}: no metrics.json" in captured.err
    # the demo's layout: one run per benchmark side by side in one folder, each found
    from needlepoint.report.leaderboard import discover

    side = tmp_path / "side"
    for name in ("a", "b"):
        assert main(ref_eval_args(data, server.url, side / name, "--prompt-mode", "cot" if name == "a" else "direct")) == 0
    (side / "b" / "run.json").write_text(
        json.dumps({**json.loads((side / "b" / "run.json").read_text()), "config": {"benchmark": "mc_bench", "model": "x"}})
    )
    assert sorted(discover(side)[0]) == [side / "a", side / "b"]


def test_score_accepts_str_paths(tmp_path: Path, serve: Any) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=3)
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    assert main(ref_eval_args(data, server.url, out)) == 0
    _, metrics = score("ref_adv_s", str(out))
    assert metrics["n"] == 3


def test_every_flag_has_help() -> None:
    import argparse

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name, sub in subs.choices.items():
        for action in sub._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{name} {action.option_strings[0]}")
    assert missing == []


def test_run_page_lists_only_the_benchmarks_own_options(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=2)
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    assert main(ref_eval_args(data, server.url, out)) == 0
    header = json.loads((out / "run.json").read_text())
    header["config"]["options"] = {
        **header["config"]["options"],
        "input_mode": None,
        "tasks": None,
        "split": None,
        "styles": "Referring",
        "repair_on_length_only": False,
    }
    bench = RefAdv(box_format="abs_xyxy")
    samples = bench.load(data)
    records = read_records(out / "records.jsonl")
    page = write_run_report(
        out, bench, samples, [records[s.id] for s in samples], json.loads((out / "metrics.json").read_text()), header
    ).read_text(encoding="utf-8")
    config = page.split('id="config"', 1)[1].split("</dl>", 1)[0]
    assert "box_format" in config
    for foreign in ("input_mode", "tasks", "split", "styles", "repair_on_length_only"):
        assert foreign not in config, foreign


def test_heatmap_captions_sit_above_their_plots(tmp_path: Path) -> None:
    png = tmp_path / "report" / "heatmaps" / "overall.png"
    png.parent.mkdir(parents=True)
    png.write_bytes(b"x")
    html = _heatmap_section([png], tmp_path / "report")
    assert html.index("<figcaption>overall</figcaption>") < html.index("<img")


def test_option_answers_show_the_letter() -> None:
    assert [shown_answer(i) for i in (0, 2, 3)] == ["A", "C", "D"]
    assert shown_answer([1, 2]) == "[1, 2]" and shown_answer("cat") == '"cat"' and shown_answer(True) == "true"


def test_score_into_a_closed_pipe_prints_no_error(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=3)
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    assert main(ref_eval_args(data, server.url, out)) == 0
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (`head`) is gone before anything is written
    proc = subprocess.run(
        [sys.executable, "-m", "needlepoint.cli", "score", "ref_adv_s", "--predictions", str(out), "--json"],
        cwd=REPO,
        env=env,
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    os.close(write_end)
    assert "BrokenPipe" not in proc.stderr and "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert proc.returncode == 0
