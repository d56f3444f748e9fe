"""The command line: re-scoring published predictions, bad input as one sentence, demo (and its
model kept serving, `demo --serve`), exports."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import REF_ADV_PREDICTIONS, REPO, prompt_key, run_cli, write_jsonl_release
from helpers.cli import start_cli

from needlepoint.benchmarks.ref_adv import RefAdv
from needlepoint.benchmarks.ref_adv.demo import answers_for, make_rows, write_release
from needlepoint.cli import main
from needlepoint.core.geometry import iou

AUTHORS_FIELDS = {
    "row_idx",
    "file_name",
    "normal_caption",
    "image_source",
    "human_authored",
    "use_negation",
    "distractor_count",
    "gt_bbox_xyxy",
    "pred_box_xyxy_first",
    "first_iou",
    "first_hit",
    "parse_error",
    "retry_followup_used",
    "model_full_name",
    "prompt_id",
    "pred_box_expected_format",
}


# --- re-scoring the authors' published predictions


def _check_published_row(metrics: dict[str, Any]) -> None:
    assert metrics["n"] == 1142
    assert (metrics["hits@0.5"], metrics["hits@0.75"], metrics["hits@0.9"]) == (617, 458, 206)
    assert metrics["acc@0.5"] == 617 / 1142
    assert metrics["acc@0.75"] == 458 / 1142
    assert metrics["acc@0.9"] == 206 / 1142
    assert [round(100 * metrics[f"acc@{t}"], 1) for t in (0.5, 0.75, 0.9)] == [54.0, 40.1, 18.0]
    bins = metrics["bins"]
    assert [bins[b]["n"] for b in ("2-3", "4-6", ">=7")] == [698, 315, 129]
    assert [round(100 * bins[b]["acc@0.5"], 1) for b in ("2-3", "4-6", ">=7")] == [57.0, 52.7, 41.1]
    assert metrics["parse_fail"] == 8
    assert metrics["backend_errors"] == 0


def test_score_published_predictions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["score", "ref_adv_s", "--predictions", str(REF_ADV_PREDICTIONS), "--json"]) == 0
    _check_published_row(json.loads(capsys.readouterr().out))


def test_score_published_predictions_subprocess() -> None:
    relative = os.path.relpath(REF_ADV_PREDICTIONS, REPO)  # tests/data/ref-adv-s/... from the checkout
    done = run_cli(["score", "ref_adv_s", "--predictions", relative, "--json"], cwd=REPO)
    assert done.returncode == 0, done.stderr
    _check_published_row(json.loads(done.stdout))


def test_score_table_shows_the_published_row(capsys: pytest.CaptureFixture[str]) -> None:
    """The terminal table reads like the paper's row: percentages with one decimal."""
    assert main(["score", "ref_adv_s", "--predictions", str(REF_ADV_PREDICTIONS)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "1142" in line)
    assert re.findall(r"\d+(?:\.\d+)?", row) == ["1142", "54.0", "40.1", "18.0", "57.0", "52.7", "41.1", "8", "8", "0"]


# --- bad input: one sentence, exit 2, nothing sent


def _parquet_without_solution(tmp: Path) -> Path:
    rows = [{k: v for k, v in r.items() if not k.startswith("_") and k != "solution"} for r in make_rows(2)]
    (tmp / "data").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp / "data" / "train-00000-of-00001.parquet")
    return tmp


def _jsonl(tmp: Path, mutate: Callable[[list[str]], None]) -> Path:
    folder = write_jsonl_release(tmp, make_rows(3), fmt="JPEG")
    lines = (folder / "data.jsonl").read_text().splitlines()
    mutate(lines)
    (folder / "data.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _two_jsonl(tmp: Path) -> Path:
    """A release folder beside which a second JSONL lies (a run's predictions written into it)."""
    folder = write_jsonl_release(tmp, make_rows(3), fmt="JPEG")
    (folder / "predictions_ref_adv.jsonl").write_text('{"id": 0}\n')
    return folder


def _set_image(name: str) -> Callable[[list[str]], None]:
    def mutate(lines: list[str]) -> None:
        row = json.loads(lines[1])
        row["image"] = name
        lines[1] = json.dumps(row)

    return mutate


def _bad_line(lines: list[str]) -> None:
    lines[1] = lines[1][:40]


BAD_INPUT: list[tuple[str, Callable[[Path], tuple[Path, list[str]]], str]] = [
    ("missing_data", lambda t: (t / "nowhere", []), "does not exist"),
    ("empty_folder", lambda t: (t, []), "no parquet"),
    ("parquet_without_solution", lambda t: (_parquet_without_solution(t), []), "solution"),
    ("jsonl_bad_line", lambda t: (_jsonl(t, _bad_line), []), "line 2"),
    ("image_path_leaves_folder", lambda t: (_jsonl(t, _set_image("../escape.jpg")), []), "../escape.jpg"),
    ("absolute_image_path", lambda t: (_jsonl(t, _set_image("/etc/passwd")), []), "/etc/passwd"),
    ("missing_image", lambda t: (_jsonl(t, _set_image("missing.jpg")), []), "missing.jpg"),
    ("two_jsonl_files", lambda t: (_two_jsonl(t), []), "holds 2 JSONL files (data.jsonl, predictions_ref_adv.jsonl)"),
    ("extra_body_not_json", lambda t: (t, ["--extra-body", "{top_k: 1}"]), "--extra-body"),
    ("extra_body_not_object", lambda t: (t, ["--extra-body", "[1, 2]"]), "--extra-body"),
    ("extra_body_credential", lambda t: (t, ["--extra-body", '{"api_key": "sk-XB-99"}']), "holds a credential ('api_key')"),
    ("option_of_another_benchmark", lambda t: (t, ["--input-mode", "merged"]), "--input-mode"),
    ("unknown_box_format", lambda t: (t, ["--box-format", "xywh"]), "--box-format"),
    ("unknown_prompt_mode", lambda t: (t, ["--prompt-mode", "fancy"]), "--prompt-mode"),
    ("concurrency_zero", lambda t: (t, ["--concurrency", "0"]), "--concurrency"),
]


@pytest.mark.parametrize(("make", "needle"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT])
def test_bad_input_is_one_sentence(
    make: Callable[[Path], tuple[Path, list[str]]], needle: str, serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = serve()
    data, extra = make(_mkdir(tmp_path / "case"))
    args = [
        "eval",
        "ref_adv_s",
        "--data",
        str(data),
        "--model",
        "m",
        "--api-url",
        server.url,
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
        "--no-report",
    ]
    if "--box-format" not in extra:
        args += ["--box-format", "abs_xyxy"]
    assert main(args + extra) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("needlepoint: error: ")
    assert needle in lines[0]
    assert server.log == []
    assert not (tmp_path / "run" / "records.jsonl").exists()


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_bad_input_subprocess_has_no_traceback(tmp_path: Path) -> None:
    done = run_cli(
        [
            "eval",
            "ref_adv_s",
            "--data",
            str(tmp_path / "nowhere"),
            "--model",
            "m",
            "--api-url",
            "http://127.0.0.1:9/v1",
            "--box-format",
            "abs_xyxy",
            "--no-progress",
        ]
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("needlepoint: error: ")
    assert str(tmp_path / "nowhere") in lines[0]


def test_unreachable_endpoint_is_one_sentence(tmp_path: Path, ref_release: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """An endpoint nobody listens on is a user's fault to fix, not a run of backend errors scored as zeros."""
    folder, _ = ref_release
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    args = [
        "eval",
        "ref_adv_s",
        "--data",
        str(folder),
        "--model",
        "m",
        "--api-url",
        url,
        "--out",
        str(tmp_path / "run"),
        "--box-format",
        "abs_xyxy",
        "--max-retries",
        "0",
        "--no-progress",
        "--no-report",
    ]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("needlepoint: error: ")
    assert f"127.0.0.1:{port}" in lines[0]


def test_box_format_is_required_for_eval(
    ref_release: Any, serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The box format belongs to the model family and is stated by the user, never assumed."""
    folder, _ = ref_release
    server = serve()
    args = [
        "eval",
        "ref_adv_s",
        "--data",
        str(folder),
        "--model",
        "m",
        "--api-url",
        server.url,
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
        "--no-report",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("needlepoint: error: ") and err.count("\n") == 1
    assert "--box-format" in err
    assert server.log == []


def test_score_missing_predictions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["score", "ref_adv_s", "--predictions", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("needlepoint: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_score_file_in_another_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "preds.jsonl"
    path.write_text('{"id": 1, "answer": "x"}\n')
    assert main(["score", "ref_adv_s", "--predictions", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("needlepoint: error: ") and "line 1" in err and err.count("\n") == 1


# --- the demo


def test_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--benchmarks", "ref_adv_s", "--out", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "Ref-Adv-s" in out and "Acc@0.5" in out and "parse fail" in out
    run = tmp_path / "demo" / "runs" / "ref_adv_s"
    assert json.loads((run / "run.json").read_text())["hash"] == DEMO_REF_ADV_HASH
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics.pop("intervals")["metrics"]["acc@0.5"]["estimate"] == 23 / 30  # the intervals: docs/statistics.md
    assert metrics.pop("usage")["roles"]["model"]["requests"] == 36  # 30 samples, 6 repair turns
    assert metrics == DEMO_REF_ADV_METRICS


# The demo's Ref-Adv-s numbers, pinned: the simulated model's scripted mistakes cost 7 of 30 hits at
# 0.5, 6 replies need the repair turn (the malformed and the prose-only cases). A change to the
# demo's data, script, prompt or scoring shows here; when it is meant, update these from a run of
# `needlepoint demo --benchmarks ref_adv_s --out DIR` (DIR/runs/ref_adv_s/metrics.json, run.json's hash).
DEMO_REF_ADV_HASH = "6fcdf0505183bd0e"
DEMO_REF_ADV_METRICS = {
    "n": 30,
    "acc@0.5": 23 / 30,
    "hits@0.5": 23,
    "acc@0.75": 0.7,
    "hits@0.75": 21,
    "acc@0.9": 0.7,
    "hits@0.9": 21,
    "bins": {"2-3": {"n": 10, "acc@0.5": 0.8}, "4-6": {"n": 12, "acc@0.5": 8 / 12}, ">=7": {"n": 8, "acc@0.5": 0.875}},
    "parse_fail": 0,
    "parse_errors": {},
    "failed": 0,
    "failures": {},
    "backend_errors": 0,
    "repair_used": 6,
    "repair_share": 0.2,
    "by_negation": {"false": {"n": 20, "acc@0.5": 0.8}, "true": {"n": 10, "acc@0.5": 0.7}},
    "by_human_authored": {"false": {"n": 8, "acc@0.5": 0.75}, "true": {"n": 22, "acc@0.5": 17 / 22}},
    "by_image_source": {"coco_val2017": {"n": 15, "acc@0.5": 11 / 15}, "openimages": {"n": 15, "acc@0.5": 0.8}},
    "run": {
        "samples": 30,
        "requested": 30,
        "answered": 30,
        "failed": 0,
        "failed_by_kind": {},
        "not_requested": 0,
        "failed_ids": [],
        "skipped": [],
    },
}


# --- the demo's model kept serving: `needlepoint demo --serve`


def _read_guide(proc: subprocess.Popen[str], timeout: float = 240) -> list[str]:
    """The lines `demo --serve` prints on stdout, up to its last command (the human page's)."""
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if " human " in line:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive() or not lines or " human " not in lines[-1]:
        proc.kill()
        raise AssertionError(f"no guide printed: {lines} {proc.communicate()[1]}")
    return lines


def _serve_demo(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return start_cli(["demo", "--serve", *args], cwd)


def _stop(proc: subprocess.Popen[str], signum: int) -> str:
    """Send `signum`; the server's stderr once it has exited (killed, and the test failed, if it does not)."""
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err and "stopped serving" in err, err
    return err


def _port(url: str) -> int:
    match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/v1", url)
    assert match, url
    return int(match.group(1))


def _closed(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _served_metrics(run: Path) -> dict[str, Any]:
    metrics: dict[str, Any] = json.loads((run / "metrics.json").read_text())
    assert metrics.pop("intervals")["metrics"]["acc@0.5"]["estimate"] == 23 / 30
    assert metrics.pop("usage")["roles"]["model"]["requests"] == 36  # 30 samples, 6 repair turns
    return metrics


def test_demo_serve_prints_commands_that_run_as_printed_from_another_folder(tmp_path: Path) -> None:
    """`demo --serve --out demo` (a relative folder) serves every demo set's script; its printed
    eval commands, run by a shell in another folder, get the plain demo's numbers (the same
    requests: the same run identity), live and through the Batch API; SIGTERM ends it with 0 and
    the port closes."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _serve_demo(tmp_path, "--out", "demo")
    try:
        lines = _read_guide(proc)
        url = next(line.split()[1] for line in lines if line.strip().startswith("--api-url"))
        port = _port(url)
        commands = [line for line in lines if line.startswith(sys.executable)]
        evals = [c for c in commands if " eval " in c]
        for name in ("ref_adv_s", "mc_bench", "mm_niah"):
            assert any(f" eval {name} " in c and "--solver" not in c for c in evals), evals
        assert any("--solver agentic" in c for c in evals) and any("--solver rag" in c for c in evals)
        assert all(f"--api-url {url}" in c for c in evals) and all(str(tmp_path / "demo") in c for c in commands)
        assert [c.split()[3] for c in commands if " eval " not in c] == ["report", "compare", "human"]
        plain = next(c for c in evals if " eval ref_adv_s " in c and "--batch" not in c)
        batch = next(c for c in evals if " eval ref_adv_s " in c and "--batch" in c)
        for command in (plain, batch):
            done = subprocess.run(["/bin/sh", "-c", command], cwd=elsewhere, capture_output=True, text=True, timeout=240)
            assert done.returncode == 0, done.stderr
            run = Path(shlex.split(command)[-1])
            assert run.is_relative_to(tmp_path / "demo" / "served")
            assert json.loads((run / "run.json").read_text())["hash"] == DEMO_REF_ADV_HASH
            assert _served_metrics(run) == DEMO_REF_ADV_METRICS
        assert json.loads((run / "run.json").read_text())["config"]["batch"] is True
        assert (tmp_path / "demo" / "data" / "mm_niah").is_dir() and not list(elsewhere.iterdir())
    finally:
        _stop(proc, signal.SIGTERM)
    assert _closed(port)


def test_demo_serve_listens_on_the_port_asked_until_ctrl_c(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = _serve_demo(tmp_path, "--benchmarks", "ref_adv_s", "--port", str(port), "--out", str(tmp_path / "demo"))
    try:
        lines = _read_guide(proc)
        url = next(line.split()[1] for line in lines if line.strip().startswith("--api-url"))
        assert _port(url) == port
        with urllib.request.urlopen(f"{url}/models", timeout=30) as resp:
            assert [m["id"] for m in json.load(resp)["data"]] == ["needlepoint-simulated"]
        evals = [line for line in lines if " eval " in line and not line.startswith("#")]
        assert len(evals) == 2 and not any("--solver" in c for c in evals)  # live and batch: Ref-Adv-s declares no solver run
    finally:
        _stop(proc, signal.SIGINT)
    assert _closed(port)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--serve", "--port", "70000"], "not a port number"),
        (["--port", "8000"], "add --serve"),
        (["--serve", "--benchmarks", ","], "names no benchmark"),
        (["--serve", "--benchmarks", "nope"], "no demo for nope"),
    ],
)
def test_demo_serve_bad_input_is_one_sentence(
    args: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(tmp_path / "demo"), *args]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("needlepoint: error: ") and words in line and "\n" not in line, line


def test_demo_serve_on_a_taken_port_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["demo", "--serve", "--port", str(port), "--out", str(tmp_path / "demo")]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("needlepoint: error: cannot listen on 127.0.0.1:") and "--port" in line and "\n" not in line, line
    assert not (tmp_path / "demo").exists()  # refused before anything was written


def test_a_printed_eval_command_gives_every_setting_or_refuses() -> None:
    """`eval_argv` writes each setting of a demo run as its flag (a repeated one per item, a
    solver's own flags), and refuses a setting it cannot print rather than drop it."""
    from needlepoint.core.config import RunConfig
    from needlepoint.demo.commands import eval_argv

    config = RunConfig(
        benchmark="mc_bench",
        data=Path("/d"),
        model="m",
        api_urls=["http://h:1/v1"],
        options={"box_format": "norm_1000_xyxy"},
        solver="agentic",
        solver_options={"localizer": "vlm:loc", "localizer_url": ["http://a:1/v1", "http://b:2/v1"], "unflagged": 3},
        out=Path("/o"),
    )
    assert eval_argv(config, "--batch") == [
        *("eval", "mc_bench", "--data", "/d", "--model", "m", "--api-url", "http://h:1/v1", "--box-format", "norm_1000_xyxy"),
        *(
            "--solver",
            "agentic",
            "--localizer",
            "vlm:loc",
            "--localizer-url",
            "http://a:1/v1",
            "--localizer-url",
            "http://b:2/v1",
        ),
        *("--solver-option", "unflagged=3", "--batch", "--out", "/o"),
    ]
    with pytest.raises(ValueError, match="limit"):
        eval_argv(RunConfig(benchmark="ref_adv_s", data=Path("/d"), model="m", api_urls=["http://h:1/v1"], limit=3))


# --- a run through the CLI: exports in the authors' schema, re-scored to the same metrics


def test_export_rescores_to_run_metrics(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = make_rows(20)
    data = write_release(tmp_path / "data", rows)
    samples = RefAdv(box_format="abs_xyxy").load(data)
    keys = [prompt_key(s) for s in samples]
    script = {k: answers_for(r, i) for i, (k, r) in enumerate(zip(keys, rows))}
    script[keys[0]] = ["I cannot tell.", "Still cannot tell."]  # a parse failure after repair
    server = serve(script=script, default=None, faults={keys[1]: ["500"]})  # a backend error (no retries)
    run = tmp_path / "run"
    args = [
        "eval",
        "ref_adv_s",
        "--data",
        str(data),
        "--model",
        "org/sim-model",
        "--api-url",
        server.url,
        "--out",
        str(run),
        "--box-format",
        "abs_xyxy",
        "--no-progress",
        "--no-report",
        "--json",
        "--max-retries",
        "0",
    ]
    assert main(args) == 3  # some samples failed: the documented exit code
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    metrics = json.loads((run / "metrics.json").read_text())
    assert printed == metrics
    assert metrics["n"] == 19  # the headline metrics cover the answered samples
    # a failed request is no parse failure: the two are counted apart
    assert metrics["parse_errors"] == {"no_bbox_found": 1} and metrics["parse_fail"] == 1
    assert metrics["run"]["failed_by_kind"] == {"backend_error": 1}
    assert (metrics["run"]["answered"], metrics["run"]["failed"]) == (19, 1)
    assert "--retry-failed" in captured.err

    exported = [json.loads(line) for line in (run / "predictions_ref_adv.jsonl").read_text().splitlines()]
    assert len(exported) == 20
    for s, row in zip(samples, exported):
        assert set(row) == AUTHORS_FIELDS
        assert row["row_idx"] == s.row_idx and row["normal_caption"] == s.caption
        assert row["gt_bbox_xyxy"] == list(s.gt)
        assert row["distractor_count"] == s.distractors
        assert row["model_full_name"] == "org/sim-model"
        assert (row["prompt_id"], row["pred_box_expected_format"]) == ("direct", "abs_xyxy")
        assert isinstance(row["parse_error"], str)
        expected_iou = iou(row["pred_box_xyxy_first"], row["gt_bbox_xyxy"]) if row["pred_box_xyxy_first"] else 0.0
        assert row["first_iou"] == pytest.approx(expected_iou, abs=1e-12)
        assert row["first_hit"] == (row["first_iou"] >= 0.5)
    assert exported[0]["parse_error"] == "no_bbox_found" and exported[0]["pred_box_xyxy_first"] == []
    assert exported[0]["retry_followup_used"] is True
    assert exported[1]["parse_error"] == "backend_error"

    assert main(["score", "ref_adv_s", "--predictions", str(run), "--json"]) == 0
    rescored = json.loads(capsys.readouterr().out)
    # the authors' export keeps their rule: the failed request is a miss among 20
    assert rescored["n"] == 20 and rescored["failures"] == {"backend_error": 1}
    assert rescored["hits@0.5"] == metrics["hits@0.5"] and rescored["parse_errors"] == metrics["parse_errors"]


def test_api_key_from_environment_never_written(
    serve: Any, ref_release: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = ref_release
    server = serve()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-test")
    run = tmp_path / "run"
    assert (
        main(
            [
                "eval",
                "ref_adv_s",
                "--data",
                str(folder),
                "--model",
                "m",
                "--api-url",
                server.url,
                "--out",
                str(run),
                "--box-format",
                "abs_xyxy",
                "--limit",
                "2",
                "--no-progress",
                "--no-report",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert [h.get("Authorization") for h, _ in server.requests] == ["Bearer sk-secret-test"] * 2
    assert "sk-secret-test" not in captured.out + captured.err
    for p in run.rglob("*"):
        if p.is_file():
            assert b"sk-secret-test" not in p.read_bytes(), p
