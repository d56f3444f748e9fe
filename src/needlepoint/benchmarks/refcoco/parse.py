"""RefCOCO prompts and the `corrected` reading of a reply.

The prompt: the model family's own grounding prompt (`--model-family`: InternVL's evaluator's,
Qwen3-VL's maintainers', PaliGemma's `detect`, ...), in the family's order of text and image.
Without one (no family, or a family with none of its own), Qwen3-VL's RefCOCO wording, which asks
for JSON boxes; with a token syntax (`--answer-format`, or a family such as Qwen2-VL's), the same
sentence asking for boxes in that syntax.

The `corrected` reading: the family's syntax read by its own reader (contract/grounding.py), JSON
by the JSON reader (contract/boxes.py), in the run's stated box format and frame, never a guessed
scale; the first box is the answer. A reply with no box is a parse error, scored as a miss.
"""

from __future__ import annotations

from needlepoint.benchmarks.refcoco.data import RefCocoSample
from needlepoint.contract import BoxOptions, Parsed, coordinate_words

__all__ = ["JSON_PROMPT", "SYNTAX_PROMPT", "prompt_text", "read_corrected"]

JSON_PROMPT = 'Locate every object that matches the description "{ref}" in the image. Report bbox coordinates in JSON format.'
"""Qwen3-VL's RefCOCO prompt (QwenLM/Qwen3-VL issue 1721), the prompt of a run without a family prompt."""

SYNTAX_PROMPT = 'Locate every object that matches the description "{ref}" in the image. Report each box as {example} {words}.'
"""The same sentence for a token syntax: the syntax's example box and what its numbers are."""


def prompt_text(sample: RefCocoSample, boxes: BoxOptions) -> tuple[str, bool]:
    """The prompt's text and whether it goes before the image."""
    fam = boxes.family
    if fam is not None and fam.prompt:
        return fam.prompt.format(ref=sample.caption), fam.text_first
    syntax = boxes.syntax
    if syntax is None:
        return JSON_PROMPT.format(ref=sample.caption), True
    words = coordinate_words(boxes.require("refcoco"), "the image")
    return SYNTAX_PROMPT.format(ref=sample.caption, example=syntax.example, words=words), True


def read_corrected(sample: RefCocoSample, text: str, boxes: BoxOptions) -> Parsed:
    """The reply's boxes in the sample's pixels under the run's stated conventions (the family's
    syntax and box format, the frame and size the image was sent at), or the parse error."""
    return boxes.read_boxes(text, sample.width, sample.height, "refcoco")
