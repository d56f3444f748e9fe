"""The Ref-Adv-s demo set: shapes among same-colour look-alikes, in the release's parquet layout,
and the simulated model's answers to it (right, wrong, malformed, prose, wrong coordinate scale)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from needlepoint.core.drawing import COLOURS, place_boxes, render
from needlepoint.core.files import write_parquet

SIZE = 30
WIDTH, HEIGHT = 400, 300
POSITIONS = ("leftmost", "rightmost", "topmost", "lowest")


def _target(boxes: list[list[float]], position: str) -> int:
    keys = {
        "leftmost": lambda b: b[0],
        "rightmost": lambda b: -b[2],
        "topmost": lambda b: b[1],
        "lowest": lambda b: -b[3],
    }
    return min(range(len(boxes)), key=lambda i: keys[position](boxes[i]))


def make_rows(n: int = SIZE, seed: int = 7) -> list[dict[str, Any]]:
    """Rows in the release's columns, images included as parquet structs."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        colour = rng.choice(list(COLOURS))
        kind = rng.choice(("square", "circle"))
        count = 3 + i % 7
        boxes = place_boxes(rng, WIDTH, HEIGHT, count)
        position = POSITIONS[i % len(POSITIONS)]
        target = _target(boxes, position)
        negation = i % 3 == 0
        caption = (
            f"the {position} {colour} {kind}, not one of the others"
            if negation
            else f"the {position} {colour} {kind} in the picture"
        )
        image = render(WIDTH, HEIGHT, [(b, colour, kind) for b in boxes])
        rows.append(
            {
                "image": {"bytes": image, "path": f"demo_{i:04d}.jpg"},
                "file_name": f"demo_{i:04d}.jpg",
                "normal_caption": caption + f" (case {i})",
                "solution": boxes[target],
                "width": WIDTH,
                "height": HEIGHT,
                "image_source": "coco_val2017" if i % 2 else "openimages",
                "human_authored": i % 4 != 0,
                "use_negation": negation,
                "distractors": json.dumps([f"{colour} {kind} {j}" for j in range(len(boxes) - 1)]),
                "_boxes": boxes,
                "_target": target,
            }
        )
    return rows


def answers_for(row: dict[str, Any], i: int) -> list[Any]:
    """The simulated model's replies to one case, by a fixed pattern of mistakes."""
    gt = row["solution"]
    boxes, target = row["_boxes"], row["_target"]
    good = json.dumps({"bbox_2d": [round(v) for v in gt], "label": "target"})
    kind = i % 10
    if kind == 3:  # a look-alike distractor
        other = boxes[(target + 1) % len(boxes)]
        return [f"```json\n[{json.dumps({'bbox_2d': other})}]\n```"]
    if kind == 5:  # malformed JSON, then the repair turn fixes it
        return [
            f'```json\n{{"bbox_2d": [{gt[0]}, {gt[1]}, {gt[2]}\n```',
            f'```json\n{{"bboxes": [{[round(v) for v in gt]}]}}\n```',
        ]
    if kind == 7:  # prose only, the repair turn fixes it
        return ["The object is the one on the side of the picture.", f"```json\n{good}\n```"]
    if kind == 8:  # 0-1000 coordinates while the run expects absolute pixels
        norm = [
            round(gt[0] / WIDTH * 1000),
            round(gt[1] / HEIGHT * 1000),
            round(gt[2] / WIDTH * 1000),
            round(gt[3] / HEIGHT * 1000),
        ]
        return [f"```json\n{json.dumps([{'bbox_2d': norm}])}\n```"]
    if kind == 9:  # loose box: hit at 0.5, miss at 0.9
        loose = [gt[0] - 6, gt[1] - 6, gt[2] + 6, gt[3] + 6]
        return [f"Here it is: {json.dumps({'bbox': loose})}"]
    return [f"```json\n[{good}]\n```"]


def write_release(folder: Path, rows: list[dict[str, Any]]) -> Path:
    """Write rows as the Hugging Face parquet layout (data/train-*.parquet)."""
    import pyarrow as pa

    public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    write_parquet(folder / "data" / "train-00000-of-00001.parquet", pa.Table.from_pylist(public), row_group_size=100)
    return folder


def build(folder: Path) -> tuple[Path, dict[str, Any], dict[str, list[Any]]]:
    """The demo set on disk, the run options, and the simulated model's script."""
    from needlepoint.benchmarks.ref_adv import RefAdv
    from needlepoint.models.simulated import script_key

    rows = make_rows()
    write_release(folder, rows)
    bench = RefAdv(box_format="abs_xyxy", prompt_mode="direct")
    script = {}
    for i, (sample, row) in enumerate(zip(bench.load(folder), rows)):
        script[script_key(bench.prompt(sample))] = answers_for(row, i)
    return folder, {"box_format": "abs_xyxy", "prompt_mode": "direct"}, script
