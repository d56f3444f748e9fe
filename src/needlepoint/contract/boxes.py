"""Boxes out of a model's reply: the JSON found in the text, its boxes found depth first (priority
keys first), each converted to absolute xyxy from the box format the model was asked for. Shared by
every benchmark that reads boxes (Ref-Adv-s's parse, MC-Bench's agentic grounding calls), so it
sits in the benchmarks' contract layer beside `Parsed`, over `geometry` and `jsonfind`.
"""

from __future__ import annotations

from typing import Any

from needlepoint.contract.base import Parsed
from needlepoint.core import status
from needlepoint.core.geometry import BoxFormat, dedupe, to_absolute
from needlepoint.core.jsonfind import find_json
from needlepoint.core.numeric import is_finite

__all__ = ["MAX_BOXES", "PRIORITY_KEYS", "collect_boxes", "parse_boxes"]

PRIORITY_KEYS = ("bboxes", "boxes", "bbox", "bbox_2d", "predictions", "results", "objects", "coordinates")
MAX_BOXES = 100


def _is_number(v: Any) -> bool:
    # bool is an int, as in the authors' Python; NaN, infinities and integers beyond float range
    # are no coordinates (numeric.py has the one rule)
    return isinstance(v, bool) or is_finite(v)


def collect_boxes(value: Any) -> list[list[float]]:
    """Boxes found depth first in a JSON value (priority keys first), at most MAX_BOXES."""
    out: list[list[float]] = []

    def visit(v: Any) -> None:
        if len(out) >= MAX_BOXES:
            return
        if isinstance(v, list):
            if len(v) == 4 and all(_is_number(x) for x in v):
                out.append([float(x) for x in v])
                return
            for item in v:
                visit(item)
        elif isinstance(v, dict):
            for key in PRIORITY_KEYS:
                if key in v:
                    visit(v[key])
            for key, item in v.items():
                if key not in PRIORITY_KEYS:
                    visit(item)

    visit(value)
    return out


def parse_boxes(text: str, box_format: BoxFormat, width: float, height: float, seen: tuple[float, float] | None = None) -> Parsed:
    """A reply into absolute xyxy boxes, or `empty_response` / `no_bbox_found`; `seen` is the
    size the image was sent at when it was downscaled."""
    if not text or not text.strip():
        return Parsed(error=status.EMPTY_RESPONSE)
    try:
        value = find_json(text)
    except LookupError:
        return Parsed(error=status.NO_BBOX_FOUND)
    raw = collect_boxes(value)
    if not raw:
        return Parsed(error=status.NO_BBOX_FOUND)
    return Parsed(answer=[list(b) for b in dedupe([to_absolute(b, box_format, width, height, seen) for b in raw])])
