"""MC-Bench answer parsing, both input modes, over realistic model outputs."""

from __future__ import annotations

import pytest

from needlepoint.benchmarks.mc_bench.parse import PairGeometry, parse_answer
from needlepoint.contract.base import Parsed
from needlepoint.core.geometry import BoxFormat

# Image 1 is 400x300, image 2 is 200x500; merged canvas: 400 + 20 + 200 = 620 wide, 500 high.
GEO = PairGeometry(((400.0, 300.0), (200.0, 500.0)), band=20)


def boxes(parsed: Parsed) -> list[tuple[int, int, list[float]]]:
    assert parsed.error is None, parsed.error
    return [(b["image"], b["group"], [round(v, 6) for v in b["bbox"]]) for b in parsed.answer]


SEQUENCE_CASES = [
    (
        "schema, fenced, two images",
        '```json\n{"image_1": [{"group": 1, "bbox_2d": [10, 20, 110, 120]}], "image_2": [{"group": 2, "bbox_2d": [5, 6, 50, 60]}]}\n```',
        "abs_xyxy",
        [(0, 1, [10, 20, 110, 120]), (1, 2, [5, 6, 50, 60])],
    ),
    (
        "unfenced after prose, 'Image 1' keys, bbox key",
        'The matches are: {"Image 1": [{"group": 1, "bbox": [1, 2, 3, 4]}], "Image 2": []}',
        "abs_xyxy",
        [(0, 1, [1, 2, 3, 4])],
    ),
    (
        "image1 keys, boxes without groups",
        '{"image1": [[0, 0, 10, 10], [20, 20, 30, 30]], "image2": [[1, 1, 2, 2]]}',
        "abs_xyxy",
        [(0, 1, [0, 0, 10, 10]), (0, 1, [20, 20, 30, 30]), (1, 1, [1, 1, 2, 2])],
    ),
    (
        "flat list with image field",
        '[{"image": 2, "group": 3, "bbox_2d": [0, 0, 100, 100]}, {"image": 1, "group": 1, "bbox": [4, 4, 8, 8]}]',
        "abs_xyxy",
        [(1, 3, [0, 0, 100, 100]), (0, 1, [4, 4, 8, 8])],
    ),
    (
        "norm_1000 scaled per image, swapped corners sorted, clipped",
        '{"image_1": [{"group": 1, "bbox_2d": [500, 1000, 0, 0]}], "image_2": [{"group": 1, "bbox_2d": [0, 0, 1200, 500]}]}',
        "norm_1000_xyxy",
        [(0, 1, [0, 0, 200, 300]), (1, 1, [0, 0, 200, 250])],
    ),
    (
        "norm_1 format",
        '{"image_1": [{"group": "group 2", "bbox_2d": [0.5, 0.5, 1.0, 1.0]}], "image_2": []}',
        "norm_1_xyxy",
        [(0, 2, [200, 150, 400, 300])],
    ),
    ("an image with no boxes, and one empty list", '{"image_1": [], "image_2": []}', "abs_xyxy", []),
    (
        "several fences: last parsable wins",
        '```json\n{"image_1": [{"bbox_2d": [1,1,2,2]}], "image_2": []}\n```\nCorrection:\n```json\n{"image_1": [], "image_2": [{"bbox_2d": [3,3,4,4]}]}\n```',
        "abs_xyxy",
        [(1, 1, [3, 3, 4, 4])],
    ),
    (
        "zero-area box kept",
        '{"image_1": [{"group": 1, "bbox_2d": [10, 10, 10, 50]}], "image_2": []}',
        "abs_xyxy",
        [(0, 1, [10, 10, 10, 50])],
    ),
]


@pytest.mark.parametrize("name,text,fmt,expected", SEQUENCE_CASES, ids=[c[0] for c in SEQUENCE_CASES])
def test_sequence_mode(name: str, text: str, fmt: BoxFormat, expected: list[tuple[int, int, list[float]]]) -> None:
    assert boxes(parse_answer(text, GEO, fmt, merged=False)) == expected


@pytest.mark.parametrize(
    "text,error",
    [
        ("", "empty_response"),
        ("   \n", "empty_response"),
        ("I see two apples on the left and none on the right.", "no_json_found"),
        ('{"image_1": "none"}', "bad_schema"),
        ('{"answer": 42}', "bad_schema"),
        ("[[1, 2, 3, 4]]", "image_not_given"),
        ('[{"bbox_2d": [1, 2, 3, 4]}]', "image_not_given"),
        ('{"image_1": [{"bbox_2d": [NaN, 1, 2, 3]}], "image_2": []}', "bad_schema"),
        ('{"image_1": [[1, 2, Infinity, 4]], "image_2": []}', "bad_schema"),
    ],
)
def test_sequence_errors(text: str, error: str) -> None:
    assert parse_answer(text, GEO, "abs_xyxy", merged=False).error == error


MERGED_CASES = [
    ("left image", '{"boxes": [{"group": 1, "bbox_2d": [10, 10, 50, 50]}]}', "abs_xyxy", [(0, 1, [10, 10, 50, 50])]),
    (
        "right image, offset removed",
        '{"boxes": [{"group": 2, "bbox_2d": [430, 10, 530, 60]}]}',
        "abs_xyxy",
        [(1, 2, [10, 10, 110, 60])],
    ),
    # Centre x = 405 lies in the band (400..420), nearer the left image (5 px) than the right (15 px).
    ("centre in the band goes to the nearer image", "[[390, 0, 420, 10]]", "abs_xyxy", [(0, 1, [390, 0, 400, 10])]),
    ("centre in the band, nearer the right", "[[405, 0, 425, 10]]", "abs_xyxy", [(1, 1, [0, 0, 5, 10])]),
    (
        "box outside the canvas is clipped to the canvas then to its image",
        '{"boxes": [{"bbox_2d": [-50, -50, 100, 900]}]}',
        "abs_xyxy",
        [(0, 1, [0, 0, 100, 300])],
    ),
    (
        "norm_1000 over the canvas",
        '{"boxes": [{"bbox_2d": [0, 0, 500, 500]}, {"bbox_2d": [700, 0, 1000, 1000]}]}',
        "norm_1000_xyxy",
        [(0, 1, [0, 0, 310, 250]), (1, 1, [14, 0, 200, 500])],
    ),
    (
        "image keys are ignored in merged mode: the centre decides",
        '{"image_1": [{"bbox_2d": [500, 10, 600, 20]}], "image_2": []}',
        "abs_xyxy",
        [(1, 1, [80, 10, 180, 20])],
    ),
    ("no boxes", '{"boxes": []}', "abs_xyxy", []),
]


@pytest.mark.parametrize("name,text,fmt,expected", MERGED_CASES, ids=[c[0] for c in MERGED_CASES])
def test_merged_mode(name: str, text: str, fmt: BoxFormat, expected: list[tuple[int, int, list[float]]]) -> None:
    assert boxes(parse_answer(text, GEO, fmt, merged=True)) == expected


def test_scores_carry_over_and_default_to_one() -> None:
    parsed = parse_answer(
        '{"image_1": [{"bbox_2d": [1, 1, 2, 2], "score": 0.25}, [3, 3, 4, 4]], "image_2": []}', GEO, "abs_xyxy", False
    )
    assert [b["score"] for b in parsed.answer] == [0.25, 1.0]
