"""Qwen2-VL's native grounding syntax, written and read in one place: the SFT builder writes its
answers with `format_*`, and `--answer-format grounding-tokens` reads replies with `find_boxes`,
so the two cannot drift apart.

A box is `<|box_start|>(x1,y1),(x2,y2)<|box_end|>` with coordinates 0-1000 over the image's width
and height (Qwen2-VL's pretraining convention: `norm_1000_xyxy` in geometry.py), optionally after a
label `<|object_ref_start|>...<|object_ref_end|>`; several boxes may follow one label. MC-Bench
answers put one line per image, `Image 1: <|object_ref_start|>group 1<|object_ref_end|><|box_start|>
(..)<|box_end|>` and `Image 2: none`.

Reading is lenient about what models and servers do to that syntax: spaces anywhere, a missing
closing token, decimals, and the tokens stripped altogether (vLLM drops special tokens from the
reply text unless the request says `"skip_special_tokens": false`), which leaves the bare
`(x1,y1),(x2,y2)` pairs and the label as plain text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from needlepoint.contract.base import Parsed
from needlepoint.core import status
from needlepoint.core.errors import DataError
from needlepoint.core.geometry import BoxFormat, dedupe, to_absolute

__all__ = [
    "ANSWER_FORMATS",
    "BOX_END",
    "BOX_FORMAT",
    "BOX_START",
    "REF_END",
    "REF_START",
    "check_answer_format",
    "Found",
    "GroundedBox",
    "MalformedBox",
    "find_boxes",
    "format_box",
    "format_image_line",
    "format_ref",
    "parse_grounded_boxes",
]

BOX_FORMAT: BoxFormat = "norm_1000_xyxy"
"""The only box convention of the syntax: integers 0-1000 over each image's width and height."""

REF_START, REF_END = "<|object_ref_start|>", "<|object_ref_end|>"
BOX_START, BOX_END = "<|box_start|>", "<|box_end|>"
TOKENS = (REF_START, REF_END, BOX_START, BOX_END)

_NUMBER = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+))"
_PAIR = r"\(\s*" + _NUMBER + r"\s*,\s*" + _NUMBER + r"\s*\)"
# One box: an optional opening token, two coordinate pairs (a comma between them, or none), an
# optional closing token. Without the tokens this reads the pairs a server left after stripping them.
_BOX = re.compile(
    r"(?:<\|box_start\|>\s*)?" + _PAIR + r"\s*,?\s*" + _PAIR + r"(?:\s*<\|box_end\|>)?",
)
_IMAGE_LINE = re.compile(r"\b(?:image|img|picture)[ _]?(\d+)\s*:", re.IGNORECASE)
_GROUP = re.compile(r"\bgroup[ _]?(\d+)", re.IGNORECASE)
_NONE = re.compile(r"\b(?:none|nothing)\b", re.IGNORECASE)


ANSWER_FORMATS = ("json", "grounding-tokens")


def check_answer_format(answer_format: str | None, box_format: BoxFormat | None) -> tuple[str, BoxFormat | None]:
    """The answer format and the box format it implies (grounding tokens: always norm_1000_xyxy);
    DataError in one sentence for an unknown format or a contradicting --box-format. Shared by
    MC-Bench and Ref-Adv-s."""
    answer_format = answer_format or "json"
    if answer_format not in ANSWER_FORMATS:
        raise DataError(f"--answer-format {answer_format!r} is unknown; use json or grounding-tokens")
    if answer_format == "grounding-tokens":
        if box_format not in (None, BOX_FORMAT):
            raise DataError(
                f"--answer-format grounding-tokens reads Qwen2-VL's 0-1000 boxes; drop --box-format {box_format} "
                f"or give {BOX_FORMAT}"
            )
        return answer_format, BOX_FORMAT
    return answer_format, box_format


def format_box(box: Sequence[int | float]) -> str:
    """One box in the syntax: `<|box_start|>(x1,y1),(x2,y2)<|box_end|>` (the values as given)."""
    x1, y1, x2, y2 = box
    return f"{BOX_START}({x1},{y1}),({x2},{y2}){BOX_END}"


def format_ref(label: str) -> str:
    """A label before boxes: `<|object_ref_start|>label<|object_ref_end|>`."""
    return f"{REF_START}{label}{REF_END}"


def format_image_line(number: int, groups: Sequence[tuple[int, Sequence[Sequence[int | float]]]]) -> str:
    """MC-Bench's answer line for image `number` (1 or 2): each (group, boxes) as a `group N`
    label and its boxes, or `none` when there is no box."""
    parts = [format_ref(f"group {group}") + "".join(format_box(b) for b in boxes) for group, boxes in groups if boxes]
    return f"Image {number}: " + ("".join(parts) if parts else "none")


@dataclass(frozen=True)
class GroundedBox:
    """One box read from a reply: its four numbers as written (0-1000), the image line it stands
    on (the number the reply gave, None before any `Image N:`), and the group its label names
    (None when no `group N` came before it on its line)."""

    box: tuple[float, float, float, float]
    image: int | None
    group: int | None


class MalformedBox(ValueError):
    """A `<|box_start|>` that is not followed by two coordinate pairs."""


@dataclass(frozen=True)
class Found:
    """What a reply holds in the syntax: its boxes in order, and whether it says `none` anywhere
    (an empty answer given on purpose, not a reply in another syntax)."""

    boxes: list[GroundedBox]
    says_none: bool


def find_boxes(text: str) -> Found:
    """Every box of a reply in order, with its image line and group: an `Image N:` line starts
    image N with no group; a `group N` (inside a label or, tokens stripped, as plain text) sets the
    group for the boxes after it on that line. MalformedBox when a `<|box_start|>` holds no two
    coordinate pairs."""
    boxes = list(_BOX.finditer(text))
    starts = {m.start() for m in boxes}
    if any(m.start() not in starts for m in re.finditer(re.escape(BOX_START), text)):
        raise MalformedBox(f"a {BOX_START} without two coordinate pairs")
    events: list[tuple[int, str, re.Match[str]]] = [(m.start(), "box", m) for m in boxes]
    events += [(m.start(), "image", m) for m in _IMAGE_LINE.finditer(text)]
    events += [(m.start(), "group", m) for m in _GROUP.finditer(text)]
    image: int | None = None
    group: int | None = None
    out: list[GroundedBox] = []
    for _, kind, match in sorted(events, key=lambda e: e[0]):
        if kind == "image":
            image, group = int(match.group(1)), None
        elif kind == "group":
            group = int(match.group(1))
        else:
            x1, y1, x2, y2 = (float(v) for v in match.groups())
            out.append(GroundedBox((x1, y1, x2, y2), image, group))
    return Found(out, bool(_NONE.search(_BOX.sub(" ", text))))


def parse_grounded_boxes(text: str, width: float, height: float, seen: tuple[float, float] | None = None) -> Parsed:
    """A reply's boxes in the syntax as absolute xyxy in reply order (duplicates dropped), as
    `boxes.parse_boxes` reads JSON; or `empty_response`, `no_grounding_found` (no box),
    `bad_grounding`. Image lines and labels are ignored: a single-image benchmark's answer."""
    if not text or not text.strip():
        return Parsed(error=status.EMPTY_RESPONSE)
    try:
        found = find_boxes(text)
    except MalformedBox:
        return Parsed(error=status.BAD_GROUNDING)
    if not found.boxes:
        return Parsed(error=status.NO_GROUNDING_FOUND)
    return Parsed(answer=[list(b) for b in dedupe([to_absolute(g.box, BOX_FORMAT, width, height, seen) for g in found.boxes])])
