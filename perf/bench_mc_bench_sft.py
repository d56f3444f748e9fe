"""Speed and memory of `needlepoint build mc_bench_sft` on a COCO-train-sized annotation file.

    python perf/bench_mc_bench_sft.py [--work /tmp/sft_bench] [--samples 5300,53000]

Writes (once) a synthetic COCO-train-like file with make_coco_train_like.py, RefCOCO-sized
referring expressions for it (50,000 refs of random annotations, 3 sentences each), and an images
folder of empty files (the build only checks that each used image exists; it opens images only for
--exclude), runs the command for each sample count in its own process, and reports wall time,
CPU time (user + sys) and peak RSS (`os.wait4`). Then measures decontamination hashing (SHA-256
+ dHash + pHash) on rendered 640x480 JPEGs and projects it to COCO train's 118,287 images.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from measure import measured

REPO = Path(__file__).resolve().parents[1]


def hashing_rate(folder: Path, count: int = 300) -> float:
    """Images hashed per second (decontamination's per-image work)."""
    import numpy as np
    from PIL import Image, ImageDraw

    from needlepoint.benchmarks.mc_bench.sft.dedup import hash_all

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    paths = []
    for i in range(count):
        noise = np.random.default_rng(i).integers(0, 255, (60, 80, 3), dtype=np.uint8)
        im = Image.fromarray(noise).resize((640, 480), Image.Resampling.BILINEAR)
        ImageDraw.Draw(im).rectangle([rng.randint(0, 300), rng.randint(0, 200), 500, 400], fill=(200, 30, 30))
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=90)
        p = folder / f"{i}.jpg"
        p.write_bytes(buf.getvalue())
        paths.append(p)
    start = time.perf_counter()
    got = list(hash_all(paths))
    assert len(got) == count
    return count / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/sft_bench"))
    ap.add_argument("--samples", default="5300,53000")
    ns = ap.parse_args()
    ns.work.mkdir(parents=True, exist_ok=True)
    coco, images = ns.work / "instances_train_like.json", ns.work / "images"
    if not coco.exists():
        subprocess.run([sys.executable, str(REPO / "perf" / "make_coco_train_like.py"), str(coco)], check=True)
    refs = ns.work / "refs_train_like.json"
    if not refs.exists():
        rng = random.Random(1)
        ids = rng.sample(range(1, 860_002), 50_000)
        refs.write_text(
            json.dumps(
                [
                    {"ann_id": a, "split": "train", "sentences": [{"sent": f"the object number {a} seen {k}"} for k in range(3)]}
                    for a in ids
                ]
            ),
            encoding="utf-8",
        )
    last = images / "000000118287.jpg"
    if not last.exists() or last.stat().st_size == 0:  # the build decodes every image it draws
        from PIL import Image

        images.mkdir(exist_ok=True)
        tiny = [ns.work / f"tiny{k}.jpg" for k in range(4)]  # hard links to a few small JPEGs (a file has at most 65,000)
        for k, path in enumerate(tiny):
            Image.new("RGB", (64, 48), (120, 90, 60 + k)).save(path, quality=80)
        for i in range(1, 118_288):
            (images / f"{i:012d}.jpg").unlink(missing_ok=True)
            os.link(tiny[i % 4], images / f"{i:012d}.jpg")
    print(f"annotation file: {coco.stat().st_size / 1e6:.0f} MB; load average before: {os.getloadavg()[0]:.1f}")
    print("| samples | wall (s) | CPU user+sys (s) | peak RSS (MB) |\n|---:|---:|---:|---:|")
    for n in [int(x) for x in ns.samples.split(",")]:
        shutil.rmtree(ns.work / f"out_{n}", ignore_errors=True)  # a build never overwrites another
        wall, cpu, rss = measured(
            [
                sys.executable,
                "-m",
                "needlepoint.cli",
                "build",
                "mc_bench_sft",
                "--coco",
                str(coco),
                "--images",
                str(images),
                "--refs",
                str(refs),
                "--out",
                str(ns.work / f"out_{n}"),
                "--samples",
                str(n),
                "--box-format",
                "norm_1000_xyxy",
                "--format",
                "sharegpt",
                "--seed",
                "0",
            ]
        )
        print(f"| {n} | {wall:.1f} | {cpu:.1f} | {rss:.0f} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    sys.path.insert(0, str(REPO / "src"))
    rate = hashing_rate(ns.work / "hash_images")
    print(
        f"decontamination hashing: {rate:.0f} images/s (640x480 JPEG); COCO train's 118,287 images: about {118_287 / rate / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
