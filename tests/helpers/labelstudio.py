"""Label Studio's side of the round trip in the tests: rectangles as its annotations hold them
(percent of the image, with the image's size), built from boxes in pixels."""

from __future__ import annotations

from typing import Any


def ls_rectangle(box: list[float], size: tuple[float, float], to_name: str, label: str, from_name: str) -> dict[str, Any]:
    """One `rectanglelabels` result of a Label Studio annotation for a pixel box [x1, y1, x2, y2]."""
    w, h = size
    x1, y1, x2, y2 = box
    return {
        "type": "rectanglelabels",
        "from_name": from_name,
        "to_name": to_name,
        "original_width": w,
        "original_height": h,
        "image_rotation": 0,
        "value": {
            "x": 100 * x1 / w,
            "y": 100 * y1 / h,
            "width": 100 * (x2 - x1) / w,
            "height": 100 * (y2 - y1) / h,
            "rotation": 0,
            "rectanglelabels": [label],
        },
    }


def mc_results(answer: list[dict[str, Any]], sizes: Any) -> list[dict[str, Any]]:
    """An MC-Bench answer ({image, group, bbox} in pixels) as Label Studio results."""
    return [
        ls_rectangle(b["bbox"], sizes[b["image"]], f"image_{b['image'] + 1}", f"group {b['group']}", f"boxes_{b['image'] + 1}")
        for b in answer
    ]


def person_answers(samples: list[Any], truth: Any, person: int) -> dict[str, list[dict[str, Any]]]:
    """Made-up but plausible MC-Bench answers of person 0, 1, 2...: the ground-truth boxes, person
    k shifting every box by 3k pixels, dropping one box in (k + 3) and boxing image 2 of every
    fourth negative sample."""
    out: dict[str, list[dict[str, Any]]] = {}
    n = 0
    for s in samples:
        answer = []
        for b in truth.boxes:
            if b.image_id in s.image_ids:
                n += 1
                if person and n % (person + 3) == 0:
                    continue
                image = s.image_ids.index(b.image_id)
                w, h = s.geometry.sizes[image]
                x, y, bw, bh = b.bbox
                d = 3 * person
                box = [min(x + d, w - 2), min(y + d, h - 2), min(x + bw + d, w), min(y + bh + d, h)]
                answer.append({"image": image, "group": b.category_id, "bbox": box})
        if not answer and person and n % 4 == 0:
            w, h = s.geometry.sizes[1]
            answer.append({"image": 1, "group": 1, "bbox": [1.0, 2.0, w / 2, h / 2]})
        out[s.id] = answer
    return out
