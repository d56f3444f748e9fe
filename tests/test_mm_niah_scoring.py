"""MM-NIAH scoring: the authors' judge and aggregation, heatmaps, leaderboard files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from needlepoint.benchmarks.mm_niah.aggregate import aggregate, context_bin, depth_bin, depth_value
from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.heatmap import draw_all, draw_heatmap
from needlepoint.benchmarks.mm_niah.judge import (
    ANSWER_TYPE,
    EMPTY_ANSWER,
    NO_RESPONSE,
    RESPONSE_NOT_TEXT,
    UNICODE_DIGITS,
    judge,
    official_answer,
    score_answer,
    vqa_normalise,
)
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_RANGES, TASKS
from needlepoint.benchmarks.mm_niah.response_files import (
    parse_file_name,
    read_response_files,
    write_response_files,
)
from needlepoint.contract.base import DataError

# --- judge ----------------------------------------------------------------------------------------

OPTION_CASES: list[tuple[str, object, float, str]] = [
    # (response, answer, score, why)
    ("2", 2, 1.0, "digits compare as a number"),
    ("02", 2, 1.0, "digits compare as a number, leading zero"),
    ("3", 2, 0.0, "wrong number"),
    ("2.", 2, 1.0, "strip('.') first"),
    (" 2", 2, 0.0, "a space makes it not digit-only, then '2' is no option letter"),
    ("\u0663", 3, 1.0, "Arabic-Indic digit: isdigit() and int() both accept it"),
    ("B", 1, 1.0, "option letter, upper-case"),
    ("b.", 1, 1.0, "trailing period stripped"),
    ("  c ", 2, 1.0, "spaces stripped"),
    ("The answer is B", 1, 1.0, "'the answer is' removed"),
    ("**C**", 2, 1.0, "'*' removed"),
    ("A. Paris is the capital", 0, 1.0, "cut at the first '.'"),
    ("B,. because", 1, 1.0, "commas removed only after a '.' cut"),
    ("B, because", 1, 0.0, "no '.', so the comma stays and it is not one letter"),
    ("(B)", 1, 0.0, "brackets are not removed"),
    ("B because", 1, 0.0, "more than one character"),
    ("none", 0, 0.0, "'none' is wrong"),
    ("None", 0, 0.0, "'none' after lower-casing"),
    ("The camera is moving left.", 0, 1.0, "camera left means option a"),
    ("the camera is moving right", 1, 1.0, "camera right means option b"),
    ("the camera is moving right", 0, 0.0, "camera right is not option a"),
    ("left", 0, 0.0, "a bare 'left' is not mapped (only InternVL's later copy maps it)"),
    ("", 0, 0.0, "empty response"),
]

LIST_CASES: list[tuple[str, object, float, str]] = [
    ("[1, 2, 3]", [1, 2, 3], 1.0, "exact list"),
    ("[1, 2, 4]", [1, 2, 3], 2 / 3, "partial credit per position"),
    ("[1]", [1, 2], 0.5, "missing positions score nothing"),
    ("[1, 2, 3, 4]", [1, 2, 3], 1.0, "extra predicted items ignored"),
    ("[3, 1, 2]", [1, 2, 3], 0.0, "position by position, not as a set"),
    ("```json\n[1, 2, 3]\n```", [1, 2, 3], 1.0, "json and backtick fences removed"),
    ("JSON [1]", [1], 0.0, "only lower-case 'json' is removed"),
    ("[1, 2].", [1, 2], 1.0, "strip('.') first"),
    ('{"a": [1], "b": [2, 3]}', [1, 2, 3], 1.0, "an object is flattened by concatenating its lists"),
    ('{"a": 1, "b": 2}', [1, 2], 0.0, "an object with non-list values does not flatten"),
    ("1, 2", [1, 2], 0.0, "not JSON"),
    ("3", [3], 0.0, "a JSON number is not a list"),
    ('["1", "2"]', [1, 2], 0.0, "strings never equal ints"),
    ("[1.0, 2]", [1, 2], 1.0, "1.0 == 1 in Python"),
    ("[1, 2]", ["1", "2"], 0.0, "a list answer in a text task uses the same rule"),
]

OPEN_CASES: list[tuple[str, object, float, str]] = [
    ("Paris", "paris", 1.0, "case-insensitive"),
    ("It is Paris.", "Paris", 1.0, "answer found as whole words"),
    ("Parisian", "Paris", 0.0, "not a whole word"),
    ("two", "2", 1.0, "number words to digits (response)"),
    ("2", "two", 1.0, "number words to digits (answer)"),
    ("the apple", "an apple", 1.0, "articles dropped"),
    ("dont know", "don't", 1.0, "contractions restored"),
    ("New York", "new-york", 1.0, "a hyphen between words becomes a space"),
    ("1,000", "1000", 1.0, "a digit,digit comma is removed"),
    ("3.5", "3.5", 1.0, "a period before a digit is kept"),
    ("35", "3.5", 0.0, "so 3.5 is not 35"),
    ("yes", "the", 1.0, "quirk: an articles-only answer matches any response with a word"),
    ("yes", "a", 1.0, "quirk: same for 'a'"),
    ("...", "the", 0.0, "but not a response with no word character"),
    ("", "paris", 0.0, "empty response"),
    ("\u00b2", "2", 0.0, "a superscript is harmless on the text path"),
]


@pytest.mark.parametrize(("response", "answer", "expected", "why"), OPTION_CASES + LIST_CASES + OPEN_CASES)
def test_judge_rules(response: str, answer: object, expected: float, why: str) -> None:
    verdict = judge(response, answer)
    assert verdict.score == pytest.approx(expected, abs=1e-12), why
    assert verdict.crash is None, why
    assert score_answer(response, answer) == verdict.score


@pytest.mark.parametrize(
    ("response", "answer", "crash"),
    [
        ("\u00b2", 2, UNICODE_DIGITS),  # superscript two: isdigit() yet int() raises upstream
        ("1\u00b2", 1, UNICODE_DIGITS),
        ("\u2460", 1, UNICODE_DIGITS),  # circled digit one
        ("\u00b2.", 2, UNICODE_DIGITS),  # after strip('.')
        (None, 1, NO_RESPONSE),
        (None, [1], NO_RESPONSE),
        (None, "paris", NO_RESPONSE),
        (3, "3", RESPONSE_NOT_TEXT),
        ("[1, 2]", [], EMPTY_ANSWER),
        ("x", 2.5, ANSWER_TYPE),
        ("x", None, ANSWER_TYPE),
    ],
)
def test_judge_flags_what_crashes_upstream(response: object, answer: object, crash: str) -> None:
    verdict = judge(response, answer)  # type: ignore[arg-type]
    assert verdict.score == 0.0
    assert verdict.crash == crash


def test_unparsable_empty_list_answer_is_a_plain_zero() -> None:
    # Upstream returns 0 before dividing when the response does not parse.
    assert judge("nope", []).crash is None


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Two apples", "2 apples"),
        ("hello, world!", "hello world"),  # marks next to a space are dropped
        ("a(b)c", "b c"),  # ...otherwise they become spaces; 'a' is an article
        ("1,5 and x;y", "15 and xy"),  # a digit,digit comma drops every mark
        ("line\nbreak\ttab", "line break tab"),
        ("x." * 33, "x" * 33 + "."),  # upstream's count=re.UNICODE: only 32 periods go
    ],
)
def test_vqa_normalise(text: str, normal: str) -> None:
    assert vqa_normalise(text) == normal


def test_official_answer_decodes_counting_strings() -> None:
    assert official_answer("counting-text", "[1, 2]") == [1, 2]
    assert official_answer("counting-image", [3]) == [3]
    assert official_answer("retrieval-text", "[1, 2]") == "[1, 2]"
    assert official_answer("counting-text", None) is None
    with pytest.raises(DataError, match="counting-text"):
        official_answer("counting-text", "[1,")


# --- binning --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "index"),
    [
        (0, 0),
        (999, 0),
        (1000, 1),
        (1999, 1),
        (2000, 2),
        (3999, 2),
        (4000, 3),
        (11999, 4),
        (12000, 5),
        (47999, 9),
        (48000, 10),
        (63999, 10),
        (64000, 11),
        (72000, 11),
        (10**6, 11),
    ],
)
def test_context_bins_are_left_closed(length: int, index: int) -> None:
    assert context_bin(length) == index


@pytest.mark.parametrize(
    ("depth", "index"),
    [
        (0.0, 0),
        (0.19, 0),
        (0.2, 1),
        (0.3, 1),
        (0.4, 2),
        (0.6, 2),
        (0.7, 3),
        (0.8, 4),
        (0.99, 4),
        (1.0, 4),
        (1, 4),
        ([0.2, 0.4], 1),
        ([0.5, 0.7], 2),
        ([1.0, 1.0], 4),
        ([0.0, 0.8], 2),
    ],
)
def test_depth_bins_truncate(depth: float | list[float], index: int) -> None:
    # 0.6 / 0.2 == 2.9999999999999996 and 0.7 / 0.2 == 3.4999999999999996: int() truncates, as upstream.
    assert depth_bin(depth) == index


def test_depth_one_becomes_099_and_lists_average() -> None:
    assert depth_value(1.0) == 0.99
    assert depth_value([1.0, 1.0]) == 0.99
    assert depth_value([0.2, 0.4]) == 0.30000000000000004
    assert CONTEXT_RANGES == ("1k", "2k", "4k", "8k", "12k", "16k", "24k", "32k", "40k", "48k", "64k")


# --- aggregation ----------------------------------------------------------------------------------


def _row(task: str, length: object, depth: float | list[float], score: float, crash: str | None = None) -> dict[str, Any]:
    return {"task": task, "context_length": length, "placed_depth": depth, "score": score, "crash": crash}


RETRIEVAL = [
    _row("retrieval-text", 500, 0.1, 1.0),  # below 1k: dropped from the official numbers
    _row("retrieval-text", 1000, 0.0, 1.0),  # 1k, depth bin 0
    _row("retrieval-text", 1500, 0.1, 0.0),  # 1k, depth bin 0 -> cell 1/2
    _row("retrieval-text", 1999, 0.6, 1.0),  # 1k, depth bin 2 (truncation)
    _row("retrieval-text", 2000, 1.0, 1.0),  # 2k, depth 0.99 -> bin 4
    _row("retrieval-text", 64000, [0.2, 0.4], 0.5),  # 64k, mean 0.3 -> bin 1, partial credit
    _row("retrieval-text", 100000, 0.8, 0.0, UNICODE_DIGITS),  # 64k, bin 4, would crash upstream
]


def test_aggregate_one_task_by_hand() -> None:
    metrics = aggregate(RETRIEVAL)
    task = metrics["tasks"]["retrieval-text"]
    # 1k: cells (0.5, 0, 1, 0, 0) -> 1.5 / 5; 2k: (0, 0, 0, 0, 1) -> 1 / 5; 64k: (0, 0.5, 0, 0, 0) -> 0.5 / 5
    expected = [0.3, 0.2] + [0.0] * 8 + [0.1]
    assert task["scores"] == expected
    assert task["overall"] == round(0.6 / 11, 6) == 0.054545
    assert task["cells"][0][0] == 0.5 and task["cells"][2][0] == 1.0 and task["cells"][4][1] == 1.0
    assert task["cells"][1][10] == 0.5 and task["cells"][4][10] == 0.0
    counts = [[0] * 11 for _ in range(5)]
    counts[0][0], counts[2][0], counts[4][1], counts[1][10], counts[4][10] = 2, 1, 1, 1, 1
    assert task["counts"] == counts
    assert task["rows"] == 7 and task["rows_below_1k"] == 1
    assert task["share_below_1k"] == round(1 / 7, 6)
    assert task["micro_accuracy"] == round(4.5 / 7, 6) == 0.642857  # the dropped row counts here
    assert task["crashes"] == {UNICODE_DIGITS: 1}
    assert metrics["overall"] is None
    assert metrics["missing_tasks"] == [t for t in TASKS if t != "retrieval-text"]
    assert "counting-image" in metrics["overall_note"]
    json.dumps(metrics)  # JSON-ready


def test_aggregate_overall_needs_six_tasks_and_rounds_twice() -> None:
    others = [_row(task, 1000, 0.0, 1.0) for task in TASKS if task != "retrieval-text"]
    metrics = aggregate(RETRIEVAL + others)
    assert metrics["missing_tasks"] == [] and "overall_note" not in metrics
    for task in TASKS[1:]:
        assert metrics["tasks"][task]["scores"] == [0.2] + [0.0] * 10
    overall = metrics["overall"]
    # 1k: (0.3 + 5 * 0.2) / 6 = 0.2166666... ; 2k: 0.2 / 6 ; 64k: 0.1 / 6
    assert overall["scores"] == [0.216667, 0.033333] + [0.0] * 8 + [0.016667]
    assert overall["overall"] == round(sum(overall["scores"]) / 11, 6)
    assert overall["counts"][0][0] == 2 + 5
    assert overall["cells"][0][0] == round((0.5 + 5 * 1.0) / 6, 6)


def test_partial_credit_sums_in_cells() -> None:
    rows = [_row("counting-text", 5000, 0.5, s) for s in (1 / 3, 2 / 3, 0.5)]
    task = aggregate(rows)["tasks"]["counting-text"]
    assert task["cells"][2][2] == 0.5  # 4k range, depth bin 2: (1/3 + 2/3 + 1/2) / 3
    assert task["scores"][2] == 0.1


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (_row("retrieval", 1000, 0.0, 1.0), "retrieval"),
        (_row("retrieval-text", 1000, 1.2, 1.0), "placed_depth"),
        (_row("retrieval-text", 1000, [], 1.0), "empty placed_depth"),
        (_row("retrieval-text", "long", 0.0, 1.0), "context_length"),
        (_row("retrieval-text", 1000, 0.0, 2.0), "score"),
    ],
)
def test_aggregate_rejects_bad_rows(row: dict[str, Any], message: str) -> None:
    with pytest.raises(DataError, match=message):
        aggregate([row])


# --- heatmaps -------------------------------------------------------------------------------------


def test_heatmap_files(tmp_path: Path) -> None:
    from PIL import Image

    task = aggregate(RETRIEVAL)["tasks"]["retrieval-text"]
    paths = draw_heatmap(task["cells"], task["counts"], "retrieval-text", tmp_path / "maps" / "retrieval-text")
    assert [p.name for p in paths] == ["retrieval-text.png", "retrieval-text.svg"]
    with Image.open(paths[0]) as image:
        width, height = image.size
    assert 1000 < width < 2500 and 400 < height < 1200 and width > height
    svg = paths[1].read_text(encoding="utf-8")
    assert "<svg" in svg and "n=2" in svg  # the small count of a 2-sample cell is drawn


def test_draw_all_covers_tasks_and_overall(tmp_path: Path) -> None:
    metrics = aggregate(RETRIEVAL + [_row(task, 1000, 0.0, 1.0) for task in TASKS[1:]])
    paths = draw_all(metrics, tmp_path)
    assert sorted(p.name for p in paths if p.suffix == ".png") == sorted(f"{t}.png" for t in (*TASKS, "overall"))
    assert all(p.stat().st_size > 0 for p in paths)


# --- leaderboard ----------------------------------------------------------------------------------


def _response_rows(task: str) -> list[dict[str, Any]]:
    answer = "[1, 2]" if task.startswith("counting") else (1 if task.endswith("image") else "paris")
    response = "[1, 3]" if task.startswith("counting") else ("B" if task.endswith("image") else "Paris.")
    return [
        {
            "question_id": i,
            "question": "q?",
            "answer": answer,
            "response": response,
            "context_length": 1000 + 3000 * i,
            "placed_depth": [0.5, 0.7] if i else 1.0,
        }
        for i in range(3)
    ]


def test_leaderboard_round_trip_and_scores(tmp_path: Path) -> None:
    rows = {task: _response_rows(task) for task in TASKS}
    paths = write_response_files(tmp_path, "my_model_v2", "val", rows)
    assert {p.name for p in paths} == {f"my_model_v2_{t}-val.jsonl" for t in TASKS}
    (tmp_path / "README.md").write_text("not a leaderboard file")
    (tmp_path / "results").mkdir()
    read = read_response_files(tmp_path)
    assert list(read) == ["my_model_v2"]
    assert read["my_model_v2"] == rows
    bench = MmNiah()
    found = bench.predictions_run(tmp_path, None)  # the files read as a run, scored as any run
    assert (found.model, found.dataset.split, len(found.records)) == ("my_model_v2", "val", 3 * len(TASKS))
    metrics = bench.score(found.dataset, found.records)
    # rows land at 1k (depth 1.0 -> bin 4) and twice in the 4k range (depth 0.6 -> bin 2): 1/5 each
    assert metrics["tasks"]["retrieval-text"]["scores"][:3] == [0.2, 0.0, 0.2]
    # counting: half credit per row, answers given as JSON strings
    assert metrics["tasks"]["counting-text"]["scores"][:3] == [0.1, 0.0, 0.1]
    assert metrics["overall"] is not None


def test_leaderboard_keeps_only_its_fields(tmp_path: Path) -> None:
    row = dict(_response_rows("retrieval-text")[0], extra="dropped")
    (path,) = write_response_files(tmp_path, "m", "test", {"retrieval-text": [row]})
    assert list(json.loads(path.read_text())) == [
        "question_id",
        "question",
        "answer",
        "response",
        "context_length",
        "placed_depth",
    ]


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("mymodel_counting-image-test.jsonl", ("mymodel", "counting-image", "test")),
        ("my_model_retrieval-text-val.jsonl", ("my_model", "retrieval-text", "val")),
        ("m_reasoning-image-rag-val.jsonl", ("m", "reasoning-image", "rag-val")),
    ],
)
def test_parse_file_name(name: str, parsed: tuple[str, str, str]) -> None:
    assert parse_file_name(Path(name)) == parsed


@pytest.mark.parametrize(
    "name",
    [
        "counting-image-test.jsonl",
        "m_counting-test.jsonl",
        "m_counting-image-dev.jsonl",
        "m_counting-image.jsonl",
    ],
)
def test_misnamed_file_is_named_in_the_error(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("")
    with pytest.raises(DataError, match=name):
        read_response_files(tmp_path)


def test_several_models_and_splits(tmp_path: Path) -> None:
    write_response_files(tmp_path, "a", "val", {"retrieval-text": _response_rows("retrieval-text")})
    write_response_files(tmp_path, "b", "val", {"counting-text": _response_rows("counting-text")})
    assert sorted(read_response_files(tmp_path)) == ["a", "b"]
    write_response_files(tmp_path, "a", "test", {"retrieval-text": _response_rows("retrieval-text")})
    with pytest.raises(DataError, match="split"):
        read_response_files(tmp_path)
    assert sorted(read_response_files(tmp_path, split="test")) == ["a"]


def test_test_split_without_answers_cannot_be_scored(tmp_path: Path) -> None:
    rows = [dict(row, answer=None) for row in _response_rows("retrieval-image")]
    write_response_files(tmp_path, "m", "test", {"retrieval-image": rows})
    with pytest.raises(DataError, match="3 of the 3 retrieval-image rows .* have no answer .*not public"):
        MmNiah().predictions_run(tmp_path, None)


def test_bad_leaderboard_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "m_retrieval-text-val.jsonl"
    path.write_text('{"context_length": 1000, "placed_depth": 0.0, "response": "x"}\n{oops\n')
    with pytest.raises(DataError, match=r"m_retrieval-text-val\.jsonl line 2 "):
        read_response_files(tmp_path)
