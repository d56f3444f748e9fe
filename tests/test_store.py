"""The run folder: append-only records, torn-tail repair, last record wins, identity check, and the
one lock that keeps a second writer out of a run folder or a build's folder."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest

from needlepoint.core.errors import DataError
from needlepoint.core.files import json_compact, json_line, json_text, lock_exclusively
from needlepoint.core.records import RunHeader
from needlepoint.core.store import HEADER, RECORDS, RunStore, read_records


def _header(box_format: str = "abs_xyxy", model: str = "m") -> RunHeader:
    ident = {
        "version": 1,
        "benchmark": "ref_adv_s",
        "model": model,
        "option.box_format": box_format,
        "option.prompt_mode": "direct",
    }
    return {"hash": f"{model}-{box_format}", "identity": ident, "status": "running"}


def _lines(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    return [json.loads(line) for line in raw.splitlines()]


def test_append_then_reopen(tmp_path: Path) -> None:
    run = tmp_path / "run"
    store = RunStore.open(run, _header())
    for i in range(3):
        store.append({"id": str(i), "status": "done", "scores": {"iou": i / 10}})
    store.close()
    assert json.loads((run / HEADER).read_text())["hash"] == "m-abs_xyxy"
    assert [r["id"] for r in _lines(run / RECORDS)] == ["0", "1", "2"]
    again = RunStore.open(run, _header())
    assert set(again.records()) == {"0", "1", "2"}
    assert again.records()["2"]["scores"]["iou"] == 0.2


def test_torn_tail_is_cut_on_open(tmp_path: Path) -> None:
    run = tmp_path / "run"
    store = RunStore.open(run, _header())
    for i in range(3):
        store.append({"id": str(i), "status": "done"})
    store.close()
    good = (run / RECORDS).read_bytes()
    with (run / RECORDS).open("ab") as fh:
        fh.write(b'{"id": "3", "status": "do')
    # the read view ignores the torn line without touching the file
    assert set(read_records(run / RECORDS)) == {"0", "1", "2"}
    reopened = RunStore.open(run, _header())
    assert (run / RECORDS).read_bytes() == good
    reopened.append({"id": "3", "status": "done"})
    reopened.close()
    assert [r["id"] for r in _lines(run / RECORDS)] == ["0", "1", "2", "3"]


def test_torn_tail_longer_than_a_read_chunk(tmp_path: Path) -> None:
    run = tmp_path / "run"
    store = RunStore.open(run, _header())
    store.append({"id": "0", "status": "done"})
    store.close()
    good = (run / RECORDS).read_bytes()
    with (run / RECORDS).open("ab") as fh:
        fh.write(b'{"id": "1", "turns": [{"reply": "' + b"x" * 10_000)
    RunStore.open(run, _header())
    assert (run / RECORDS).read_bytes() == good


def test_torn_only_line_is_cut_to_empty(tmp_path: Path) -> None:
    run = tmp_path / "run"
    RunStore.open(run, _header()).close()
    (run / RECORDS).write_bytes(b'{"id": "0", "sta')
    store = RunStore.open(run, _header())
    assert (run / RECORDS).read_bytes() == b""
    assert store.records() == {}


def test_last_record_wins(tmp_path: Path) -> None:
    run = tmp_path / "run"
    store = RunStore.open(run, _header())
    store.append({"id": "7", "status": "backend_error", "error": "http_500"})
    store.append({"id": "8", "status": "done"})
    store.append({"id": "7", "status": "done", "scores": {"iou": 0.9}})
    store.close()
    records = RunStore.open(run, _header()).records()
    assert list(records) == ["7", "8"]
    assert records["7"] == {"id": "7", "status": "done", "scores": {"iou": 0.9}}


def test_records_read_as_the_standard_parser_reads_them(tmp_path: Path) -> None:
    """A record comes back as the standard parser reads it: an integer past 64 bits (a hostile
    model's count, parsed) stays that integer, not the float a faster parser makes of it; a
    hand-edited NaN and a lone surrogate are read too."""
    path = tmp_path / RECORDS
    lines = [
        '{"id": "a", "iou": 0.1, "turns": [{"reply": "x\\u00e9"}]}',
        '{"id": "b", "iou": NaN}',
        '{"id": "c", "n": 123456789012345678901234}',
        '{"id": "d", "reply": "\\ud800"}',
        '{"id": "e", "turns": [{"usage": {"n": -9223372036854775809, "m": 18446744073709551615, "x": 1e300}}]}',
        '{"id": "f", "turns": [{"usage": {"n": 9223372036854775807, "x": 0.1}}], "sent": ["' + "long " * 5000 + '"]}',
    ]
    path.write_text("\n".join(lines) + "\n")
    got = cast(dict[str, dict[str, Any]], read_records(path))  # plain JSON objects: keys no Record declares
    expected = {str(json.loads(line)["id"]): json.loads(line) for line in lines}
    assert list(got) == ["a", "b", "c", "d", "e", "f"]
    assert got["b"]["iou"] != got["b"]["iou"]  # NaN
    assert {k: v for k, v in got.items() if k != "b"} == {k: v for k, v in expected.items() if k != "b"}
    assert got["c"]["n"] == 123456789012345678901234
    assert got["e"]["turns"][0]["usage"]["n"] == -9223372036854775809  # nested, negative: the standard parser's int
    assert isinstance(got["e"]["turns"][0]["usage"]["n"], int)


def test_corrupt_complete_line_is_a_clear_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    RunStore.open(run, _header()).close()
    (run / RECORDS).write_text('{"id": "0"}\nnot json\n{"id": "1"}\n')
    with pytest.raises(DataError, match="line 2 is corrupt") as info:
        read_records(run / RECORDS)
    # the message offers a way to keep the good records; following it keeps both
    command = re.search(r"`(sed -i [^`]+)`", str(info.value))
    assert command is not None, info.value
    subprocess.run(shlex.split(command.group(1)), check=True)
    assert sorted(read_records(run / RECORDS)) == ["0", "1"]


def test_identity_mismatch_is_refused_and_names_the_difference(tmp_path: Path) -> None:
    run = tmp_path / "run"
    store = RunStore.open(run, _header("abs_xyxy"))
    store.append({"id": "0", "status": "done"})
    store.close()
    header_before = (run / HEADER).read_bytes()
    records_before = (run / RECORDS).read_bytes()
    with pytest.raises(DataError) as info:
        RunStore.open(run, _header("norm_1000_xyxy"))
    message = str(info.value)
    assert 'option.box_format "abs_xyxy" -> "norm_1000_xyxy"' in message  # the field, its stored and new value
    assert "--fresh" in message
    assert str(run) in message
    assert "\n" not in message
    assert "option.prompt_mode" not in message  # only what differs is named
    # nothing was touched
    assert (run / HEADER).read_bytes() == header_before
    assert (run / RECORDS).read_bytes() == records_before


def test_same_identity_keeps_the_original_header(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = _header()
    first["created"] = "yesterday"
    RunStore.open(run, first).close()
    second = _header()
    second["created"] = "today"
    store = RunStore.open(run, second)
    assert json.loads((run / HEADER).read_text())["created"] == "yesterday"
    store.update_header(status="complete")
    header = json.loads((run / HEADER).read_text())
    assert header["status"] == "complete" and header["created"] == "yesterday"
    assert not list(run.glob("*.tmp*"))


def test_unreadable_header_is_a_clear_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / HEADER).write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        RunStore.open(run, _header())


def test_json_compact_is_the_standard_encoders_text_for_a_page() -> None:
    """A page's data: the same text as `json_text(compact=True)` for what both write, a non-finite
    float as null, and a lone surrogate (which orjson does not write) kept for the file writer."""
    ordinary = {"id": "ä1 <b>", "v": [1, 0.1, 1e-7, None, True], "k": {"x": "y"}, "n": 2**63 - 1}
    assert json.loads(json_compact(ordinary)) == json.loads(json_text(ordinary, compact=True)) == ordinary
    assert "ä1" in json_compact(ordinary) and ", " not in json_compact(ordinary)
    assert json.loads(json_compact({"s": float("nan"), "t": [float("-inf")]})) == {"s": None, "t": [None]}
    lone = {"p": json.loads('"\\ud800 the shape"'), "big": 2**70, "nan": float("nan")}  # the fallback
    assert json_compact(lone) == json_text({**lone, "nan": None}, compact=True) and "\ud800" in json_compact(lone)


def test_json_line_is_strict_compact_json_whatever_the_record_holds(tmp_path: Path) -> None:
    """A record reaches disk as strict JSON: a reply's NaN or infinity becomes null, an integer
    over 64 bits and a lone surrogate (which orjson does not write) are kept, non-string keys
    become strings; the line reads back as the standard library reads it."""
    record: dict[str, Any] = {
        "id": "ä1",
        "usage": {"total_tokens": 2**70, 3: "x"},
        "scores": {"iou": float("nan"), "v": [float("inf"), 0.1]},
    }
    for obj in (record, {k: v for k, v in record.items() if k != "usage"}):  # the fallback and orjson alike
        line = json_line(obj)
        assert b"\n" not in line
        back = json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} written"))
        assert back["scores"] == {"iou": None, "v": [None, 0.1]} and back["id"] == "ä1"
    assert "ä1".encode() in json_line({"id": "ä1"})  # UTF-8 as it is (the fallback escapes it)
    assert json.loads(json_line(record))["usage"] == {"total_tokens": 2**70, "3": "x"}
    hostile = {"id": "s", "turns": [{"reply": json.loads('"a\\ud800b"')}]}  # a lone surrogate, as a server can send it
    assert json.loads(json_line(hostile)) == hostile
    store = RunStore.open(tmp_path / "run", _header())
    store.append(record)  # type: ignore[arg-type]  # deliberately no Record: an int key, a top-level "usage"
    store.close()
    assert read_records(tmp_path / "run" / RECORDS)["ä1"]["scores"]["iou"] is None


def test_one_lock_for_a_run_folder_and_a_builds_folder(tmp_path: Path) -> None:
    """While one process holds a run folder (its `.lock` file) or the folder builds are written
    in, a second writer is refused at once in one sentence; released, the folder is taken again."""
    from needlepoint.contract.build import staged

    store = RunStore.open(tmp_path / "run", _header())
    with pytest.raises(DataError, match="is in use by another needlepoint process"):
        RunStore.open(tmp_path / "run", _header())
    store.close()
    RunStore.open(tmp_path / "run", _header()).close()

    parent = tmp_path / "builds"
    parent.mkdir()
    held = lock_exclusively(parent, "held")
    try:
        with pytest.raises(DataError, match="another needlepoint build is writing into"):
            with staged(parent / "b", "manifest.json", "toy", lambda _: False):
                pass
        assert not (parent / "b").exists() and not any(parent.iterdir())  # nothing made, no lock file left
    finally:
        os.close(held)
    with staged(parent / "b", "manifest.json", "toy", lambda _: False) as work:
        (work / "manifest.json").write_text('{"status": "complete"}')
    assert json.loads((parent / "b" / "manifest.json").read_text()) == {"status": "complete"}
