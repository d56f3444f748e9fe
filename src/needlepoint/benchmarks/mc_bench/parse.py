"""MC-Bench answers: JSON boxes per image with group numbers, in either input mode.

Accepted shapes (docs/protocols/mc-bench.md, "Reading the answer"): `{"image_1": [...],
"image_2": [...]}` (keys also spelled "Image 1", "image1", "img1"); a flat list of
`{"image": 1|2, "group": g, "bbox_2d"|"bbox": [...]}`; items that are bare boxes or lack a group
(group 1). In `merged` mode boxes are in canvas coordinates and belong to the image that holds
their centre, whatever key they came under.
A family's token syntax (`--answer-format grounding-tokens`, `internvl`, ...) is read instead by
`parse_grounding_answer` (contract/grounding.py) into the same answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from needlepoint.contract.base import Parsed
from needlepoint.contract.grounding import read_reply, wrong_syntax
from needlepoint.core import status
from needlepoint.core.geometry import AbsFrame, BoxFormat, model_frame, to_absolute
from needlepoint.core.jsonfind import find_json
from needlepoint.core.numeric import is_finite, whole_number
from needlepoint.families import Syntax

BOX_KEYS = ("bbox_2d", "bbox", "box", "bbox_xyxy", "coordinates", "box_2d")
LIST_KEYS = ("boxes", "bboxes", "objects", "instances", "results", "predictions", "answer")


@dataclass(frozen=True)
class PairGeometry:
    """The two images' sizes, and for merged mode the canvas layout."""

    sizes: tuple[tuple[float, float], tuple[float, float]]  # (width, height) per image
    band: int = 20
    max_side: int | None = None  # images (or the canvas) were downscaled to this before sending
    frame: AbsFrame | None = None  # the frame pixel boxes refer to (None: the image sent)

    def seen(self, size: tuple[float, float]) -> tuple[float, float] | None:
        """The size a model's pixel boxes on an image of `size` refer to, when not `size` itself."""
        return model_frame(size[0], size[1], self.max_side, self.frame)

    @property
    def offset(self) -> float:
        """x of the right image on the merged canvas."""
        return self.sizes[0][0] + self.band

    @property
    def canvas(self) -> tuple[float, float]:
        """(width, height) of the merged canvas."""
        (w1, h1), (w2, h2) = self.sizes
        return w1 + self.band + w2, max(h1, h2)


def image_index(key: str) -> int | None:
    """0 or 1 for an answer key naming the first or second image (`image_1`, `Image 2`, ...), else None."""
    norm = re.sub(r"[^a-z0-9]", "", key.lower())
    m = re.fullmatch(r"(?:image|img|picture)([12])", norm)
    return int(m.group(1)) - 1 if m else None


Item = tuple[int | None, int, list[float], float]
"""(image index or None, group, raw box, score) of one answer item."""


def _is_number(x: Any) -> bool:
    """A finite JSON number (not a boolean): NaN or infinity from a model is no coordinate or score."""
    return is_finite(x)


def _is_box(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 4 and all(_is_number(x) for x in v)


GROUP_MAX = 2**31 - 1
"""The largest group (or image) number read from a reply: COCO tools hold category ids as 32-bit
integers, and a pair shows a handful of groups; `1e300` or a 30-digit number is no group."""


class OutOfRange(ValueError):
    """A reply names a group or image by a number no answer can have (`1e300`, 30 digits)."""


def group_number(v: Any) -> int | None:
    """A group number from a model's JSON: an integral number, or the first digits of a string;
    None when `v` names none (absent, a word, a fraction, NaN). OutOfRange when it names a number
    beyond GROUP_MAX, which the caller makes the sample's parse error, never the run's."""
    if isinstance(v, str):
        m = re.search(r"\d+", v)
        if m is None:
            return None
        digits = m.group().lstrip("0") or "0"
        if len(digits) > len(str(GROUP_MAX)) or int(digits) > GROUP_MAX:  # int() refuses 4,300 digits
            raise OutOfRange(f"group {v[:40]!r} is out of range")
        return int(digits)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if isinstance(v, float) and not v.is_integer():
            return None  # NaN, infinities and fractions name no group
        number = whole_number(v, GROUP_MAX)
        if number is None:
            raise OutOfRange(f"group {v!r:.40} is out of range")
        return number
    return None


def _item(v: Any, image: int | None) -> Item | None:
    """(image index or None, group, raw box, score) of one answer item, or None if it is no box."""
    if _is_box(v):
        return image, 1, [float(x) for x in v], 1.0
    if not isinstance(v, dict):
        return None
    box = next((v[k] for k in BOX_KEYS if k in v and _is_box(v[k])), None)
    if box is None:
        return None
    try:
        group = group_number(v.get("group", v.get("group_id", 1)))
        img = image
        if "image" in v:
            g = group_number(v["image"])
            img = g - 1 if g in (1, 2) else None
    except OutOfRange:
        return None  # an absurd number: the reply is not the asked-for shape (bad_schema)
    if group is None or group < 1:
        group = 1
    score = v.get("score", 1.0)
    score = float(score) if _is_number(score) else 1.0
    return img, group, [float(x) for x in box], score


def _items(values: list[Any], image: int | None) -> list[Item] | None:
    """Every value as an answer item, or None when one of them is not a box."""
    out = []
    for v in values:
        got = _item(v, image)
        if got is None:
            return None
        out.append(got)
    return out


def _collect(value: Any) -> list[Item] | None:
    if isinstance(value, dict):
        per_image = {(image_index(k)): v for k, v in value.items() if image_index(k) is not None}
        if per_image:
            out: list[Item] = []
            for idx, items in sorted(per_image.items()):
                if items is None:
                    continue
                if not isinstance(items, list):
                    return None
                got = _items([items] if _is_box(items) else items, idx)
                if got is None:
                    return None
                out += got
            return out
        for key in LIST_KEYS:
            if key in value:
                return _collect(value[key])
        single = _item(value, None)
        return [single] if single else None
    if isinstance(value, list):
        return _items([value] if _is_box(value) else value, None)
    return None


def parse_answer(text: str, geometry: PairGeometry, box_format: BoxFormat, merged: bool, family: bool = False) -> Parsed:
    """A reply into `[{"image": 0|1, "group": g, "bbox": [x1, y1, x2, y2], "score": s}]` in each
    image's absolute pixels, or a parse error (`empty_response`, `no_json_found`, `bad_schema`,
    `image_not_given`; in a `family`'s run, `wrong_syntax` for a box in a family's tokens)."""
    if not text or not text.strip():
        return Parsed(error=status.EMPTY_RESPONSE)
    wrong = wrong_syntax(text, "json") if family else None
    if wrong:
        return Parsed(error=wrong)
    try:
        value = find_json(text)
    except LookupError:
        return Parsed(error=status.NO_JSON_FOUND)
    items = _collect(value)
    if items is None:
        return Parsed(error=status.BAD_SCHEMA)
    return _place(items, geometry, box_format, merged)


def parse_grounding_answer(text: str, geometry: PairGeometry, merged: bool, syntax: Syntax, box_format: BoxFormat) -> Parsed:
    """A reply in a family's token syntax (contract/grounding.py: `Image N:` lines, `group N`
    labels, boxes in `box_format`) into the same answer as `parse_answer`, so that the same boxes
    score the same in either syntax; or `empty_response`, `wrong_syntax`, `no_grounding_found`,
    `bad_grounding`, `image_not_given`. Boxes on a line of an image the pair lacks (`Image 3:`) are
    dropped, as JSON's `image_3` key is; a box without a group is group 1."""
    found = read_reply(text, syntax)
    if isinstance(found, str):
        return Parsed(error=found)
    if not found.boxes and not found.says_none:
        return Parsed(error=status.NO_GROUNDING_FOUND)
    items: list[Item] = []
    for b in found.boxes:
        if b.group is not None and b.group > GROUP_MAX:
            return Parsed(error=status.BAD_GROUNDING)
        if b.image is not None and b.image not in (1, 2):
            continue
        group = b.group if b.group is not None and b.group >= 1 else 1
        items.append((None if b.image is None else b.image - 1, group, list(b.box), 1.0))
    return _place(items, geometry, box_format, merged)


def _place(items: list[Item], geometry: PairGeometry, box_format: BoxFormat, merged: bool) -> Parsed:
    """Answer items in each image's absolute pixels (merged: each box to the image holding its
    centre); `image_not_given` for a sequence-mode box without its image."""
    out = []
    for image, group, raw, score in items:
        if merged:
            cw, ch = geometry.canvas
            x1, y1, x2, y2 = to_absolute(raw, box_format, cw, ch, geometry.seen((cw, ch)))
            image = _owner((x1 + x2) / 2, geometry)
            dx = 0.0 if image == 0 else geometry.offset
            w, h = geometry.sizes[image]
            box = [min(max(x1 - dx, 0.0), w), min(y1, h), min(max(x2 - dx, 0.0), w), min(y2, h)]
        else:
            if image is None:
                return Parsed(error=status.IMAGE_NOT_GIVEN)
            w, h = geometry.sizes[image]
            box = list(to_absolute(raw, box_format, w, h, geometry.seen((w, h))))
        out.append({"image": image, "group": group, "bbox": box, "score": score})
    return Parsed(answer=out)


def _owner(cx: float, geometry: PairGeometry) -> int:
    """Which image a canvas x belongs to; inside the band, the nearer image."""
    left_edge = geometry.sizes[0][0]
    if cx < left_edge:
        return 0
    if cx >= geometry.offset:
        return 1
    return 0 if cx - left_edge < geometry.offset - cx else 1
