"""The RefCOCO demo set: drawn shapes with referring expressions in the converted JSONL layout
(one file per split, `image`, `sent`, `bbox`, `width`, `height`), and the simulated model's
answers in InternVL's syntax, with a fixed pattern of mistakes that the two readings score
differently (a 0-1 box, prose without a box)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.refcoco.data import SPLITS
from needlepoint.core.drawing import COLOURS, place_boxes, render
from needlepoint.core.files import write_atomic, write_lines

__all__ = ["OPTIONS", "answer_for", "build", "make_rows", "write_release"]

WIDTH, HEIGHT = 320, 240
PER_SPLIT = 3
POSITIONS = ("leftmost", "rightmost", "topmost", "lowest")
OPTIONS: dict[str, Any] = {"model_family": "internvl"}


def _target(boxes: list[list[float]], position: str) -> int:
    keys = {"leftmost": lambda b: b[0], "rightmost": lambda b: -b[2], "topmost": lambda b: b[1], "lowest": lambda b: -b[3]}
    return min(range(len(boxes)), key=lambda i: keys[position](boxes[i]))


def make_rows(per_split: int = PER_SPLIT, seed: int = 11) -> dict[str, list[dict[str, Any]]]:
    """Each split's rows in the converted layout, with the drawing and the other boxes kept in
    `_`-prefixed keys (not written)."""
    rng = random.Random(seed)
    out: dict[str, list[dict[str, Any]]] = {}
    n = 0
    for split in SPLITS:
        rows = out.setdefault(split, [])
        for _ in range(per_split):
            colour = rng.choice(list(COLOURS))
            kind = rng.choice(("square", "circle"))
            boxes = place_boxes(rng, WIDTH, HEIGHT, 3 + n % 3)
            position = POSITIONS[n % len(POSITIONS)]
            target = _target(boxes, position)
            rows.append(
                {
                    "image": f"images/COCO_demo_{n:012d}.jpg",
                    "sent": f"the {position} {colour} {kind}",
                    "bbox": boxes[target],
                    "width": WIDTH,
                    "height": HEIGHT,
                    "_jpg": render(WIDTH, HEIGHT, [(b, colour, kind) for b in boxes]),
                    "_other": boxes[(target + 1) % len(boxes)],
                }
            )
            n += 1
    return out


def write_release(folder: Path, rows: dict[str, list[dict[str, Any]]]) -> Path:
    """The rows as converted JSONL files, one per split, with their images under `images/`."""
    for split, lines in rows.items():
        for row in lines:
            write_atomic(folder / row["image"], row["_jpg"])
        write_lines(folder / f"{split}.jsonl", [{k: v for k, v in r.items() if not k.startswith("_")} for r in lines])
    return folder


def _norm(box: list[float]) -> list[int]:
    """A pixel box on InternVL's 0-1000 scale, rounded as its training data is."""
    return [
        round(box[0] / WIDTH * 1000),
        round(box[1] / HEIGHT * 1000),
        round(box[2] / WIDTH * 1000),
        round(box[3] / HEIGHT * 1000),
    ]


def answer_for(row: dict[str, Any], i: int) -> str:
    """The simulated model's reply to one expression, by a fixed pattern of mistakes."""
    kind = i % 8
    if kind == 3:  # a look-alike: wrong under both readings
        return f"{row['sent']}[[{', '.join(str(v) for v in _norm(row['_other']))}]]"
    if kind == 5:  # fractions of the image: the official reading takes them (sum < 4), the corrected one reads 0-1000
        x1, y1, x2, y2 = row["bbox"]
        return f"[[{x1 / WIDTH:.3f}, {y1 / HEIGHT:.3f}, {x2 / WIDTH:.3f}, {y2 / HEIGHT:.3f}]]"
    if kind == 7:  # prose: the official zero box, the corrected parse error
        return "It is the one next to the others."
    return f"{row['sent']}[[{', '.join(str(v) for v in _norm(row['bbox']))}]]"


def build(folder: Path) -> tuple[Path, dict[str, Any], dict[str, list[Any]]]:
    """The demo set on disk, the run options, and the simulated model's script."""
    from needlepoint.benchmarks.refcoco.benchmark import RefCoco
    from needlepoint.models.simulated import script_key

    rows = make_rows()
    write_release(folder, rows)
    bench = RefCoco(**OPTIONS)
    flat = [row for split in SPLITS for row in rows[split]]
    script = {script_key(bench.prompt(s)): [answer_for(row, i)] for i, (s, row) in enumerate(zip(bench.load(folder), flat))}
    return folder, dict(OPTIONS), script
