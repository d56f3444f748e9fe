"""Files are data, not code paths: `score` and `report` over hostile prediction, run.json and
metrics.json files. Each bad file ends in exit 2 and one sentence that names the file, never a
traceback; a bad run folder among good ones is skipped with its reason."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers import MC_BENCH_RELEASE, one_sentence, run_cli

from needlepoint.cli import main as cli_main
from needlepoint.core.errors import DataError
from needlepoint.core.jsonl import parse, read_json, read_jsonl, read_jsonl_offsets, read_line_at
from needlepoint.core.numeric import boolean, integer
from needlepoint.core.text import writable

DEEP = "[" * 100_000 + "]" * 100_000
BIG = "1" * 500
SURROGATE = '"\\ud800"'


def _one_sentence(code: int, err: str, *needles: str) -> None:
    """Exit code 2 and one sentence on stderr that names every needle."""
    assert code == 2, err
    line = one_sentence(err)
    for needle in needles:
        assert needle in line, err


def _score(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(["score", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- the reader ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (DEEP, "is nested too deeply"),
        ("[" * 600 + "]" * 600, "is nested too deeply"),  # under the interpreter's limit, over ours
        ("[" + "[{}]," * 5000 + "[" * 600 + "]" * 601, "is nested too deeply"),  # deep past 10,000 containers
        ('{"a": ' + BIG + "}", "holds a number beyond float range"),
        ('{"a": -' + BIG + "}", "holds a number beyond float range"),
        ('{"a": 1e400}', "holds a number beyond float range"),
        ('{"a": ' + "9" * 5000 + "}", "holds a number beyond float range"),  # past int()'s digit limit
        ("{nope", "is not valid JSON"),
    ],
)
def test_parse_names_the_fault_in_one_sentence(raw: str, message: str) -> None:
    with pytest.raises(Exception) as info:
        parse(raw.encode(), "F line 3")
    assert type(info.value).__name__ == "DataError"
    assert str(info.value).startswith(f"F line 3 {message}")


def test_a_document_of_many_shallow_containers_is_read() -> None:
    """Past the quick walk's budget (15,001 containers here) the brackets are counted, and as they
    could reach the limit (15,001 of them), the walk goes on to the end: 4 levels, read."""
    wide = [[{"a": [i]}] for i in range(5000)]
    assert parse(json.dumps(wide).encode(), "F") == wide


def test_an_integer_past_64_bits_in_a_row_is_read_exactly(tmp_path: Path) -> None:
    """orjson reads such an integer as a float (two distinct ids would meet in one); a row holding
    one is read again by the standard parser. A float as large stays a float."""
    raw = b'{"id": 123456789012345678901234567890, "ids": [-9223372036854775809, 18446744073709551615], "x": 1e300}'
    value = parse(raw, "F")
    assert value == {"id": 123456789012345678901234567890, "ids": [-9223372036854775809, 18446744073709551615], "x": 1e300}
    assert all(type(v) is int for v in (value["id"], *value["ids"])) and type(value["x"]) is float
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"id": 10000000000000000000001}\n{"id": 10000000000000000000002}\n')
    assert [row["id"] for _, row in read_jsonl(path)] == [10000000000000000000001, 10000000000000000000002]


def test_parse_makes_lone_surrogates_writable_and_keeps_pairs() -> None:
    value = parse(b'{"\\udfff": ["\\ud800x", "\\ud83d\\ude00"], "n": NaN}', "F")
    assert value["\ufffd"] == ["\ufffdx", "\U0001f600"]
    assert value["n"] != value["n"]  # NaN is read; the caller's number rule decides
    json.dumps(value).encode("utf-8")
    assert writable("a\udcff") == "a\ufffd"


def test_a_bom_is_read_past_by_every_reader(tmp_path: Path) -> None:
    doc, lines = tmp_path / "a.json", tmp_path / "a.jsonl"
    doc.write_bytes(b"\xef\xbb\xbf[1]")
    lines.write_bytes(b'\xef\xbb\xbf{"a": 1}\n{"a": 2}\n')
    assert read_json(doc, "x") == [1]
    assert [row for _, row in read_jsonl(lines)] == [{"a": 1}, {"a": 2}]


def test_a_line_is_read_again_by_its_offset_and_length(tmp_path: Path) -> None:
    """A row read back by offset and length (one read) equals the one loaded, past a BOM, on a
    long line and on a last line with no newline; its CRC tells a line rewritten in place (the
    same length) from the one loaded; a file that changed under it is one sentence."""
    lines = tmp_path / "a.jsonl"
    long = "word " * 100_000
    lines.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n' + json.dumps({"a": long}).encode() + b'\n{"a": 3}')
    found = list(read_jsonl_offsets(lines))
    assert [line.row for line in found] == [{"a": 1}, {"a": long}, {"a": 3}]
    for line in found:
        assert read_line_at(lines, line.offset, line.length) == line.row
        assert read_line_at(lines, line.offset, line.length, line.crc) == line.row
    second = found[1]
    lines.write_bytes(lines.read_bytes().replace(b"word word", b"ward word", 1))
    assert read_line_at(lines, second.offset, second.length)["a"].startswith("ward")  # no CRC: not checked
    with pytest.raises(DataError, match=r"changed during the run \(the line at byte \d+\); restore it"):
        read_line_at(lines, second.offset, second.length, second.crc)
    assert read_line_at(lines, found[2].offset, found[2].length, found[2].crc) == {"a": 3}  # the others are as they were
    lines.write_bytes(lines.read_bytes()[: second.offset + 10])
    with pytest.raises(DataError, match="changed or became unreadable during the run"):
        read_line_at(lines, second.offset, second.length)
    with pytest.raises(DataError, match="changed during the run"):
        read_line_at(lines, second.offset, second.length, second.crc)


def test_only_regular_files_within_the_limit_are_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    big = tmp_path / "big.json"
    big.write_text("[" + "1," * 100 + "1]")
    for path, message in (
        (fifo, "not a regular file"),
        (zero, "not a regular file"),
        (tmp_path, "a folder"),
        (big, "over the limit"),
    ):
        with pytest.raises(Exception, match=message) as info:
            read_json(path, "give a file", limit=100)
        assert str(info.value).startswith(str(path)) and type(info.value).__name__ == "DataError"


def test_field_rules() -> None:
    assert integer(3, "w", "n") == 3 and integer(3.0, "w", "n") == 3
    for bad, message in (
        ("five", "not a whole number"),
        (2.5, "not a whole number"),
        (True, "not a whole number"),
        (-3, "at least 0"),
        (10**30, "at most"),
        (None, "not a whole number"),
    ):
        with pytest.raises(Exception, match=message):
            integer(bad, "w", "n")
    assert boolean(True, "w", "f") is True and boolean(None, "w", "f") is False
    for bad in ("yes", "true", 1, 0):
        with pytest.raises(Exception, match="not true or false"):
            boolean(bad, "w", "f")


# --- Ref-Adv-s prediction files ------------------------------------------------------------------

REF_ROW = {
    "row_idx": 0,
    "gt_bbox_xyxy": [0, 0, 10, 10],
    "pred_box_xyxy_first": [0, 0, 10, 10],
    "distractor_count": 3,
    "parse_error": "",
    "use_negation": False,
    "human_authored": True,
    "image_source": "coco_val2017",
    "retry_followup_used": False,
    "model_full_name": "m",
    "prompt_id": "direct",
}


def _ref_file(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "pred.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _ref_row(**fields: Any) -> str:
    return json.dumps({**REF_ROW, **fields})


def _ref_raw(raw: str) -> str:
    """A row with one more field whose JSON text is `raw` (what json.dumps cannot write)."""
    return _ref_row()[:-1] + ', "extra": ' + raw + "}"


@pytest.mark.parametrize(
    ("lines", "needles"),
    [
        ([_ref_raw(DEEP)], ["line 1 is nested too deeply"]),
        ([_ref_row(), _ref_raw(BIG)], ["line 2 holds a number beyond float range"]),
        ([_ref_row(distractor_count="five")], ["`distractor_count` is 'five', not a whole number"]),
        ([_ref_row(distractor_count=-3)], ["`distractor_count` is -3; it must be at least 0"]),
        ([_ref_row(distractor_count=2.5)], ["`distractor_count` is 2.5, not a whole number"]),
        ([_ref_row(distractor_count=10**30)], ["`distractor_count`", "at most"]),
        ([_ref_row(use_negation="yes")], ["`use_negation` is 'yes', not true or false"]),
        ([_ref_row(human_authored=1)], ["`human_authored` is 1, not true or false"]),
        ([_ref_row(pred_box_xyxy_first="left top")], ["`pred_box_xyxy_first` must be a box", "got the string 'left top'"]),
        ([_ref_row(), _ref_row(row_idx=1, model_full_name="other")], ["mixes rows of 2 values of `model_full_name`", "1 rows"]),
        ([_ref_row(), _ref_row(row_idx=1, prompt_id="cot")], ["mixes rows of 2 values of `prompt_id`"]),
        ([_ref_row(), _ref_row(), _ref_row()], ["holds 2 duplicate row(s)", "line 2 repeats row_idx 0 of line 1"]),
    ],
)
def test_hostile_ref_adv_predictions_are_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str], needles: list[str]
) -> None:
    path = _ref_file(tmp_path, lines)
    code, _, err = _score(capsys, "ref_adv_s", "--predictions", str(path))
    _one_sentence(code, err, str(path), *needles)


def test_ref_adv_lone_surrogates_and_a_bom_are_scored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pred.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (_ref_row(image_source="\ud800x") + "\n").encode("ascii"))
    code, out, err = _score(capsys, "ref_adv_s", "--predictions", str(path), "--json")
    assert code == 0, err
    metrics = json.loads(out)
    assert metrics["n"] == 1 and list(metrics["by_image_source"]) == ["\ufffdx"]


# --- MM-NIAH leaderboard files -------------------------------------------------------------------

NIAH_ROW = {"question_id": 1, "question": "q", "answer": "a", "response": "a", "context_length": 2000, "placed_depth": 0.5}


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        (json.dumps(NIAH_ROW)[:-1] + ', "x": ' + DEEP + "}", ["line 1 is nested too deeply"]),
        (
            json.dumps({**NIAH_ROW, "response": 0})[:-1].replace('"response": 0', '"response": ' + BIG) + "}",
            ["line 1 holds a number beyond float range"],
        ),
        (json.dumps({**NIAH_ROW, "context_length": -5}), ["line 1: context_length is -5, a negative size"]),
        (json.dumps({**NIAH_ROW, "context_length": "long"}), ["line 1: context_length is 'long'"]),
        (
            json.dumps(NIAH_ROW) + "\n" + json.dumps({**NIAH_ROW, "question_id": 2}) + "\n" + json.dumps(NIAH_ROW),
            ["holds 1 duplicate row(s)", "line 3 repeats question_id 1 of line 1"],
        ),
    ],
)
def test_hostile_mm_niah_predictions_are_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needles: list[str]
) -> None:
    path = tmp_path / "m_retrieval-text-val.jsonl"
    path.write_text(text + "\n", encoding="utf-8")
    code, _, err = _score(capsys, "mm_niah", "--predictions", str(tmp_path))
    _one_sentence(code, err, str(path), *needles)


def test_mm_niah_lone_surrogate_response_is_scored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m_retrieval-text-val.jsonl"
    path.write_text(json.dumps({**NIAH_ROW, "response": "\ud800"}) + "\n", encoding="ascii")
    code, out, err = _score(capsys, "mm_niah", "--predictions", str(tmp_path), "--json")
    assert code == 0, err
    assert json.loads(out)["tasks"]["retrieval-text"]["rows"] == 1


# --- MC-Bench results files ----------------------------------------------------------------------

MC_ENTRY = '{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5'


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("[" + MC_ENTRY + ', "x": ' + DEEP + "}]", ["is nested too deeply"]),
        ("[" + MC_ENTRY + ', "x": ' + BIG + "}]", ["holds a number beyond float range"]),
        ('[{"image_id": ' + BIG + ', "category_id": 1, "bbox": [1, 2, 3, 4]}]', ["holds a number beyond float range"]),
        ('[{"image_id": 1, "category_id": -1, "bbox": [1, 2, 3, 4]}]', ["category_id (the group) is -1; it must be at least 1"]),
        ('[{"image_id": 1, "category_id": 0, "bbox": [1, 2, 3, 4]}]', ["category_id (the group) is 0; it must be at least 1"]),
        (
            '[{"image_id": 1, "category_id": 10000000000, "bbox": [1, 2, 3, 4]}]',
            ["is 10000000000; it must be at most 100"],
        ),
    ],
)
def test_hostile_mc_bench_results_are_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needles: list[str]
) -> None:
    path = tmp_path / "results.json"
    path.write_text(text, encoding="utf-8")
    code, _, err = _score(capsys, "mc_bench", "--predictions", str(path), "--data", str(MC_BENCH_RELEASE))
    _one_sentence(code, err, str(path), *needles)


def test_mc_bench_reads_a_bom_and_lone_surrogates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(b"\xef\xbb\xbf[" + MC_ENTRY.encode() + b', "note": ' + SURROGATE.encode() + b"}]")
    code, out, err = _score(capsys, "mc_bench", "--predictions", str(path), "--data", str(MC_BENCH_RELEASE), "--json")
    assert code == 0, err
    assert json.loads(out)["counts"]["predictions"] == 1


# --- report over hostile run folders -------------------------------------------------------------

HEADER: dict[str, Any] = {
    "config": {"benchmark": "ref_adv_s", "model": "good", "options": {}},
    "created": "2026-01-01T00:00:00+0000",
}
METRICS = {"n": 2, "acc@0.5": 0.5, "acc@0.75": 0.25, "acc@0.9": 0.0, "bins": {}, "parse_fail": 0}


def _run(root: Path, name: str, header: str | None = None, metrics: str | None = None) -> Path:
    folder = root / name / "20260101-000000"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(
        header or json.dumps({**HEADER, "config": {**HEADER["config"], "model": name}}), encoding="utf-8"
    )
    if metrics is not None:
        (folder / "metrics.json").write_text(metrics, encoding="utf-8")
    return folder


HOSTILE_RUNS = {
    "deep_metrics": (None, '{"n": ' + DEEP + "}", "metrics.json is nested too deeply"),
    "big_metrics": (None, '{"n": ' + BIG + "}", "metrics.json holds a number beyond float range"),
    "deep_header": ('{"config": ' + DEEP + "}", json.dumps(METRICS), "run.json is nested too deeply"),
    "big_header": ('{"created": ' + BIG + "}", json.dumps(METRICS), "run.json holds a number beyond float range"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_RUNS))
def test_report_of_one_hostile_run_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    header, metrics, message = HOSTILE_RUNS[name]
    run = _run(tmp_path, name, header, metrics)
    code = cli_main(["report", str(run), "--out", str(tmp_path / "board")])
    _one_sentence(code, capsys.readouterr().err, message)
    assert not (tmp_path / "board").exists()


def test_report_skips_hostile_runs_and_boards_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One bad run folder no longer stops the board of every run; each is skipped with its reason.
    Lone surrogates in run files become U+FFFD; a metric that is no number is shown as corrupt."""
    root = tmp_path / "runs"
    _run(root, "good", metrics=json.dumps(METRICS))
    for name, (header, metrics, _) in HOSTILE_RUNS.items():
        _run(root, name, header, metrics)
    _run(
        root,
        "odd",
        header=json.dumps({**HEADER, "model_label": "odd"})[:-1] + ', "x": ' + SURROGATE + "}",
        metrics=json.dumps(METRICS)[:-1] + ', "note": ' + SURROGATE + "}",
    )
    surrogate_model = {**HEADER, "config": {**HEADER["config"], "model": "label \ud800"}}
    _run(root, "surrogate", header=json.dumps(surrogate_model), metrics=json.dumps(METRICS))
    _run(root, "corrupt", metrics=json.dumps({**METRICS, "acc@0.5": float("nan"), "acc@0.75": "high", "acc@0.9": float("inf")}))
    code = cli_main(["report", str(root), "--out", str(tmp_path / "board")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Traceback" not in err
    for name, (_, _, message) in HOSTILE_RUNS.items():
        assert f"skipped {root / name / '20260101-000000'}: " in err and message in err, err
    board = (tmp_path / "board" / "leaderboard.md").read_text(encoding="utf-8")
    assert "| good |" in board and "| odd |" in board and "| label \ufffd |" in board
    corrupt_line = next(line for line in board.splitlines() if line.startswith("| corrupt |"))
    assert corrupt_line.split(" | ")[3:6] == ["corrupt", "corrupt", "corrupt"]
    assert "nan" not in corrupt_line and "inf" not in corrupt_line
    csv_text = (tmp_path / "board" / "leaderboard_ref_adv_s.csv").read_text(encoding="utf-8")
    assert "corrupt,corrupt,corrupt" in csv_text


@pytest.mark.parametrize("kind", ["dev_zero", "fifo"])
def test_report_reads_only_regular_files(tmp_path: Path, kind: str) -> None:
    """metrics.json as a symlink to /dev/zero grew `report` until it was killed; a FIFO hung it.
    Run as a process with a timeout, so that the old behaviour fails the test instead of hanging it."""
    root = tmp_path / "runs"
    _run(root, "good", metrics=json.dumps(METRICS))
    bad = _run(root, "bad")
    if kind == "fifo":
        os.mkfifo(bad / "metrics.json")
    else:
        (bad / "metrics.json").symlink_to("/dev/zero")
    result = run_cli(["report", str(root), "--out", str(tmp_path / "board")], timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"skipped {bad}: {bad / 'metrics.json'} cannot be read: it is not a regular file" in result.stderr
    assert "| good |" in (tmp_path / "board" / "leaderboard.md").read_text(encoding="utf-8")
    single = run_cli(["report", str(bad), "--out", str(tmp_path / "board2")], timeout=60)
    _one_sentence(single.returncode, single.stderr, "not a regular file")


def test_score_of_a_run_folder_with_a_hostile_run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"config": ' + DEEP + "}", encoding="utf-8")
    code, _, err = _score(capsys, "ref_adv_s", "--predictions", str(run))
    _one_sentence(code, err, "run.json is nested too deeply")


# --- argv ----------------------------------------------------------------------------------------


def test_a_model_name_that_is_not_utf8_is_refused_before_a_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--model` given as bytes b'\\xff' (argv decodes them with surrogateescape) crashed at the
    first run.json write and left a folder; it is refused first, and shown as written."""
    data = tmp_path / "data.jsonl"
    data.write_text("", encoding="utf-8")
    out = tmp_path / "out"
    model = os.fsdecode(b"m\xff")
    code = cli_main(
        ["eval", "ref_adv_s", "--data", str(data), "--model", model, "--api-url", "http://127.0.0.1:9/v1", "--out", str(out)]
    )
    _one_sentence(code, capsys.readouterr().err, "--model 'm\\xff' is not UTF-8 text")
    assert not out.exists()


def test_report_of_a_run_folder_whose_name_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder name of bytes that are not UTF-8 reaches the board's source column: written as U+FFFD."""
    root = tmp_path / "runs"
    _run(root, os.fsdecode(b"m\xff"), metrics=json.dumps(METRICS))
    code = cli_main(["report", str(root), "--out", str(tmp_path / "board")])
    assert code == 0, capsys.readouterr().err
    assert "m\ufffd/20260101-000000 |" in (tmp_path / "board" / "leaderboard.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("flag", ["--extra-body", "--solver-option"])
def test_json_flags_nested_deeply_are_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    deep = "[" * 30_000 + "]" * 30_000  # as deep as one argument can carry (128 KiB)
    value = '{"a": ' + deep + "}" if flag == "--extra-body" else "x=" + deep
    code = cli_main(
        ["eval", "ref_adv_s", "--data", str(tmp_path), "--model", "m", "--api-url", "http://127.0.0.1:9/v1", flag, value]
    )
    _one_sentence(code, capsys.readouterr().err)


def test_a_model_group_within_range_reaches_the_results_file() -> None:
    """Results files hold category_id 1..GROUP_MAX, the range a reply's group is read in: a group
    500 is kept and the run's own results file accepts it; a group beyond the range is no group."""
    from needlepoint.benchmarks.mc_bench.parse import GROUP_MAX, OutOfRange, PairGeometry, group_number, parse_answer
    from needlepoint.benchmarks.mc_bench.scoring import check_results

    assert [group_number(v) for v in (3, 3.0, "group 7", GROUP_MAX)] == [3, 3, 7, GROUP_MAX]
    for beyond in (GROUP_MAX + 1, 10**30, "9" * 400, 1e300):
        with pytest.raises(OutOfRange):
            group_number(beyond)
    geometry = PairGeometry(((100.0, 100.0), (100.0, 100.0)))
    text = '{"image_1": [{"group": 500, "bbox_2d": [1, 1, 20, 20]}], "image_2": []}'
    parsed = parse_answer(text, geometry, "abs_xyxy", merged=False)
    assert [b["group"] for b in parsed.answer] == [500]
    check_results([{"image_id": 1, "category_id": b["group"], "bbox": [1, 1, 19, 19]} for b in parsed.answer])
