"""The JSON schemas of the answers benchmarks ask for in JSON (`--structured-output`, structured.py):
plain JSON-schema dicts, declared beside the prompts that describe the same shape in words. A
benchmark knows no HTTP: how a schema is sent is structured.py's.

Every schema is bounded, so that any reply that follows it has a bounded length: each array has a
`maxItems`, each number a `minimum` and a `maximum`, each string a `maxLength`. Without bounds a
constrained decoder lets a model write one number or one list forever (a model of random weights
does, and a trained one that loops does too) and the reply ends at the token limit, unparsed. The
caps sit well above any real answer (see docs/cost.md); `structured.longest_reply` computes the
bound.
"""

from __future__ import annotations

from typing import Any

from needlepoint.core.geometry import CONVENTIONS

__all__ = [
    "ABS_MAX",
    "GROUP",
    "MAX_GROUP",
    "MC_MAX_BOXES",
    "PHRASE_MAX_CHARS",
    "REF_ADV_MAX_BOXES",
    "box",
    "boxes_object",
    "coordinate",
    "image_lists",
    "mc_box_item",
    "phrase_item",
    "ref_adv_schema",
]

ABS_MAX = 99_999  # pixel coordinates: any image a model is shown is narrower than 100,000 px (MC-Bench's widest: 5,488)
REF_ADV_MAX_BOXES = 10  # an expression names one object, and the first box is scored; room for a few candidates
MC_MAX_BOXES = 32  # per image: MC-Bench's most boxes in one image is 17 (v0.2); a merged canvas's list holds twice as many
MAX_GROUP = 99  # MC-Bench's descriptions name at most 7 groups
PHRASE_MAX_CHARS = 100  # the agentic reasoner's phrase: a short noun phrase for a detector


def coordinate(box_format: str | None) -> dict[str, Any]:
    """One box coordinate in `box_format`: a whole number of pixels (0..ABS_MAX) or of the format's
    grid (its last cell for a cell format), or a number in 0..1; a format not given yet reads as
    pixels (its parse refuses it anyway)."""
    convention = CONVENTIONS.get(box_format or "abs_xyxy", CONVENTIONS["abs_xyxy"])
    if convention.scale is None:
        return {"type": "integer", "minimum": 0, "maximum": ABS_MAX}
    if convention.scale == 1.0:
        return {"type": "number", "minimum": 0, "maximum": 1}
    return {"type": "integer", "minimum": 0, "maximum": int(convention.scale) - (1 if convention.bins else 0)}


def box(box_format: str | None) -> dict[str, Any]:
    """`[x1, y1, x2, y2]` in `box_format`."""
    return {"type": "array", "items": coordinate(box_format), "minItems": 4, "maxItems": 4}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _list(item: dict[str, Any], max_items: int, min_items: int = 0) -> dict[str, Any]:
    return {"type": "array", "items": item, "minItems": min_items, "maxItems": max_items}


def ref_adv_schema(box_format: str | None) -> dict[str, Any]:
    """Ref-Adv-s: `{"bboxes": [[x1, y1, x2, y2], ...]}`, the shape its repair turn names, with at
    least one box (every expression refers to an object; an empty list is scored as no box)."""
    return _object({"bboxes": _list(box(box_format), REF_ADV_MAX_BOXES, min_items=1)})


GROUP: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_GROUP}


def mc_box_item(box_format: str | None) -> dict[str, Any]:
    """MC-Bench's prompts' item: `{"group": 1, "bbox_2d": [...]}`."""
    return _object({"group": GROUP, "bbox_2d": box(box_format)})


def phrase_item() -> dict[str, Any]:
    """The agentic reasoner's item: `{"group": 1, "phrase": "..."}`."""
    return _object({"group": GROUP, "phrase": {"type": "string", "minLength": 1, "maxLength": PHRASE_MAX_CHARS}})


def boxes_object(item: dict[str, Any], max_items: int = 2 * MC_MAX_BOXES) -> dict[str, Any]:
    """MC-Bench merged: `{"boxes": [item, ...]}`, both images' boxes in one list."""
    return _object({"boxes": _list(item, max_items)})


def image_lists(item: dict[str, Any], max_items: int = MC_MAX_BOXES) -> dict[str, Any]:
    """MC-Bench sequence (and the agentic reasoner): `{"image_1": [item, ...], "image_2": [...]}`,
    at most `max_items` per image."""
    return _object({"image_1": _list(item, max_items), "image_2": _list(item, max_items)})
