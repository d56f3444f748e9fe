"""Boxes: the coordinate conventions models use, conversion to absolute pixels, and IoU.

This is the one place in needlepoint that knows box formats and computes IoU. Every benchmark and
every metric goes through it, so a convention is decided once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np

from needlepoint.core.errors import DataError

BoxFormat = Literal[
    "abs_xyxy",
    "norm_1000_xyxy",
    "norm_1_xyxy",
    "norm_1000_yxyx",
    "norm_100_xyxy",
    "norm_999_xyxy",
    "norm_1023_yxyx",
    "bins_1000_xyxy",
    "norm_1_square_xyxy",
]

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Convention:
    """What a box format's four numbers mean: `scale` the grid they run over (None: pixels),
    `y_first` whether each corner is written (y, x), `bins` whether a number names a cell of the
    grid rather than a point on it (a cell is read at its centre, as Florence-2's decoder does),
    `square` whether the numbers are fractions of the image padded to a square with the image in
    its middle (Shikra's Expand2square) rather than of the image itself."""

    scale: float | None
    y_first: bool = False
    bins: bool = False
    square: bool = False


CONVENTIONS: dict[str, Convention] = {
    "abs_xyxy": Convention(None),
    "norm_1000_xyxy": Convention(1000.0),
    "norm_1_xyxy": Convention(1.0),
    "norm_1000_yxyx": Convention(1000.0, y_first=True),  # Gemini's box_2d
    "norm_100_xyxy": Convention(100.0),  # MiniGPT-v2
    "norm_999_xyxy": Convention(999.0),  # Qwen-VL's evaluator
    "norm_1023_yxyx": Convention(1023.0, y_first=True),  # PaliGemma's <locNNNN> (big_vision: round(v * 1023))
    "bins_1000_xyxy": Convention(1000.0, bins=True),  # Florence-2's <loc_N>
    "norm_1_square_xyxy": Convention(1.0, square=True),  # Shikra
}
BOX_FORMATS: tuple[str, ...] = tuple(CONVENTIONS)

_RANGES = {
    "norm_1000_xyxy": "0-1000",
    "norm_1_xyxy": "0-1",
    "norm_1000_yxyx": "0-1000",
    "norm_100_xyxy": "0-100",
    "norm_999_xyxy": "0-999",
    "norm_1023_yxyx": "0-1023",
    "bins_1000_xyxy": "0-999 (1,000 equal cells)",
    "norm_1_square_xyxy": "0-1",
}


def box_shape(box_format: BoxFormat | None) -> str:
    """The corners of a box in the format's order, as prompts name them: "[x1, y1, x2, y2]"."""
    return "[y1, x1, y2, x2]" if box_format and CONVENTIONS[box_format].y_first else "[x1, y1, x2, y2]"


def coordinate_range(box_format: BoxFormat) -> str:
    """The range of a format's numbers in words ("0-1000"; "pixels" for absolute boxes)."""
    return _RANGES.get(box_format, "pixels")


def coordinate_words(box_format: BoxFormat, of: str) -> str:
    """What a format's numbers are, in words, for prompts: "in pixels of {of} (...)" or "with each
    coordinate normalised to 0-1000 over the width and height of {of}"."""
    if CONVENTIONS[box_format].scale is None:
        return f"in pixels of {of} (x to the right, y down, origin at the top-left corner)"
    if CONVENTIONS[box_format].square:
        return f"with each coordinate normalised to 0-1 over the sides of {of} padded to a square, {of} in its middle"
    return f"with each coordinate normalised to {coordinate_range(box_format)} over the width and height of {of}"


def _square(width: float, height: float) -> tuple[float, float, float]:
    """The side of an image padded to a square with the image in its middle, and the image's
    offset in it (x, y), as Shikra's Expand2square pastes it."""
    side = max(width, height)
    return side, (side - width) // 2 if height > width else 0.0, (side - height) // 2 if width > height else 0.0


def check_box_format(name: str | None) -> BoxFormat | None:
    """`name` as a BoxFormat (None stays None: not stated yet); DataError naming the valid ones."""
    if name is None:
        return None
    if name not in CONVENTIONS:
        raise DataError(f"--box-format {name!r} is unknown; use one of {', '.join(BOX_FORMATS)}")
    return cast(BoxFormat, name)  # one of the keys of CONVENTIONS: the names of BoxFormat


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


def _nearest_aspect(number: float, key: Callable[[int], float]) -> int:
    return max(min(math.floor(number), math.ceil(number), key=key), 1)


ABS_FRAMES: tuple[str, ...] = ("official", "qwen-smart-resize", "claude", "claude-high-res")
CLAUDE_TIERS = {"claude": (1568, 1568), "claude-high-res": (2576, 4784)}
"""Claude's image limits by tier: (longest side in px, visual tokens of 28 x 28 px), Anthropic's
docs, Coordinates and bounding boxes."""
QWEN_FACTOR = 28  # patch 14 x merge 2
QWEN_MIN_PIXELS = 56 * 56
QWEN_MAX_PIXELS = 28 * 28 * 1280  # Qwen2.5-VL's image processor defaults (transformers)


@dataclass(frozen=True)
class AbsFrame:
    """Which frame a model's absolute (pixel) boxes refer to.

    `official`: pixels of the image sent, as the benchmarks' authors read them. `qwen-smart-resize`:
    pixels of the image as Qwen2.5-VL's processor resized it (`smart_resize` with `factor` and the
    pixel bounds), mapped back to the image sent. `claude`, `claude-high-res`: pixels of the image
    as Claude resized it, by the tier's limits (`claude_size`)."""

    name: str = "official"
    factor: int = QWEN_FACTOR
    min_pixels: int = QWEN_MIN_PIXELS
    max_pixels: int = QWEN_MAX_PIXELS

    def identity(self) -> dict[str, object]:
        """What a run's identity records (nothing for the default, so older runs keep their hash)."""
        if self.name == "official":
            return {}
        if self.name in CLAUDE_TIERS:
            return {"abs_frame": self.name}
        return {
            "abs_frame": self.name,
            "abs_frame_factor": self.factor,
            "abs_frame_min_pixels": self.min_pixels,
            "abs_frame_max_pixels": self.max_pixels,
        }


def check_abs_frame(
    name: str | None,
    box_format: str | None,
    factor: int | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> AbsFrame:
    """The frame a user asked for, checked; DataError in one sentence for a bad combination."""
    from needlepoint.core import numeric

    name = name or "official"
    if name not in ABS_FRAMES:
        raise DataError(f"--abs-frame {name!r} is unknown; use one of {', '.join(ABS_FRAMES)}")
    tuned = {"--abs-frame-factor": factor, "--abs-frame-min-pixels": min_pixels, "--abs-frame-max-pixels": max_pixels}
    if name != "qwen-smart-resize":
        given = [flag for flag, v in tuned.items() if v is not None]
        if given:
            raise DataError(f"{', '.join(given)} only applies with --abs-frame qwen-smart-resize")
    if name == "official":
        return AbsFrame()
    if box_format is not None and box_format != "abs_xyxy":
        raise DataError(f"--abs-frame {name} reads pixel boxes; it needs --box-format abs_xyxy, not {box_format}")
    for flag, v in tuned.items():
        numeric.flag(flag, v, 1)
        if v is not None and not isinstance(v, int):
            raise DataError(f"{flag} must be a whole number, not {v!r}")
    if name in CLAUDE_TIERS:
        return AbsFrame(name)
    frame = AbsFrame(name, factor or QWEN_FACTOR, min_pixels or QWEN_MIN_PIXELS, max_pixels or QWEN_MAX_PIXELS)
    if frame.min_pixels > frame.max_pixels:
        raise DataError(f"--abs-frame-min-pixels {frame.min_pixels} exceeds --abs-frame-max-pixels {frame.max_pixels}")
    return frame


def smart_resize(
    width: int, height: int, factor: int = QWEN_FACTOR, min_pixels: int = QWEN_MIN_PIXELS, max_pixels: int = QWEN_MAX_PIXELS
) -> tuple[int, int]:
    """(width, height) of an image after Qwen2-VL / Qwen2.5-VL's processor resized it: each side
    rounded to a multiple of `factor` (Python's round), then, when the area leaves
    [min_pixels, max_pixels], both sides scaled by one factor and floored (too large) or ceiled
    (too small) to multiples of `factor`; a side never drops below `factor`."""
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return w_bar, h_bar


def claude_size(width: int, height: int, max_edge: int, max_tokens: int, patch: int = 28) -> tuple[int, int]:
    """(width, height) of an image as Claude resizes it: unchanged when it fits, else the largest
    aspect-preserving size whose sides, rounded up to whole 28 px patches, stay within `max_edge`
    and whose patches number at most `max_tokens` (the rule and reference sizes in Anthropic's
    docs, Coordinates and bounding boxes: 1075 x 1520 -> 924 x 1307, 1920 x 1080 -> 1456 x 819)."""

    def fits(w: int, h: int) -> bool:
        pw, ph = math.ceil(w / patch), math.ceil(h / patch)
        return pw * patch <= max_edge and ph * patch <= max_edge and pw * ph <= max_tokens

    if fits(width, height):
        return width, height
    if height > width:
        h, w = claude_size(height, width, max_edge, max_tokens, patch)
        return w, h
    aspect = width / height
    lo, hi = 1, width
    while lo < hi:  # the longest long edge that fits
        mid = (lo + hi + 1) // 2
        if fits(mid, max(round(mid / aspect), 1)):
            lo = mid
        else:
            hi = mid - 1
    return lo, max(round(lo / aspect), 1)


def model_frame(width: float, height: float, max_side: int | None, frame: AbsFrame | None = None) -> tuple[float, float] | None:
    """The size a model's pixel boxes refer to, for an image annotated at `width` x `height` and
    sent at most `max_side` pixels a side; None when that is the annotated size itself (pass it as
    `to_absolute`'s `seen`)."""
    sent = fitted_size(int(width), int(height), max_side) if max_side else (int(width), int(height))
    if frame is not None and frame.name == "qwen-smart-resize":
        return smart_resize(sent[0], sent[1], frame.factor, frame.min_pixels, frame.max_pixels)
    if frame is not None and frame.name in CLAUDE_TIERS:
        return claude_size(sent[0], sent[1], *CLAUDE_TIERS[frame.name])
    return sent if max_side else None


def to_absolute(
    box: Sequence[float], box_format: BoxFormat, width: float, height: float, seen: tuple[float, float] | None = None
) -> Box:
    """Convert one model box to absolute pixel xyxy: scale, sort each pair, clip to the image.

    `seen` is the size the model was shown when it differs from (width, height), e.g. after
    downscaling: pixel boxes are then scaled back to the annotated size. A box left with zero
    width or height is returned as is: it matches nothing but is still a prediction.
    """
    convention = CONVENTIONS[box_format]
    a, b, c, d = (float(v) for v in box)
    x1, y1, x2, y2 = (b, a, d, c) if convention.y_first else (a, b, c, d)
    scale = convention.scale
    if scale is not None:
        if convention.bins:  # a cell's centre
            x1, y1, x2, y2 = x1 + 0.5, y1 + 0.5, x2 + 0.5, y2 + 0.5
        if convention.square:
            side, dx, dy = _square(width, height)
            x1, x2, y1, y2 = x1 / scale * side - dx, x2 / scale * side - dx, y1 / scale * side - dy, y2 / scale * side - dy
        else:
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


def from_absolute(box: Sequence[float], box_format: BoxFormat, width: float, height: float) -> Box:
    """An absolute pixel xyxy box in a model's convention: the inverse of `to_absolute`'s scaling,
    in the format's axis order; a cell format gives the cell holding each corner (floored, at most
    the last cell), as a family's quantizer does. No sorting or clipping otherwise: used to write
    answers in the convention evaluated (training data, round trips)."""
    convention = CONVENTIONS[box_format]
    x1, y1, x2, y2 = (float(v) for v in box)
    scale = convention.scale
    if scale is not None:
        if convention.square:
            side, dx, dy = _square(width, height)
            fractions = ((x1 + dx) / side, (y1 + dy) / side, (x2 + dx) / side, (y2 + dy) / side)
        else:
            fractions = (x1 / width, y1 / height, x2 / width, y2 / height)
        if convention.bins:
            x1, y1, x2, y2 = (float(min(max(math.floor(f * scale), 0), scale - 1)) for f in fractions)
        else:
            x1, y1, x2, y2 = (f * scale for f in fractions)
    return (y1, x1, y2, x2) if convention.y_first else (x1, y1, x2, y2)


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


def iou_matrix(
    a: np.ndarray | Sequence[Sequence[float]], b: np.ndarray | Sequence[Sequence[float]], fmt: Literal["xyxy", "xywh"] = "xyxy"
) -> np.ndarray:
    """IoU of every box in `a` against every box in `b`, shape (len(a), len(b)).

    Intersection sides are floored at 0; an empty intersection or a union of 0 or less gives 0.
    With fmt="xywh" the arithmetic is that of pycocotools' bbIou (areas from w*h, right edges
    from x+w), so that threshold decisions agree with COCOeval bit for bit.
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    # Finite boxes near float's limit overflow to inf areas; the result is then 0 (or, for inf/inf, 0
    # by the rule below), so numpy's overflow warnings would only be noise on stderr.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _iou_arrays(a, b, fmt)


def _iou_arrays(a: np.ndarray, b: np.ndarray, fmt: str) -> np.ndarray:
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
    return np.where((inter > 0) & (union > 0), inter / np.where(union > 0, union, 1.0), 0.0)


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
