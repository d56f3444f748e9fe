"""Bad input that ended in a traceback (exit 1) and is now one sentence with exit code 2: wrong types
in data files (an MM-NIAH image list of lists, a Ref-Adv-s parquet image column of numbers or a flag
column of words, a prompt file that is no UTF-8), flags (a URL that does not parse, --top-p 0, an unbalanced --serve-arg, a
missing --tokenizer path, a negative compare seed, a report's --ci-level outside (0, 1)), and damaged
run folders (run.json and records.jsonl edited by hand) on a resume."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import one_sentence, run_quiet, small_niah
from helpers.cli import ref_eval_args

from needlepoint.benchmarks.mc_bench import demo as mc_demo
from needlepoint.core.store import read_records

DRY = ["--dry-run", "--dry-run-requests", "0"]


def _niah_list_in_images(tmp: Path) -> list[str]:
    folder, _, _ = small_niah(tmp / "niah")
    path = sorted((folder / "mm_niah_val" / "annotations").glob("*.jsonl"))[0]
    lines = path.read_text().splitlines()
    row = json.loads(lines[0])
    row["images_list"] = [[n] for n in row["images_list"]] or [["a.jpg"]]
    path.write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    return ["eval", "mm_niah", "--data", str(folder), "--model", "m", "--split", "val", *DRY, "--out", str(tmp / "o")]


def _ref_with_column(tmp: Path, ref_release: Any, name: str, values: list[Any]) -> list[str]:
    """A dry run of the Ref-Adv-s parquet release with one column replaced by `values`."""
    table = pq.read_table(sorted(ref_release[0].rglob("*.parquet"))[0])
    table = table.set_column(table.schema.get_field_index(name), name, pa.array(values))
    (tmp / "pq" / "data").mkdir(parents=True)
    pq.write_table(table, tmp / "pq" / "data" / "train-00000-of-00001.parquet")
    return [
        "eval",
        "ref_adv_s",
        "--data",
        str(tmp / "pq"),
        "--model",
        "m",
        "--box-format",
        "abs_xyxy",
        *DRY,
        "--out",
        str(tmp / "o"),
    ]


def _ref_numbers_as_images(tmp: Path, ref_release: Any) -> list[str]:
    return _ref_with_column(tmp, ref_release, "image", list(range(len(ref_release[1]))))


def _ref_flag_of_words(tmp: Path, ref_release: Any) -> list[str]:
    """`human_authored` as words: read as false once ("abc"), and as true by `score` never."""
    return _ref_with_column(tmp, ref_release, "human_authored", ["abc"] * len(ref_release[1]))


def _prompt_file_not_utf8(tmp: Path) -> list[str]:
    data, _ = mc_demo.write_release(tmp / "mc", pairs=2)
    (tmp / "prompt.txt").write_bytes(b"\xff\xfe{text}")
    args = ["eval", "mc_bench", "--data", str(data), "--model", "m", "--box-format", "abs_xyxy", *DRY]
    return [*args, "--prompt-file", str(tmp / "prompt.txt"), "--out", str(tmp / "o")]


def _ref_eval(ref_release: Any, tmp: Path, *extra: str) -> list[str]:
    return ref_eval_args(ref_release[0], "http://127.0.0.1:9/v1", tmp / "o", *extra, model="m", max_retries=None)


CASES: list[tuple[str, Callable[[Path, Any], list[str]], str]] = [
    ("mm_niah_image_list_of_lists", lambda t, r: _niah_list_in_images(t), "`images_list` must be a list of image file names"),
    ("ref_adv_numbers_as_images", _ref_numbers_as_images, "column 'image' of"),
    ("ref_adv_flag_of_words", _ref_flag_of_words, "`human_authored` is 'abc', not true or false"),
    ("prompt_file_not_utf8", lambda t, r: _prompt_file_not_utf8(t), "is not UTF-8 text"),
    ("api_url_that_does_not_parse", lambda t, r: [*_ref_eval(r, t), "--api-url", "http://[::1/v1"], "is not a URL"),
    ("top_p_zero", lambda t, r: _ref_eval(r, t, "--top-p", "0", *DRY), "--top-p must be above 0"),
    (
        "serve_arg_unbalanced",
        lambda t, r: (
            ["eval", "ref_adv_s", "--data", str(r[0]), "--model", "m", "--box-format", "abs_xyxy"]
            + ["--serve", "vllm", "--serve-arg", "'unbalanced", "--out", str(t / "o")]
        ),
        "cannot be split as a shell would",
    ),
    ("tokenizer_path_missing", lambda t, r: _ref_eval(r, t, *DRY, "--tokenizer", "/nonexistent/deeper"), "no tokenizer at"),
    ("compare_seed_negative", lambda t, r: ["compare", str(t / "a"), str(t / "b"), "--seed", "-1"], "--seed is -1"),
    ("report_ci_level_outside", lambda t, r: ["report", str(t), "--ci-level", "5"], "--ci-level is 5.0"),
]


@pytest.mark.parametrize(("make", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_sentence(make: Callable[[Path, Any], list[str]], needle: str, ref_release: Any, tmp_path: Path) -> None:
    rc, err = run_quiet(make(tmp_path, ref_release))
    assert rc == 2 and needle in one_sentence(err), err


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda h, r: h.update(wall_s="abc"), "has a wall_s of type str"),
        (lambda h, r: h.update(endpoints=5), "has endpoints that are not rows"),
        (lambda h, r: h.update(created=float("nan")), "holds a number that is not finite"),
        (lambda h, r: h["identity"].update(shard=2), "identity.shard of type int"),
        (lambda h, r: r.update(turns=["x"]), "has a turn 1 of type str"),
        (lambda h, r: r["scores"].update(iou=None), "holds a value ref_adv_s cannot score"),
        (lambda h, r: r.update(answer=5), "holds a value ref_adv_s cannot export"),
    ],
)
def test_a_damaged_run_folder_is_refused_on_resume_in_one_sentence(
    edit: Callable[[dict[str, Any], dict[str, Any]], None], needle: str, serve: Any, ref_release: Any, tmp_path: Path
) -> None:
    server = serve()
    out = tmp_path / "run"

    def args(limit: int) -> list[str]:
        return ref_eval_args(ref_release[0], server.url, out, "--limit", str(limit), "--no-report", model="m")

    assert run_quiet(args(3))[0] == 0
    header = json.loads((out / "run.json").read_text())
    lines = (out / "records.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    edit(header, record)
    (out / "run.json").write_text(json.dumps(header))
    (out / "records.jsonl").write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    rc, err = run_quiet(args(4))
    line = one_sentence(err)
    assert rc == 2 and needle in line, err
    if "run.json" not in line:
        assert repr(str(record["id"])) in line and "records.jsonl" in line
    if "records.jsonl" not in line:
        assert len(read_records(out / "records.jsonl")) == 3  # nothing asked


def test_a_record_that_cannot_be_exported_leaves_the_runs_exports_as_they_were(
    serve: Any, ref_release: Any, tmp_path: Path
) -> None:
    """The sample that cannot be exported is found by exporting one record at a time; done in the
    run folder, each try rewrote the authors' file with one record (two of three rows lost here)."""
    server = serve()
    out = tmp_path / "run"
    args = ref_eval_args(ref_release[0], server.url, out, "--limit", "3", "--no-report", model="m")
    assert run_quiet(args)[0] == 0
    exported = out / "predictions_ref_adv.jsonl"
    before = exported.read_bytes()
    assert len(before.splitlines()) == 3
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    for record in records:  # the last sample's (records are stored as answered, exports in sample order)
        if record["id"] == "2":
            record["answer"] = 5
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rc, err = run_quiet(args)
    assert rc == 2 and "the record of sample '2' holds a value ref_adv_s cannot export" in one_sentence(err), err
    assert exported.read_bytes() == before
    assert not list(Path(tempfile.gettempdir()).glob("needlepoint-probe-*"))  # the scratch folders are gone
