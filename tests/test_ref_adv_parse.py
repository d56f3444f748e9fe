"""Ref-Adv-s answer parsing, distractor counting and the repair turn (docs/protocols/ref-adv-s.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from needlepoint.benchmarks.ref_adv import REPAIR_TEXT, RefAdv, RefAdvSample, distractor_count, parse_boxes
from needlepoint.contract.base import Parsed
from needlepoint.core.conversation import ImageRef
from needlepoint.core.jsonfind import find_json

W, H = 400.0, 300.0
FENCE = "```"

# (id, model output, expected boxes in absolute xyxy for a 400x300 image in abs_xyxy, or the error)
CASES = [
    # --- where the JSON is
    ("fenced_json", f'{FENCE}json\n{{"bboxes": [[10, 20, 110, 120]]}}\n{FENCE}', [[10, 20, 110, 120]]),
    ("fenced_no_tag", f"{FENCE}\n[[10, 20, 110, 120]]\n{FENCE}", [[10, 20, 110, 120]]),
    ("fenced_upper_tag", f'{FENCE}JSON\n{{"bbox": [10, 20, 110, 120]}}\n{FENCE}', [[10, 20, 110, 120]]),
    ("fenced_mixed_case_tag", f'{FENCE}Json\n{{"bbox": [1, 2, 3, 4]}}\n{FENCE}', [[1, 2, 3, 4]]),
    ("fenced_inline_one_line", f'The answer is {FENCE}json {{"bbox": [5, 6, 7, 8]}}{FENCE} done.', [[5, 6, 7, 8]]),
    (
        "prose_around_fence",
        f'The leftmost cup is at the left edge.\n{FENCE}json\n[{{"bbox_2d": [12, 30, 80, 99], "label": "cup"}}]\n{FENCE}\n'
        "I hope this helps!",
        [[12, 30, 80, 99]],
    ),
    (
        "several_fences_last_wins",
        f'First guess:\n{FENCE}json\n{{"bbox": [1, 1, 2, 2]}}\n{FENCE}\nOn reflection:\n{FENCE}json\n{{"bbox": [50, 60, 70, 80]}}\n{FENCE}',
        [[50, 60, 70, 80]],
    ),
    (
        "last_fence_unparsable_skipped",
        f'{FENCE}json\n{{"bbox": [50, 60, 70, 80]}}\n{FENCE}\nand\n{FENCE}json\n{{"bbox": [1, 2, 3\n{FENCE}',
        [[50, 60, 70, 80]],
    ),
    (
        "empty_fence_skipped",
        f'{FENCE}json\n{{"bbox": [50, 60, 70, 80]}}\n{FENCE}\n{FENCE}json\n   \n{FENCE}',
        [[50, 60, 70, 80]],
    ),
    (
        "code_fence_not_json_then_bare",
        f'{FENCE}python\nprint(1)\n{FENCE}\nResult: {{"bbox": [3, 4, 30, 40]}}',
        [[3, 4, 30, 40]],
    ),
    ("unfenced_at_end", 'The object is here: {"bbox_2d": [100, 50, 200, 150]}', [[100, 50, 200, 150]]),
    ("unfenced_trailing_whitespace", '[{"bbox_2d": [100, 50, 200, 150]}]   \n\n', [[100, 50, 200, 150]]),
    ("unfenced_bare_list", "[100, 50, 200, 150]", [[100, 50, 200, 150]]),
    (
        "unfenced_brackets_in_prose_skipped",
        'Step [1]: look left. Step {2}: answer {"bbox": [4, 5, 6, 7]}',
        [[4, 5, 6, 7]],
    ),
    ("unfenced_not_at_end", 'The box is {"bbox": [10, 20, 30, 40]} as requested.', "no_bbox_found"),
    ("unfenced_json_then_prose_line", '[{"bbox_2d": [10, 20, 30, 40]}]\nThis is the cup.', "no_bbox_found"),
    ("unclosed_fence_falls_back_to_bare", f'{FENCE}json\n{{"bbox": [10, 20, 30, 40]}}', [[10, 20, 30, 40]]),
    ("truncated_json", f'{FENCE}json\n{{"bbox_2d": [10, 20, 30\n{FENCE}', "no_bbox_found"),
    # --- empty and prose
    ("empty", "", "empty_response"),
    ("whitespace", "  \n\t \n", "empty_response"),
    ("prose_only", "The object is the red cup on the left side of the table.", "no_bbox_found"),
    ("json_without_box", '{"answer": "the cup", "count": 3}', "no_bbox_found"),
    ("three_numbers", '{"bbox": [1, 2, 3]}', "no_bbox_found"),
    ("strings_not_numbers", '{"bbox": ["1", "2", "3", "4"]}', "no_bbox_found"),
    # --- which boxes, in which order
    (
        "bboxes_before_bbox_2d",
        '{"label": "cup", "bbox_2d": [5, 5, 9, 9], "bboxes": [[1, 1, 2, 2]]}',
        [[1, 1, 2, 2], [5, 5, 9, 9]],
    ),
    (
        "priority_order_all_keys",
        json.dumps(
            {
                "other": [90, 90, 99, 99],
                "coordinates": [8, 8, 9, 9],
                "objects": [7, 7, 8, 8],
                "results": [6, 6, 7, 7],
                "predictions": [5, 5, 6, 6],
                "bbox_2d": [4, 4, 5, 5],
                "bbox": [3, 3, 4, 4],
                "boxes": [2, 2, 3, 3],
                "bboxes": [1, 1, 2, 2],
            }
        ),
        [
            [1, 1, 2, 2],
            [2, 2, 3, 3],
            [3, 3, 4, 4],
            [4, 4, 5, 5],
            [5, 5, 6, 6],
            [6, 6, 7, 7],
            [7, 7, 8, 8],
            [8, 8, 9, 9],
            [90, 90, 99, 99],
        ],
    ),
    (
        "other_keys_in_order_after_priority",
        '{"zeta": [30, 30, 40, 40], "alpha": [10, 10, 20, 20], "bbox": [1, 1, 2, 2]}',
        [[1, 1, 2, 2], [30, 30, 40, 40], [10, 10, 20, 20]],
    ),
    (
        "nested_objects",
        '{"result": {"image": {"objects": [{"name": "cup", "coordinates": [11, 12, 13, 14]}, {"bbox": [21, 22, 23, 24]}]}}}',
        [[11, 12, 13, 14], [21, 22, 23, 24]],
    ),
    (
        "qwen_list",
        '[{"bbox_2d": [10, 20, 30, 40], "label": "cup"}, {"bbox_2d": [50, 60, 70, 80], "label": "cup"}]',
        [[10, 20, 30, 40], [50, 60, 70, 80]],
    ),
    (
        "qwen_list_fenced",
        f'{FENCE}json\n[\n  {{"bbox_2d": [135, 114, 208, 191], "label": "the leftmost blue square"}}\n]\n{FENCE}',
        [[135, 114, 208, 191]],
    ),
    ("list_of_boxes", "[[10, 20, 30, 40], [50, 60, 70, 80]]", [[10, 20, 30, 40], [50, 60, 70, 80]]),
    ("five_numbers_visited", "[1, 2, 3, 4, 5]", "no_bbox_found"),
    ("list_of_five_with_box_inside", "[[1, 2, 3, 4], 7, 8, 9, 10]", [[1, 2, 3, 4]]),
    ("floats", '{"bbox": [10.5, 20.25, 30.75, 40.125]}', [[10.5, 20.25, 30.75, 40.125]]),
    ("booleans_count_as_numbers", '{"bbox": [true, false, 30, 40]}', [[1, 0, 30, 40]]),
    # --- conversion details in abs_xyxy
    ("swapped_coordinates_sorted", '{"bbox": [200, 150, 100, 50]}', [[100, 50, 200, 150]]),
    ("clipped_to_image", '{"bbox": [-20, -5, 450, 310]}', [[0, 0, 400, 300]]),
    ("swapped_and_clipped", '{"bbox": [500, 400, -10, 20]}', [[0, 20, 400, 300]]),
    (
        "duplicates_dropped",
        "[[10, 20, 30, 40], [50, 60, 70, 80], [10, 20, 30, 40], [10.0000001, 20, 30, 40]]",
        [[10, 20, 30, 40], [50, 60, 70, 80]],
    ),
    (
        "near_duplicate_kept",
        "[[10, 20, 30, 40], [10.00001, 20, 30, 40]]",
        [[10, 20, 30, 40], [10.00001, 20, 30, 40]],
    ),
    ("duplicate_after_sorting", "[[10, 20, 30, 40], [30, 40, 10, 20]]", [[10, 20, 30, 40]]),
    ("duplicate_after_clipping", "[[0, 0, 400, 300], [-5, -5, 999, 999]]", [[0, 0, 400, 300]]),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_table(text: str, expected: list[list[float]] | str) -> None:
    parsed = parse_boxes(text, "abs_xyxy", W, H)
    if isinstance(expected, str):
        assert parsed.error == expected
        assert parsed.answer is None
    else:
        assert parsed.error is None
        assert parsed.answer == [[float(v) for v in b] for b in expected]


def test_case_ids_unique() -> None:
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    ("box_format", "raw", "expected"),
    [
        ("abs_xyxy", [100, 75, 300, 225], [100, 75, 300, 225]),
        ("norm_1000_xyxy", [250, 250, 750, 750], [100, 75, 300, 225]),
        ("norm_1_xyxy", [0.25, 0.25, 0.75, 0.75], [100, 75, 300, 225]),
        # swapped, then clipped to [0, width] x [0, height]
        ("norm_1000_xyxy", [750, 750, 250, 250], [100, 75, 300, 225]),
        ("norm_1_xyxy", [0.75, 0.75, 0.25, 0.25], [100, 75, 300, 225]),
        ("norm_1000_xyxy", [-100, 500, 1200, 1000], [0, 150, 400, 300]),
        ("norm_1_xyxy", [1.5, -0.5, 0.5, 0.5], [200, 0, 400, 150]),
        ("abs_xyxy", [401, 301, -1, -1], [0, 0, 400, 300]),
    ],
)
def test_box_formats(box_format: str, raw: list[float], expected: list[float]) -> None:
    parsed = parse_boxes(json.dumps({"bbox_2d": raw}), box_format, W, H)
    assert parsed.error is None
    assert parsed.answer == [pytest.approx(expected, abs=1e-9)]


def test_box_format_never_guessed() -> None:
    """Numbers that look normalised are still read in the configured format."""
    abs_reading = parse_boxes("[0.25, 0.25, 0.75, 0.75]", "abs_xyxy", W, H)
    assert abs_reading.answer == [[0.25, 0.25, 0.75, 0.75]]
    norm_reading = parse_boxes("[100, 75, 300, 225]", "norm_1_xyxy", W, H)
    assert norm_reading.answer == [[400.0, 300.0, 400.0, 300.0]]  # scaled, then clipped


def test_duplicates_compared_after_conversion() -> None:
    # 0-1000 boxes that differ before conversion but agree to 6 decimals after it
    parsed = parse_boxes("[[100, 100, 200, 200], [100.0000001, 100, 200, 200]]", "norm_1000_xyxy", W, H)
    assert parsed.answer == [[40.0, 30.0, 80.0, 60.0]]


def test_at_most_100_boxes() -> None:
    boxes = [[i, i, i + 5, i + 5] for i in range(150)]
    parsed = parse_boxes(json.dumps({"bboxes": boxes}), "abs_xyxy", 1000, 1000)
    assert parsed.answer == [[float(v) for v in b] for b in boxes[:100]]


def test_cap_applies_before_dedupe() -> None:
    """At most 100 boxes are collected; duplicates are dropped from those (spec steps 3 then 4)."""
    boxes = [[1, 1, 2, 2]] * 100 + [[3, 3, 4, 4]]
    parsed = parse_boxes(json.dumps(boxes), "abs_xyxy", W, H)
    assert parsed.answer == [[1.0, 1.0, 2.0, 2.0]]


def test_cap_counts_nested_boxes() -> None:
    items = [{"label": f"cup {i}", "bbox_2d": [i, 0, i + 1, 1]} for i in range(120)]
    parsed = parse_boxes(json.dumps(items), "abs_xyxy", 1000, 1000)
    assert len(parsed.answer) == 100
    assert parsed.answer[-1] == [99.0, 0.0, 100.0, 1.0]


def test_find_json_fence_rules() -> None:
    assert find_json(f"{FENCE}json\n[1]\n{FENCE} x {FENCE}json\n[2]\n{FENCE}") == [2]
    assert find_json(f"{FENCE}JSON\n[1]\n{FENCE} x {FENCE}json\nnope\n{FENCE}") == [1]
    assert find_json('prefix {"a": 1}') == {"a": 1}
    with pytest.raises(LookupError):
        find_json('{"a": 1} suffix')
    with pytest.raises(LookupError):
        find_json("no json here")


# --- distractor counting


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, 3),
        (0, 0),
        (-2, 0),
        (["a red cup", "a blue cup"], 2),
        ([], 0),
        ('["red cup 0", "red cup 1", "red cup 2"]', 3),
        ("[]", 0),
        ("4", 4),
        ("7", 7),
        ("cup 1, cup 2 and cup 13", 3),
        ("two cups", 0),
        ("", 0),
        ("   ", 0),
        (None, 0),
    ],
)
def test_distractor_count(value: object, expected: int) -> None:
    assert distractor_count(value) == expected


# --- the repair turn


def _sample() -> RefAdvSample:
    return RefAdvSample(
        id="0",
        row_idx=0,
        caption="the red cup",
        gt=(0, 0, 10, 10),
        width=W,
        height=H,
        distractors=2,
        image=ImageRef(key="x.jpg", path=Path("x.jpg")),
    )


SPEC_REPAIR = (
    "Your previous answer did not end with a valid JSON bbox output.\\nNow output ONLY one complete JSON code "
    'block.\\nUse this exact schema:\\n```json\\n{"bboxes": [[x1, y1, x2, y2]]}\\n```\\nDo not output any extra text.'
)


def test_repair_text_has_literal_backslash_n() -> None:
    assert REPAIR_TEXT == SPEC_REPAIR
    assert "\n" not in REPAIR_TEXT
    assert REPAIR_TEXT.count("\\n") == 6


def test_followup_default_repairs_any_parse_error() -> None:
    bench = RefAdv(box_format="abs_xyxy")
    failed = Parsed(error="no_bbox_found")
    assert bench.followup(_sample(), failed, "stop") == SPEC_REPAIR
    assert bench.followup(_sample(), Parsed(error="empty_response"), None) == SPEC_REPAIR
    assert bench.followup(_sample(), failed, "length") == SPEC_REPAIR


def test_followup_on_length_only() -> None:
    bench = RefAdv(box_format="abs_xyxy", repair_on_length_only=True)
    failed = Parsed(error="no_bbox_found")
    assert bench.followup(_sample(), failed, "stop") is None
    assert bench.followup(_sample(), failed, None) is None
    assert bench.followup(_sample(), failed, "length") == SPEC_REPAIR


def test_benchmark_parse_uses_its_box_format_and_sample_size() -> None:
    s = _sample()
    assert RefAdv(box_format="norm_1000_xyxy").parse(s, '{"bbox_2d": [500, 500, 1000, 1000]}').answer == [
        [200.0, 150.0, 400.0, 300.0]
    ]
    assert RefAdv(box_format="abs_xyxy").parse(s, '{"bbox_2d": [500, 500, 1000, 1000]}').answer == [[400.0, 300.0, 400.0, 300.0]]


def test_prompt_text_then_image() -> None:
    s = _sample()
    direct = RefAdv(box_format="abs_xyxy").prompt(s).messages
    assert len(direct) == 1 and direct[0].role == "user"
    assert direct[0].parts[0] == (
        '<image>\nLocate every object that matches the description "the red cup" in the image. '
        "Report bbox coordinates in JSON format."
    )
    assert direct[0].parts[1] == s.image
    cot = RefAdv(box_format="abs_xyxy", prompt_mode="cot").prompt(s).messages[0].parts[0]
    assert cot == (
        '<image>\nLocate every object that matches the description "the red cup" in the image.\n'
        "Think first, then answer.\nFinally report bbox coordinates in JSON format."
    )


def test_judge_scores_first_box_only() -> None:
    bench, s = RefAdv(box_format="abs_xyxy"), _sample()
    miss_first = bench.judge(s, Parsed(answer=[[100, 100, 110, 110], [0, 0, 10, 10]]))
    assert miss_first == {"iou": 0.0, "hit": False}
    hit_first = bench.judge(s, Parsed(answer=[[0, 0, 10, 10], [100, 100, 110, 110]]))
    assert hit_first == {"iou": 1.0, "hit": True}
    assert bench.judge(s, Parsed(error="no_bbox_found")) == {"iou": 0.0, "hit": False}
