"""Boxes in a model family's own syntax (families/syntaxes.py), read into a benchmark's answer.

`--answer-format` names the syntax: `json` (the benchmarks' JSON readers, contract/boxes.py),
`grounding-tokens` (Qwen2-VL's `<|box_start|>(x1,y1),(x2,y2)<|box_end|>`, the name it has had
since before the families), or a family's syntax (`internvl`, `paligemma`, ...). The SFT builder
writes Qwen2-VL's syntax with `format_image_line`, and the readers here read it back, so the two
cannot drift apart. A reply in another syntax than the run's is a parse error, never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence

from needlepoint.contract.base import Parsed
from needlepoint.core import status
from needlepoint.core.errors import DataError
from needlepoint.core.geometry import BoxFormat, dedupe, to_absolute
from needlepoint.families import SYNTAXES, Found, GroundedBox, Malformed, Syntax
from needlepoint.families.syntaxes import QWEN2, foreign_syntax

__all__ = [
    "ANSWER_FORMATS",
    "BOX_FORMAT",
    "GROUNDING_TOKENS",
    "Found",
    "GroundedBox",
    "Malformed",
    "answer_syntax",
    "check_answer_format",
    "format_image_line",
    "parse_grounded_boxes",
    "read_reply",
    "wrong_syntax",
]

GROUNDING_TOKENS = QWEN2.name
BOX_FORMAT: BoxFormat = "norm_1000_xyxy"
"""Qwen2-VL's grounding tokens' only box convention: integers 0-1000 over each image's sides."""

ANSWER_FORMATS = ("json", *SYNTAXES)


def answer_syntax(answer_format: str) -> Syntax | None:
    """The syntax an answer format reads (None for JSON)."""
    return None if answer_format == "json" else SYNTAXES[answer_format]


def check_answer_format(answer_format: str | None, box_format: BoxFormat | None) -> tuple[str, BoxFormat | None]:
    """The answer format and the box format it implies (grounding tokens: always norm_1000_xyxy);
    DataError in one sentence for an unknown format or a contradicting --box-format."""
    answer_format = answer_format or "json"
    if answer_format not in ANSWER_FORMATS:
        raise DataError(f"--answer-format {answer_format!r} is unknown; use one of {', '.join(ANSWER_FORMATS)}")
    if answer_format == GROUNDING_TOKENS:
        if box_format not in (None, BOX_FORMAT):
            raise DataError(
                f"--answer-format grounding-tokens reads Qwen2-VL's 0-1000 boxes; drop --box-format {box_format} "
                f"or give {BOX_FORMAT}"
            )
        return answer_format, BOX_FORMAT
    return answer_format, box_format


def format_image_line(number: int, groups: Sequence[tuple[int, Sequence[Sequence[int | float]]]], syntax: Syntax = QWEN2) -> str:
    """MC-Bench's answer line for image `number` (1 or 2) in `syntax`: each (group, boxes) as a
    `group N` label and its boxes, or `none` when there is no box."""
    parts = [syntax.answer(boxes, f"group {group}") for group, boxes in groups if boxes]
    return f"Image {number}: " + ("".join(parts) if parts else "none")


def wrong_syntax(text: str, own: str) -> str | None:
    """`wrong_syntax` when the reply holds a box in another syntax than `own` (a syntax's name, or
    "json"), else None: such a box is a parse error, never read as the run's."""
    return status.WRONG_SYNTAX if foreign_syntax(text, own) else None


def read_reply(text: str, syntax: Syntax) -> Found | str:
    """The boxes of a reply in `syntax`, or the parse error: `empty_response`, `wrong_syntax`,
    `bad_grounding` (an opening token with no box after it)."""
    if not text or not text.strip():
        return status.EMPTY_RESPONSE
    wrong = wrong_syntax(text, syntax.name)
    if wrong:
        return wrong
    try:
        return syntax.read(text)
    except Malformed:
        return status.BAD_GROUNDING


def parse_grounded_boxes(
    text: str,
    syntax: Syntax,
    box_format: BoxFormat,
    width: float,
    height: float,
    seen: tuple[float, float] | None = None,
) -> Parsed:
    """A reply's boxes in `syntax` as absolute xyxy in reply order (duplicates dropped), as
    `boxes.parse_boxes` reads JSON; or `empty_response`, `wrong_syntax`, `no_grounding_found` (no
    box), `bad_grounding`. Image lines and labels are ignored: a single-image benchmark's answer."""
    found = read_reply(text, syntax)
    if isinstance(found, str):
        return Parsed(error=found)
    if not found.boxes:
        return Parsed(error=status.NO_GROUNDING_FOUND)
    return Parsed(answer=[list(b) for b in dedupe([to_absolute(g.box, box_format, width, height, seen) for g in found.boxes])])
