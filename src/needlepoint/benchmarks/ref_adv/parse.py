"""Ref-Adv-s prompts and replies: the authors' two prompts, their repair turn, and the reply's
boxes parsed as the authors' runner does (first box scored), in the image's own pixels."""

from __future__ import annotations

from needlepoint.benchmarks.base import Parsed
from needlepoint.benchmarks.boxes import parse_boxes
from needlepoint.benchmarks.ref_adv.data import RefAdvSample
from needlepoint.geometry import AbsFrame, BoxFormat, model_frame

PROMPTS = {
    "direct": '<image>\nLocate every object that matches the description "{ref_sentence}" in the image. '
    "Report bbox coordinates in JSON format.",
    "cot": '<image>\nLocate every object that matches the description "{ref_sentence}" in the image.\n'
    "Think first, then answer.\nFinally report bbox coordinates in JSON format.",
}
# The authors' configuration delivers "\n" here as two characters, not a newline.
REPAIR_TEXT = (
    r"Your previous answer did not end with a valid JSON bbox output.\nNow output ONLY one complete JSON "
    r'code block.\nUse this exact schema:\n```json\n{"bboxes": [[x1, y1, x2, y2]]}\n```\nDo not output any '
    r"extra text."
)


def parse_reply(sample: RefAdvSample, text: str, box_format: BoxFormat, max_image_side: int | None, frame: AbsFrame) -> Parsed:
    """The reply's boxes in the sample's pixels, allowing for the size the image was sent at."""
    seen = model_frame(sample.width, sample.height, max_image_side, frame)
    return parse_boxes(text, box_format, sample.width, sample.height, seen)
