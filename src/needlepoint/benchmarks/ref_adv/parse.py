"""Ref-Adv-s prompts and replies: the authors' two prompts, their repair turn, and the reply's
boxes parsed as the authors' runner does (first box scored), in the image's own pixels. With
`--answer-format grounding-tokens`, the same prompts asking for Qwen2-VL's grounding tokens
(contract/grounding.py), a repair turn in that syntax, and its reader."""

from __future__ import annotations

from needlepoint.benchmarks.ref_adv.data import RefAdvSample
from needlepoint.contract.base import Parsed
from needlepoint.contract.boxes import parse_boxes
from needlepoint.contract.boxoptions import BoxOptions
from needlepoint.contract.grounding import parse_grounded_boxes
from needlepoint.core.geometry import BoxFormat, model_frame

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


# --prompt-mode finetuned-baseline: MC-Bench's finetuned-baseline wording (no format stated).
FINETUNED_PROMPT = "<image>\nOutput the bounding boxes of {ref_sentence}"
PROMPTS["finetuned-baseline"] = FINETUNED_PROMPT
_GROUNDING_FORMAT = (
    "Report each box as <|box_start|>(x1,y1),(x2,y2)<|box_end|> with each coordinate normalised to 0-1000 over "
    "the width and height of the image."
)
GROUNDING_PROMPTS = {
    "direct": '<image>\nLocate every object that matches the description "{ref_sentence}" in the image. ' + _GROUNDING_FORMAT,
    "cot": '<image>\nLocate every object that matches the description "{ref_sentence}" in the image.\n'
    "Think first, then answer.\nFinally " + _GROUNDING_FORMAT[0].lower() + _GROUNDING_FORMAT[1:],
    "finetuned-baseline": FINETUNED_PROMPT,
}
GROUNDING_REPAIR_TEXT = (
    "Your previous answer did not end with a valid box.\nNow output ONLY the boxes, each as "
    "<|box_start|>(x1,y1),(x2,y2)<|box_end|> with coordinates 0-1000.\nDo not output any extra text."
)


def parse_reply(sample: RefAdvSample, text: str, boxes: BoxOptions, box_format: BoxFormat) -> Parsed:
    """The reply's boxes in the sample's pixels, allowing for the size and frame the image was sent
    at (`boxes`); read as Qwen2-VL's grounding tokens (0-1000) under `--answer-format
    grounding-tokens`, else as JSON boxes in `box_format` (the run's, stated: `boxes.require`)."""
    seen = model_frame(sample.width, sample.height, boxes.max_image_side, boxes.frame)
    if boxes.grounding:
        return parse_grounded_boxes(text, sample.width, sample.height, seen)
    return parse_boxes(text, box_format, sample.width, sample.height, seen)
