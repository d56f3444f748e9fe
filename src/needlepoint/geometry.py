"""Boxes: the coordinate conventions models use, conversion to absolute pixels, and IoU.

This is the one place in needlepoint that knows box formats and computes IoU. Every benchmark and
every metric goes through it, so a convention is decided once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from needlepoint.errors import DataError

BoxFormat = Literal["abs_xyxy", "norm_1000_xyxy", "norm_1_xyxy"]
BOX_FORMATS: tuple[str, ...] = ("abs_xyxy", "norm_1000_xyxy", "norm_1_xyxy")

Box = tuple[float, float, float, float]

_SCALE = {"abs_xyxy": None, "norm_1000_xyxy": 1000.0, "norm_1_xyxy": 1.0}


def check_box_format(name: str | None) -> BoxFormat | None:
    """`name` as a BoxFormat (None stays None: not stated yet); DataError naming the valid ones."""
    if name is None:
        return None
    if name not in _SCALE:
        raise DataError(f"--box-format {name!r} is unknown; use one of {', '.join(BOX_FORMATS)}")
    return name  # type: ignore[return-value]


def fitted_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """The size an image of `width` x `height` is sent at when no side may exceed `max_side`:
    Pillow's `thumbnail` arithmetic (aspect kept, each side rounded to the nearer aspect)."""
    if max_side is None or (width <= max_side and height <= max_side):
        return width, height
    aspect = width / height
    x = y = max_side
    if x / y >= aspect:
        x = _nearest_aspect(y * aspect, lambda n: abs(aspect - n / y))
    else:
        y = _nearest_aspect(x / aspect, lambda n: 0 if n == 0 else abs(aspect - x / n))
    return x, y


def _nearest_aspect(number: float, key) -> int:  # type: ignore[no-untyped-def]
    return max(min(math.floor(number), math.ceil(number), key=key), 1)


def to_absolute(
    box: Sequence[float], box_format: BoxFormat, width: float, height: float, seen: tuple[float, float] | None = None
) -> Box:
    """Convert one model box to absolute pixel xyxy: scale, sort each pair, clip to the image.

    `seen` is the size the model was shown when it differs from (width, height), e.g. after
    downscaling: pixel boxes are then scaled back to the annotated size. A box left with zero
    width or height is returned as is: it matches nothing but is still a prediction.
    """
    x1, y1, x2, y2 = (float(v) for v in box)
    scale = _SCALE[box_format]
    if scale is not None:
        x1, x2 = x1 / scale * width, x2 / scale * width
        y1, y2 = y1 / scale * height, y2 / scale * height
    elif seen is not None and tuple(seen) != (width, height):
        sx, sy = width / seen[0], height / seen[1]
        x1, x2, y1, y2 = x1 * sx, x2 * sx, y1 * sy, y2 * sy
    if x1 > x2:
        x1, x2 = x2, x1
    if y1 > y2:
        y1, y2 = y2, y1
    return (
        min(max(x1, 0.0), float(width)),
        min(max(y1, 0.0), float(height)),
        min(max(x2, 0.0), float(width)),
        min(max(y2, 0.0), float(height)),
    )


def dedupe(boxes: Sequence[Box]) -> list[Box]:
    """Drop later duplicates, comparing the four values rounded to 6 decimals."""
    seen: set[tuple[float, ...]] = set()
    out: list[Box] = []
    for b in boxes:
        key = tuple(round(v, 6) for v in b)
        if key not in seen:
            seen.add(key)
            out.append(b)
    return out


def xyxy_to_xywh(box: Sequence[float]) -> list[float]:
    """[x1, y1, x2, y2] to COCO's [x, y, w, h]."""
    x1, y1, x2, y2 = box
    return [x1, y1, x2 - x1, y2 - y1]


def xywh_to_xyxy(box: Sequence[float]) -> list[float]:
    """COCO's [x, y, w, h] to [x1, y1, x2, y2]."""
    x, y, w, h = box
    return [x, y, x + w, y + h]


def iou_matrix(a: np.ndarray | Sequence, b: np.ndarray | Sequence, fmt: Literal["xyxy", "xywh"] = "xyxy") -> np.ndarray:
    """IoU of every box in `a` against every box in `b`, shape (len(a), len(b)).

    Intersection sides are floored at 0; an empty intersection or a union of 0 or less gives 0.
    With fmt="xywh" the arithmetic is that of pycocotools' bbIou (areas from w*h, right edges
    from x+w), so that threshold decisions agree with COCOeval bit for bit.
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    if fmt == "xywh":
        ax1, ay1, ax2, ay2 = a[:, 0], a[:, 1], a[:, 0] + a[:, 2], a[:, 1] + a[:, 3]
        bx1, by1, bx2, by2 = b[:, 0], b[:, 1], b[:, 0] + b[:, 2], b[:, 1] + b[:, 3]
        area_a, area_b = a[:, 2] * a[:, 3], b[:, 2] * b[:, 3]
    else:
        ax1, ay1, ax2, ay2 = a.T
        bx1, by1, bx2, by2 = b.T
        area_a, area_b = (ax2 - ax1) * (ay2 - ay1), (bx2 - bx1) * (by2 - by1)
    w = np.minimum(ax2[:, None], bx2[None, :]) - np.maximum(ax1[:, None], bx1[None, :])
    h = np.minimum(ay2[:, None], by2[None, :]) - np.maximum(ay1[:, None], by1[None, :])
    inter = np.where((w > 0) & (h > 0), w * h, 0.0)
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where((inter > 0) & (union > 0), inter / np.where(union > 0, union, 1.0), 0.0)
    return out


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU of two xyxy boxes: iou_matrix's xyxy arithmetic, operation for operation (so the two
    agree bit for bit), in plain Python, because for one pair numpy's call overhead costs many
    times the arithmetic and this runs once per answer."""
    ax1, ay1, ax2, ay2 = (float(v) for v in a)
    bx1, by1, bx2, by2 = (float(v) for v in b)
    w = min(ax2, bx2) - max(ax1, bx1)
    h = min(ay2, by2) - max(ay1, by1)
    inter = w * h if w > 0 and h > 0 else 0.0
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter
    return inter / union if inter > 0 and union > 0 else 0.0


def require_box_format(box_format: BoxFormat | None, benchmark: str) -> BoxFormat:
    """The run's box format; a run must state it (it belongs to the model family, never guessed)."""
    if box_format is None:
        raise DataError(
            f"--box-format is required for {benchmark}: the box convention of the model family "
            "(abs_xyxy, norm_1000_xyxy or norm_1_xyxy; e.g. Qwen2.5-VL abs_xyxy, Qwen3-VL norm_1000_xyxy)"
        )
    return box_format
