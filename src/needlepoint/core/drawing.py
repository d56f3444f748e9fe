"""Deterministic drawings for the demo and the tests: coloured shapes on plain backgrounds."""

from __future__ import annotations

import io
import random
from collections.abc import Sequence

COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 200, 30),
    "purple": (140, 60, 170),
    "orange": (240, 130, 20),
}


def place_boxes(
    rng: random.Random, width: int, height: int, count: int, min_side: int = 24, max_side: int = 70
) -> list[list[float]]:
    """Up to `count` non-overlapping xyxy boxes inside the image."""
    boxes: list[list[float]] = []
    for _ in range(count * 30):
        if len(boxes) == count:
            break
        w, h = rng.randint(min_side, max_side), rng.randint(min_side, max_side)
        x, y = rng.randint(0, width - w - 1), rng.randint(0, height - h - 1)
        cand = [float(x), float(y), float(x + w), float(y + h)]
        if all(cand[2] + 4 < b[0] or b[2] + 4 < cand[0] or cand[3] + 4 < b[1] or b[3] + 4 < cand[1] for b in boxes):
            boxes.append(cand)
    return boxes


def render(
    width: int,
    height: int,
    shapes: Sequence[tuple[Sequence[float], str, str]],
    background: tuple[int, int, int] = (245, 245, 240),
    fmt: str = "JPEG",
) -> bytes:
    """An image with each (box, colour, kind) drawn; kind is "square" or "circle"."""
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (width, height), background)
    draw = ImageDraw.Draw(im)
    for box, colour, kind in shapes:
        rgb = COLOURS[colour]
        if kind == "circle":
            draw.ellipse(box, fill=rgb)
        else:
            draw.rectangle(box, fill=rgb)
    out = io.BytesIO()
    im.save(out, format=fmt, quality=90) if fmt == "JPEG" else im.save(out, format=fmt)
    return out.getvalue()
