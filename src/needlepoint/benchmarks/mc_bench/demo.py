"""The MC-Bench demo set: generated image pairs in the release layout (`mc-bench_v0.2_val.json`
beside `mc-bench_images/`), all three prompt styles, negatives and multi-group cases; and the
simulated model's answers to it, with some of a real model's mistakes."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from needlepoint.core.drawing import COLOURS, place_boxes, render
from needlepoint.core.files import write_atomic

SIZES = ((400, 300), (360, 360), (420, 280))
PAIRS = 24
MISTAKES = {4: "wrong_group", 7: "missed_image", 5: "box_on_negative", 9: "extra_box", 13: "prose"}


def _case(i: int, rng: random.Random) -> dict[str, Any]:
    """One description: its style, text and, per image, shapes and the GT boxes by group."""
    kind = rng.choice(("square", "circle"))
    colours = rng.sample(list(COLOURS), 4)
    images = []
    style = ("Referring", "Comparison", "Reasoning")[i % 3]
    negative = i % 6 == 5
    multi = style == "Comparison" and i % 2 == 0 and not negative
    for position in range(2):
        w, h = SIZES[(i + position) % len(SIZES)]
        boxes = place_boxes(rng, w, h, 5)
        shapes, gt = [], []
        for j, b in enumerate(boxes):
            if negative:
                colour = colours[1 + j % 3]
            elif multi:
                colour = colours[j % 3] if j < 4 else colours[3]
            else:
                colour = colours[0] if j < 1 + (i + position) % 2 else colours[1 + j % 3]
            shapes.append((b, colour, kind))
            if not negative and (colour == colours[0] or (multi and colour == colours[1])):
                gt.append((b, 1 if colour == colours[0] else 2))
        images.append({"size": (w, h), "shapes": shapes, "gt": gt})
    if multi:
        text = f"{kind}s of the same colour in both images, one group per colour ({colours[0]} and {colours[1]}) (pair {i})"
    elif style == "Referring":
        text = f"the {colours[0]} {kind}s (pair {i})"
    elif style == "Comparison":
        text = f"the {kind}s whose colour is {colours[0]} in both pictures (pair {i})"
    else:
        text = f"the {kind}s painted like a ripe {'tomato' if colours[0] == 'red' else colours[0] + ' fruit'} (pair {i})"
    return {"style": style, "text": text, "negative": negative, "images": images}


def write_release(folder: Path, pairs: int = PAIRS, seed: int = 3) -> tuple[Path, list[dict[str, Any]]]:
    """The release file and images; returns the folder and the generated cases."""
    rng = random.Random(seed)
    images_dir = folder / "mc-bench_images" / "demo"
    images_dir.mkdir(parents=True, exist_ok=True)
    release: dict[str, Any] = {
        "info": {"description": "needlepoint demo set"},
        "descriptions": [],
        "images": [],
        "annotations": [],
        "categories": [{"id": k, "name": f"group {k}"} for k in range(1, 8)],
    }
    cases = []
    for i in range(pairs):
        case = _case(i, rng)
        cases.append(case)
        ids = [2 * i, 2 * i + 1]
        release["descriptions"].append(
            {
                "id": i,
                "images_id": ids,
                "text": case["text"],
                "positive_sample": not case["negative"],
                "text_style": case["style"],
            }
        )
        for position, image in enumerate(case["images"]):
            w, h = image["size"]
            name = f"demo/pair{i:03d}_{position}.jpg"
            write_atomic(folder / "mc-bench_images" / name, render(w, h, image["shapes"]))
            release["images"].append(
                {"id": ids[position], "text_id": i, "inter_img_id": position, "file_name": name, "height": h, "width": w}
            )
            for b, group in image["gt"]:
                x1, y1, x2, y2 = b
                release["annotations"].append(
                    {
                        "id": len(release["annotations"]),
                        "image_id": ids[position],
                        "text_id": i,
                        "category_id": group,
                        "area": (x2 - x1) * (y2 - y1),
                        "bbox": [x1, y1, x2 - x1, y2 - y1],
                        "iscrowd": 0,
                    }
                )
    write_atomic(folder / "mc-bench_v0.2_val.json", json.dumps(release))
    return folder, cases


def _norm(b: list[float], size: tuple[int, int]) -> list[int]:
    w, h = size
    return [round(b[0] / w * 1000), round(b[1] / h * 1000), round(b[2] / w * 1000), round(b[3] / h * 1000)]


def answers_for(case: dict[str, Any], i: int) -> list[str]:
    """The simulated model's replies (norm_1000_xyxy, sequence mode) to one case."""
    per_image: dict[str, list[dict[str, Any]]] = {}
    mistake = MISTAKES.get(i)
    for position, image in enumerate(case["images"]):
        items = []
        for b, group in image["gt"]:
            g = (3 - group if group in (1, 2) else group) if mistake == "wrong_group" else group
            items.append({"group": g, "bbox_2d": _norm(b, image["size"])})
        if mistake == "missed_image" and position == 1:
            items = []
        if mistake in ("box_on_negative", "extra_box") and position == 0:
            b = image["shapes"][-1][0]
            items.append({"group": 1, "bbox_2d": _norm(b, image["size"])})
        per_image[f"image_{position + 1}"] = items
    answer = "```json\n" + json.dumps(per_image) + "\n```"
    if mistake == "prose":
        return ["I can see several shapes in both images; the matching ones are described above.", answer]
    return [answer]


def build(folder: Path) -> tuple[Path, dict[str, Any], dict[str, list[Any]]]:
    """The demo set on disk, the run options, and the simulated model's script."""
    from needlepoint.benchmarks.mc_bench.benchmark import McBench
    from needlepoint.models.simulated import script_key

    _, cases = write_release(folder)
    options: dict[str, Any] = {"box_format": "norm_1000_xyxy", "input_mode": "sequence"}
    bench = McBench(**options)
    script = {}
    for i, sample in enumerate(bench.load(folder)):
        script[script_key(bench.prompt(sample))] = answers_for(cases[i], i)
    return folder, options, script
