"""RefCOCO's two readings of a reply: `official` (InternVL's evaluate_grounding.py, its quirks each
shown) and `corrected` (the family's syntax, scale and frame), on replies written in several
families' syntaxes, with every expected box worked out by hand in the test."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from PIL import Image

from needlepoint.benchmarks.refcoco.benchmark import ReadBoth, RefCoco
from needlepoint.benchmarks.refcoco.data import RefCocoSample
from needlepoint.benchmarks.refcoco.official import official_box, official_iou
from needlepoint.contract import DataError, ImageRef, Parsed

W, H = 1000, 800


def sample(tmp_path: Path, gt: tuple[float, float, float, float] = (100, 160, 300, 320), w: int = W, h: int = H) -> RefCocoSample:
    path = tmp_path / "im.png"
    Image.new("RGB", (w, h), (200, 200, 200)).save(path)
    return RefCocoSample("refcoco_val/0", "refcoco_val", 0, "the dog", gt, float(w), float(h), ImageRef("im.png", path), "im.png")


# --- the official reading: InternVL's rules, whatever the family -----------------------------------


def test_official_reads_the_first_double_bracket_box_on_0_1000_when_it_sums_to_4_or_more() -> None:
    # the worked example of the evaluator on a 640 x 480 image: 253/1000*640 = 161.92, ...
    got = official_box("XXX[[253, 231, 733, 787]] and then [[1, 2, 3, 4]]", 640, 480)
    assert got.found and not got.unit_scale
    assert got.box == pytest.approx((161.92, 110.88, 469.12, 377.76), rel=1e-6)


def test_official_quirk_a_box_summing_to_less_than_4_is_read_as_fractions_of_the_image() -> None:
    got = official_box("[[0.1, 0.2, 0.5, 0.6]]", 640, 480)  # sum 1.4: not divided by 1000
    assert got.found and got.unit_scale
    assert got.box == pytest.approx((64.0, 96.0, 320.0, 288.0), rel=1e-6)
    # the switch is on the sum alone: 4 exactly is divided, 3.9 is not, whatever the model meant
    assert official_box("[[1, 1, 1, 1]]", 1000, 1000).box == pytest.approx((1.0, 1.0, 1.0, 1.0))
    assert official_box("[[1, 1, 1, 0.9]]", 1000, 1000).box == pytest.approx((1000.0, 1000.0, 1000.0, 900.0))


@pytest.mark.parametrize(
    "reply",
    [
        "I cannot find it.",  # no match
        "[[a, b, c, d]]",  # a group that float() refuses
        "<|box_start|>(100,200),(300,400)<|box_end|>",  # Qwen2-VL's tokens: no square brackets
        "",
    ],
)
def test_official_quirk_a_failed_parse_is_the_zero_box(reply: str) -> None:
    got = official_box(reply, 640, 480)
    assert not got.found and got.box == (0.0, 0.0, 0.0, 0.0)
    assert official_iou(got.box, (10, 10, 50, 50)) == 0.0


def test_official_takes_json_boxes_and_single_brackets_too() -> None:
    assert official_box('{"bbox_2d": [100, 200, 300, 400]}', W, H).box == pytest.approx((100.0, 160.0, 300.0, 320.0))
    assert official_box("[100,200,300,400]", W, H).box == pytest.approx((100.0, 160.0, 300.0, 320.0))


def test_official_iou_neither_clips_nor_sorts_and_an_empty_union_is_no_hit() -> None:
    # half the predicted box lies left of the image: union 20000, intersection 10000 -> exactly 0.5
    assert official_iou((-100, 0, 100, 100), (0, 0, 100, 100)) == 0.5
    # an inverted box has a negative area; its intersection is 0, so its IoU is 0 (or -0)
    assert official_iou((100, 100, 0, 0), (0, 0, 100, 100)) == 0.0
    # both boxes empty: 0/0, NaN, which is no hit (NaN >= 0.5 is false)
    assert math.isnan(official_iou((0, 0, 0, 0), (5, 5, 5, 5)))


def test_official_iou_is_float32_arithmetic() -> None:
    # a box 3.0000001 high is 3.0 in float32: IoU 1.5 / 3.0 = 0.5 exactly, a hit for the evaluator,
    # while float64 arithmetic gives 0.49999998, a miss
    pred, target = (0.0, 0.0, 1.0, 3.0000001), (0.0, 0.0, 1.0, 1.5)
    assert 1.5 / 3.0000001 < 0.5
    assert official_iou(pred, target) == 0.5


# --- the corrected reading: each family's syntax and scale -------------------------------------------


@pytest.mark.parametrize(
    ("family", "reply", "box"),
    [
        ("internvl", "the dog[[100, 200, 300, 400]]", (100.0, 160.0, 300.0, 320.0)),
        ("internvl", "<ref>the dog</ref><box>[[100, 200, 300, 400]]</box>", (100.0, 160.0, 300.0, 320.0)),
        ("qwen3-vl", '```json\n[{"bbox_2d": [100, 200, 300, 400], "label": "the dog"}]\n```', (100.0, 160.0, 300.0, 320.0)),
        (
            "qwen2-vl",
            "<|object_ref_start|>the dog<|object_ref_end|><|box_start|>(100,200),(300,400)<|box_end|>",
            (100.0, 160.0, 300.0, 320.0),
        ),
        ("qwen2-vl", "the dog(100,200),(300,400)", (100.0, 160.0, 300.0, 320.0)),  # tokens stripped by the server
        # PaliGemma: y first, 1024 bins read as v / 1023
        (
            "paligemma",
            "<loc0200><loc0100><loc0400><loc0300> the dog",
            (100 / 1023 * W, 200 / 1023 * H, 300 / 1023 * W, 400 / 1023 * H),
        ),
        # Qwen2.5-VL: pixels of the image as its processor resized it (1000 x 800 -> 1008 x 812)
        ("qwen2.5-vl", '{"bbox_2d": [100, 200, 300, 400]}', (100 * W / 1008, 200 * H / 812, 300 * W / 1008, 400 * H / 812)),
    ],
)
def test_corrected_reads_each_family_in_its_own_syntax_and_scale(
    tmp_path: Path, family: str, reply: str, box: tuple[float, float, float, float]
) -> None:
    bench = RefCoco(model_family=family)
    parsed = bench.parse(sample(tmp_path), reply)
    assert parsed.error is None
    assert parsed.answer[0] == pytest.approx(list(box), rel=1e-9)


def test_the_first_box_is_the_answer(tmp_path: Path) -> None:
    bench = RefCoco(model_family="qwen3-vl")
    s = sample(tmp_path, gt=(100, 160, 300, 320))
    parsed = bench.parse(s, '[{"bbox_2d": [500, 500, 600, 600]}, {"bbox_2d": [100, 200, 300, 400]}]')
    assert bench.judge(s, parsed)["iou"] == 0.0  # the second box is right, but only the first counts


def test_the_two_readings_differ_where_the_evaluator_guesses(tmp_path: Path) -> None:
    s = sample(tmp_path, gt=(100, 160, 300, 320))
    internvl = RefCoco(model_family="internvl")
    # fractions of the image: the official reading's sum switch makes them a hit; InternVL states 0-1000
    got = internvl.judge(s, internvl.parse(s, "[[0.1, 0.2, 0.3, 0.4]]"))
    assert got["official_hit"] and got["official_unit_scale"] and not got["hit"]
    # prose: the official zero box and a parse error, both misses, counted apart
    parsed = internvl.parse(s, "It is the brown one.")
    assert parsed.error == "no_grounding_found"
    got = internvl.judge(s, parsed)
    assert got["official_zero_box"] and not got["official_hit"] and got["iou"] == 0.0
    # a JSON box in an InternVL run: the official reading takes its numbers, the corrected one
    # refuses a reply in another syntax than the family's
    parsed = internvl.parse(s, '{"bbox_2d": [100, 200, 300, 400]}')
    assert parsed.error is not None and internvl.judge(s, parsed)["official_hit"]


def test_judge_takes_an_answer_that_arrives_as_a_box_under_both_readings(tmp_path: Path) -> None:
    s = sample(tmp_path, gt=(100, 160, 300, 320))
    bench = RefCoco(model_family="internvl")
    got = bench.judge(s, Parsed(answer=[[100.0, 160.0, 300.0, 320.0]]))  # a person's box, no reply text
    assert got["official_iou"] == 1.0 and got["iou"] == 1.0
    assert isinstance(bench.parse(s, "[[1, 2, 3, 4]]"), ReadBoth)


def test_prompts_follow_the_family(tmp_path: Path) -> None:
    s = sample(tmp_path)

    def text(model_family: str | None = None, box_format: str | None = None) -> tuple[str, bool]:
        message = RefCoco(model_family=model_family, box_format=box_format).prompt(s).messages[-1]
        return message.text, isinstance(message.parts[0], str)

    assert text(model_family="internvl") == (
        "Please provide the bounding box coordinate of the region this sentence describes: <ref>the dog</ref>",
        False,  # InternVL's chat() puts the image first
    )
    qwen3 = 'Locate every object that matches the description "the dog" in the image. Report bbox coordinates in JSON format.'
    assert text(model_family="qwen3-vl") == (qwen3, True)
    assert text(box_format="norm_1000_xyxy") == (qwen3, True)  # no family: Qwen3-VL's wording, a JSON ask
    grounding, _ = text(model_family="qwen2-vl")  # no RefCOCO prompt of its own: the sentence asks for its tokens
    assert "<|box_start|>(x1,y1),(x2,y2)<|box_end|>" in grounding and "0-1000" in grounding


def test_family_decoding_and_bad_options(tmp_path: Path) -> None:
    assert RefCoco(model_family="internvl").generation_defaults == {"temperature": 0.0, "max_tokens": 100}
    with pytest.raises(DataError, match="--splits"):
        RefCoco(model_family="internvl", splits="refcoco_val,refclef_test")
    with pytest.raises(DataError, match="--box-format is required"):
        RefCoco().load(tmp_path)
    assert RefCoco(model_family="internvl", splits="refcocog_test,refcoco_val").splits == ("refcoco_val", "refcocog_test")
