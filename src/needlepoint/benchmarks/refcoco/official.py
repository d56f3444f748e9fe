"""The `official` reading: InternVL's `internvl_chat/eval/refcoco/evaluate_grounding.py`, rule for
rule, on the reply's text whatever the model family (docs/protocols/refcoco.md).

- The first match of `\\[*\\[(.*?),(.*?),(.*?),(.*?)\\]\\]*` in the answer, its four groups through
  Python's `float()`; no match, or a group that is no number, gives the box (0, 0, 0, 0).
- In float32 (the evaluator's tensors): if the four numbers sum to 4 or more they are divided by
  1000, else taken as they are (a 0-1 box); then x times the width, y times the height. Nothing is
  sorted or clipped.
- IoU as its `box_iou` (torchvision's `box_area`, no +1 pixel), in float32, against the target as
  float32; a hit is IoU >= 0.5 (a NaN IoU, from a union of 0, is no hit).

Each float32 operation here is one of the evaluator's tensor operations on the same values, so a
hit here is a hit there. The sum is taken left to right; torch may add four float32 numbers in
another order, which can differ only for non-integer coordinates whose sum lies within rounding of 4.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PATTERN", "OfficialBox", "official_box", "official_iou"]

PATTERN = re.compile(r"\[*\[(.*?),(.*?),(.*?),(.*?)\]\]*")


@dataclass(frozen=True)
class OfficialBox:
    """The box the evaluator scores, in pixels (float32 values), and how it was read: `found`
    False for the zero box that stands in for a failed parse; `unit_scale` True when the numbers
    summed to less than 4 and were read as fractions of the image rather than 0-1000."""

    box: tuple[float, float, float, float]
    found: bool
    unit_scale: bool


def official_box(text: str, width: float, height: float) -> OfficialBox:
    """The evaluator's predicted box for a reply to an image of `width` x `height`."""
    found = PATTERN.findall(text or "")
    try:
        values = (float(found[0][0]), float(found[0][1]), float(found[0][2]), float(found[0][3]))
        ok = True
    except (IndexError, ValueError):
        values, ok = (0.0, 0.0, 0.0, 0.0), False
    with np.errstate(over="ignore", invalid="ignore"):
        box = np.asarray(values, dtype=np.float32)
        total = box[0] + box[1] + box[2] + box[3]
        unit = not bool(total >= np.float32(4))
        if not unit:
            box = box / np.float32(1000)
        box[0::2] *= np.float32(width)
        box[1::2] *= np.float32(height)
    x1, y1, x2, y2 = (float(v) for v in box)
    return OfficialBox((x1, y1, x2, y2), ok, unit)


def official_iou(pred: Sequence[float], target: Sequence[float]) -> float:
    """IoU of two xyxy boxes as the evaluator's `box_iou` computes it, in float32 (NaN when the
    union is 0; a negative area, from x2 < x1, is not corrected)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        p = np.asarray(pred, dtype=np.float32)
        t = np.asarray(target, dtype=np.float32)
        area1 = (p[2] - p[0]) * (p[3] - p[1])
        area2 = (t[2] - t[0]) * (t[3] - t[1])
        lt = np.maximum(p[:2], t[:2])
        rb = np.minimum(p[2:], t[2:])
        wh = np.maximum(rb - lt, np.float32(0))  # clamp(min=0); NaN stays NaN, as in torch
        inter = wh[0] * wh[1]
        union = area1 + area2 - inter
        return float(inter / union)
