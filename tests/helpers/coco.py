"""A small COCO release on disk for the SFT builder's tests: instances.json, refs.json and JPEGs
with the boxes drawn, a crowd annotation and degenerate boxes among them."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

CATEGORIES: list[dict[str, Any]] = [
    {"id": 1, "name": "cat", "supercategory": "animal"},
    {"id": 2, "name": "dog", "supercategory": "animal"},
    {"id": 3, "name": "car", "supercategory": "vehicle"},
    {"id": 4, "name": "bus", "supercategory": "vehicle"},
    {"id": 7, "name": "apple", "supercategory": "food"},
]
SIZES = [(320, 240), (240, 320), (300, 300), (400, 260), (256, 192)]
CROWD = (1, 7)  # (image id, category id) of the crowd annotation
DEGENERATE = (2, 4)


def render_jpeg(rng: random.Random, w: int, h: int, boxes: Sequence[tuple[Sequence[float], tuple[int, int, int]]]) -> bytes:
    """A w x h JPEG of smooth noise with the boxes (xywh) filled in their colours."""
    noise = np.random.default_rng(rng.randrange(1 << 30)).integers(0, 255, (h // 8, w // 8, 3), dtype=np.uint8)
    im = Image.fromarray(noise).resize((w, h), Image.Resampling.BILINEAR)
    draw = ImageDraw.Draw(im)
    for (x, y, bw, bh), colour in boxes:
        draw.rectangle([x, y, x + bw - 1, y + bh - 1], fill=colour)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=92)
    return buf.getvalue()


def make_coco(folder: Path, n_images: int = 14, seed: int = 5) -> dict[str, Any]:
    """instances.json, images/ and refs.json under `folder`; returns the instances dict."""
    rng = random.Random(seed)
    (folder / "images" / "train").mkdir(parents=True)
    data: dict[str, Any] = {"images": [], "annotations": [], "categories": CATEGORIES}
    refs = []
    colours = {1: (250, 20, 20), 2: (20, 250, 20), 3: (20, 20, 250), 4: (250, 250, 20), 7: (250, 20, 250)}
    for i in range(1, n_images + 1):
        w, h = SIZES[i % len(SIZES)]
        drawn = []
        for _ in range(rng.randint(1, 4)):
            cat = rng.choice([1, 1, 2, 3, 3, 4, 7])
            bw, bh = rng.randint(30, w // 3), rng.randint(30, h // 3)
            x, y = rng.randint(0, w - bw), rng.randint(0, h - bh)
            aid = 1000 + len(data["annotations"])
            data["annotations"].append(
                {
                    "id": aid,
                    "image_id": i,
                    "category_id": cat,
                    "bbox": [x + 0.25, y + 0.5, bw - 0.5, bh - 0.75],
                    "area": bw * bh,
                    "iscrowd": 0,
                    "segmentation": [[x, y, x + bw, y, x + bw, y + bh]],
                }
            )
            drawn.append(([x, y, bw, bh], colours[cat]))
            if rng.random() < 0.5:
                refs.append(
                    {
                        "ann_id": aid,
                        "image_id": i,
                        "split": "train",
                        "sentences": [{"sent": f"the {CATEGORIES[0]['name']} box number {aid}"}],
                    }
                )
        name = f"train/{i:012d}.jpg"
        (folder / "images" / name).write_bytes(render_jpeg(rng, w, h, drawn))
        data["images"].append({"id": i, "file_name": name, "width": w, "height": h})
    extra = [
        {"id": 1, "image_id": CROWD[0], "category_id": CROWD[1], "bbox": [5, 5, 60, 60], "iscrowd": 1},
        {"id": 2, "image_id": DEGENERATE[0], "category_id": DEGENERATE[1], "bbox": [10, 10, 0, 30], "iscrowd": 0},
        {"id": 3, "image_id": 3, "category_id": 3, "bbox": [10, 10, 0.5, 30], "iscrowd": 0},
    ]
    data["annotations"] += extra
    refs.append({"ann_id": 1, "split": "train", "sentences": [{"sent": "the crowd of apples"}]})
    refs.append({"ann_id": 1000, "split": "val", "sentences": [{"sent": "a val split sentence"}]})
    (folder / "instances.json").write_text(json.dumps(data), encoding="utf-8")
    (folder / "refs.json").write_text(json.dumps(refs), encoding="utf-8")
    return data


def sft_build_args(folder: Path, out: Path, *extra: str, samples: int = 120) -> list[str]:
    """`needlepoint build mc_bench_sft` over the COCO set `make_coco(folder)` wrote, into `out`."""
    return [
        "build",
        "mc_bench_sft",
        "--coco",
        str(folder / "instances.json"),
        "--images",
        str(folder / "images"),
        "--out",
        str(out),
        "--samples",
        str(samples),
        "--box-format",
        "norm_1000_xyxy",
        "--seed",
        "0",
        "--no-progress",
        *extra,
    ]
