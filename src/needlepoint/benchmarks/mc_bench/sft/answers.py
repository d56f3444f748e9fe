"""Answers: the MC-Bench answer schema of needlepoint's default prompt, or Qwen2-VL's native
grounding tokens, with boxes in the target model's convention (geometry.from_absolute).

JSON (what the eval prompt asks for and parse.py reads):
    {"image_1": [{"group": 1, "bbox_2d": [x1, y1, x2, y2]}], "image_2": []}
Grounding tokens (Qwen2-VL's pretraining format, 0-1000 integers), one line per image:
    Image 1: <|object_ref_start|>group 1<|object_ref_end|><|box_start|>(x1,y1),(x2,y2)<|box_end|>
    Image 2: none
Rounding: whole numbers for abs_xyxy and norm_1000_xyxy (as models write them), 3 decimals for
norm_1_xyxy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from needlepoint.benchmarks.mc_bench.sft.draw import AnswerBox
from needlepoint.contract.grounding import BOX_FORMAT as GROUNDING_FORMAT
from needlepoint.contract.grounding import format_image_line
from needlepoint.core.geometry import BoxFormat, from_absolute

DECIMALS: dict[str, int] = {"abs_xyxy": 0, "norm_1000_xyxy": 0, "norm_1_xyxy": 3}


def convert(box: Sequence[float], box_format: BoxFormat, width: float, height: float) -> list[int | float]:
    """An absolute xyxy box in `box_format`, rounded as written in answers."""
    values = from_absolute(box, box_format, width, height)
    digits = DECIMALS[box_format]
    return [int(round(v)) for v in values] if digits == 0 else [round(v, digits) for v in values]


def json_answer(
    boxes: tuple[Sequence[AnswerBox], Sequence[AnswerBox]], sizes: Sequence[Sequence[float]], box_format: BoxFormat
) -> str:
    """The answer in the eval prompt's JSON schema."""
    out = {}
    for k, image_boxes in enumerate(boxes):
        w, h = sizes[k]
        out[f"image_{k + 1}"] = [{"group": b.group, "bbox_2d": convert(b.box, box_format, w, h)} for b in image_boxes]
    return json.dumps(out)


def grounding_answer(boxes: tuple[Sequence[AnswerBox], Sequence[AnswerBox]], sizes: Sequence[Sequence[float]]) -> str:
    """The answer in Qwen2-VL's grounding tokens (0-1000), one line per image, boxes by group,
    written by `benchmarks.grounding`, whose reader `--answer-format grounding-tokens` uses."""
    lines = []
    for k, image_boxes in enumerate(boxes):
        w, h = sizes[k]
        groups = [
            (group, [convert(b.box, GROUNDING_FORMAT, w, h) for b in image_boxes if b.group == group])
            for group in sorted({b.group for b in image_boxes})
        ]
        lines.append(format_image_line(k + 1, groups))
    return "\n".join(lines)
