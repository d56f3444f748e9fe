"""Ref-Adv-s prompts and replies: the authors' two prompts, their repair turn, and the reply's
boxes parsed as the authors' runner does (first box scored), in the image's own pixels. With
`--model-family`, the family's own grounding prompt (direct mode); with a token syntax
(`--answer-format grounding-tokens`, a family's), the authors' prompts asking for that syntax, a
repair turn in it, and its reader (contract/grounding.py)."""

from __future__ import annotations

from needlepoint.benchmarks.ref_adv.data import RefAdvSample
from needlepoint.contract.base import Parsed
from needlepoint.contract.boxoptions import BoxOptions
from needlepoint.core.geometry import BoxFormat, box_shape, coordinate_range, coordinate_words
from needlepoint.families import Syntax

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
# A family's token syntax (contract/grounding.py), asked for in the authors' wording: "{format}" is
# `grounding_format` of the run's syntax and box format.
_GROUNDING_PROMPTS = {
    "direct": '<image>\nLocate every object that matches the description "{ref_sentence}" in the image. {format}',
    "cot": '<image>\nLocate every object that matches the description "{ref_sentence}" in the image.\n'
    "Think first, then answer.\nFinally {format_lower}",
    "finetuned-baseline": FINETUNED_PROMPT,
}
_GROUNDING_REPAIR = (
    "Your previous answer did not end with a valid box.\nNow output ONLY the boxes, each as {example} with "
    "coordinates {range}.\nDo not output any extra text."
)


def grounding_format(syntax: Syntax, box_format: BoxFormat) -> str:
    """The sentence that asks for boxes in `syntax`: "Report each box as <|box_start|>(x1,y1),(x2,y2)
    <|box_end|> with each coordinate normalised to 0-1000 over the width and height of the image." """
    return f"Report each box as {syntax.example} {coordinate_words(box_format, 'the image')}."


def prompt_text(sample: RefAdvSample, prompt_mode: str, boxes: BoxOptions) -> tuple[str, bool]:
    """The prompt's text and whether it goes before the image: the family's own prompt for the
    direct mode when it has one (docs/model-families.md), else the authors' prompt of the mode,
    asking for the run's token syntax when it is not JSON."""
    fam = boxes.family
    if fam is not None and fam.prompt and prompt_mode == "direct":
        return fam.prompt.format(ref=sample.caption), fam.text_first
    syntax = boxes.syntax
    if syntax is None or prompt_mode == "finetuned-baseline":
        return PROMPTS[prompt_mode].format(ref_sentence=sample.caption), True
    wording = grounding_format(syntax, boxes.require("ref_adv_s"))
    text = _GROUNDING_PROMPTS[prompt_mode].format(
        ref_sentence=sample.caption, format=wording, format_lower=wording[0].lower() + wording[1:]
    )
    return text, True


def repair_text(boxes: BoxOptions) -> str:
    """The repair turn: the authors' (JSON, the box's corners in the run's order), or the same ask
    in the run's token syntax."""
    syntax = boxes.syntax
    if syntax is None:
        return REPAIR_TEXT.replace("[[x1, y1, x2, y2]]", f"[{box_shape(boxes.box_format)}]")
    box_format = boxes.require("ref_adv_s")
    return _GROUNDING_REPAIR.format(example=syntax.example, range=coordinate_range(box_format))


def parse_reply(sample: RefAdvSample, text: str, boxes: BoxOptions) -> Parsed:
    """The reply's boxes in the sample's pixels under the run's box options (`BoxOptions.read_boxes`)."""
    return boxes.read_boxes(text, sample.width, sample.height, "ref_adv_s")
