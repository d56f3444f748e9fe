"""Write a synthetic COCO-format annotation file the size and shape of COCO train2017's
instances file (118,287 images, 860,001 annotations, 80 categories in 12 supercategories,
polygon segmentations, about 1% crowd annotations with RLE counts; about 450 MB).

    python perf/make_coco_train_like.py /tmp/instances_train_like.json [--scale 1.0]

Used by bench_mc_bench_sft.py; no images are written (the builder reads image sizes from the
annotation file and opens images only for --exclude).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

IMAGES, ANNOTATIONS = 118_287, 860_001
SUPERCATEGORIES = (
    "person",
    "vehicle",
    "outdoor",
    "animal",
    "accessory",
    "sports",
    "kitchen",
    "food",
    "furniture",
    "electronic",
    "appliance",
    "indoor",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of COCO train's size")
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args()
    rng = random.Random(ns.seed)
    n_images, n_anns = int(IMAGES * ns.scale), int(ANNOTATIONS * ns.scale)
    cats = [{"id": i + 1 + i // 10, "name": f"thing {i + 1}", "supercategory": SUPERCATEGORIES[i * 12 // 80]} for i in range(80)]
    with ns.out.open("w", encoding="utf-8") as fh:
        fh.write('{"info": {"description": "synthetic COCO-train-like"}, "licenses": [], "images": [')
        sizes = []
        for i in range(n_images):
            w, h = rng.choice([(640, 480), (480, 640), (640, 427), (500, 375), (640, 360)])
            sizes.append((w, h))
            sep = "," if i else ""
            fh.write(
                sep
                + json.dumps(
                    {
                        "license": 1,
                        "file_name": f"{i + 1:012d}.jpg",
                        "coco_url": "",
                        "height": h,
                        "width": w,
                        "date_captured": "2013-11-14 11:18:45",
                        "flickr_url": "",
                        "id": i + 1,
                    }
                )
            )
        fh.write('], "annotations": [')
        for a in range(n_anns):
            image = rng.randrange(n_images)
            w, h = sizes[image]
            bw, bh = rng.uniform(2, w / 2), rng.uniform(2, h / 2)
            x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
            cat = cats[min(int(rng.expovariate(1 / 12)), 79)]["id"]
            crowd = rng.random() < 0.01
            if crowd:
                seg: object = {"counts": [rng.randrange(1, 400) for _ in range(60)], "size": [h, w]}
            else:
                seg = [
                    [
                        round(rng.uniform(x, x + bw), 2) if k % 2 == 0 else round(rng.uniform(y, y + bh), 2)
                        for k in range(2 * rng.randrange(6, 40))
                    ]
                ]
            ann = {
                "segmentation": seg,
                "area": round(bw * bh * 0.6, 4),
                "iscrowd": int(crowd),
                "image_id": image + 1,
                "bbox": [round(x, 2), round(y, 2), round(bw, 2), round(bh, 2)],
                "category_id": cat,
                "id": a + 1,
            }
            fh.write(("," if a else "") + json.dumps(ann))
        fh.write('], "categories": ' + json.dumps(cats) + "}")


if __name__ == "__main__":
    main()
