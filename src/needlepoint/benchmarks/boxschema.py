"""The JSON schemas of the answers benchmarks ask for in JSON (`--structured-output`, structured.py):
plain JSON-schema dicts, declared beside the prompts that describe the same shape in words. A
benchmark knows no HTTP: how a schema is sent is structured.py's."""

from __future__ import annotations

from typing import Any

__all__ = ["BOX", "boxes_object", "image_lists", "ref_adv_schema"]

BOX: dict[str, Any] = {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def ref_adv_schema() -> dict[str, Any]:
    """Ref-Adv-s: `{"bboxes": [[x1, y1, x2, y2], ...]}`, the shape its repair turn names, with at
    least one box (every expression refers to an object; an empty list is scored as no box)."""
    return _object({"bboxes": {"type": "array", "items": BOX, "minItems": 1}})


def boxes_object(item: dict[str, Any]) -> dict[str, Any]:
    """MC-Bench merged: `{"boxes": [item, ...]}`."""
    return _object({"boxes": {"type": "array", "items": item}})


def image_lists(item: dict[str, Any]) -> dict[str, Any]:
    """MC-Bench sequence (and the agentic reasoner): `{"image_1": [item, ...], "image_2": [...]}`."""
    return _object({"image_1": {"type": "array", "items": item}, "image_2": {"type": "array", "items": item}})


GROUP: dict[str, Any] = {"type": "integer", "minimum": 1}
MC_BOX_ITEM = _object({"group": GROUP, "bbox_2d": BOX})  # MC-Bench's prompts: {"group": 1, "bbox_2d": [...]}
PHRASE_ITEM = _object({"group": GROUP, "phrase": {"type": "string", "minLength": 1}})  # the agentic reasoner's
