"""Time of the bootstrap intervals of an MC-Bench run: 1,000 resamples of a 2,000-sample run, every
Table 2 number of the official and the corrected protocol (Acc, AP50, per style), on synthetic data
this script makes (a release-shaped annotation file and a middling model's results).

    python perf/bench_intervals.py [--samples 2000] [--resamples 1000] [--runs 3] [--seed 0]

Rows, each the median of --runs runs, in one process after a warm-up:

- the full scorer once (`score_results`: official + 3 per-style runs + corrected + analyses), for scale;
- building the resampler: matching once for both protocols (official on all samples and on each
  style's samples, with its regrouping; corrected with its group assignment);
- the bootstrap: `bootstrap_interval(resampler, resamples)`, all 16 numbers of both protocols;
- the same draws split by protocol: the official numbers alone, the corrected numbers alone.

Target: building plus the bootstrap under 10 s on 2 cores. Prints a Markdown table, the command,
the date and the machine; the intervals of official and corrected AP50 are printed so the timed
work is known to be the real one.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np  # noqa: E402

from needlepoint.benchmarks.mc_bench.groundtruth import GroundTruth, groundtruth_from_json  # noqa: E402
from needlepoint.benchmarks.mc_bench.resample import McResampler  # noqa: E402
from needlepoint.benchmarks.mc_bench.scoring import score_results  # noqa: E402
from needlepoint.stats import bootstrap_interval, draw  # noqa: E402

STYLES = ("Referring", "Comparison", "Reasoning")


def synthetic_release(samples: int, seed: int) -> dict[str, Any]:
    """A release-shaped annotation file: `samples` descriptions over two images each, about 1.6
    boxes per sample in up to 3 groups, a fifth of the samples negative."""
    rng = random.Random(seed)
    descriptions, images, annotations = [], [], []
    box_id = 0
    for i in range(samples):
        positive = rng.random() > 0.2
        descriptions.append(
            {
                "id": i,
                "images_id": [2 * i, 2 * i + 1],
                "text": f"thing {i}",
                "positive_sample": positive,
                "text_style": STYLES[i % 3],
            }
        )
        for j in (0, 1):
            images.append(
                {"id": 2 * i + j, "text_id": i, "inter_img_id": j, "file_name": f"syn/{i}_{j}.jpg", "height": 480, "width": 640}
            )
        if not positive:
            continue
        groups = rng.choice([1, 1, 1, 2, 3])
        for _ in range(rng.choice([1, 1, 2, 2, 3])):
            w, h = rng.uniform(10, 300), rng.uniform(10, 300)
            x, y = rng.uniform(0, 640 - w), rng.uniform(0, 480 - h)
            annotations.append(
                {
                    "id": box_id,
                    "image_id": 2 * i + rng.randint(0, 1),
                    "text_id": i,
                    "category_id": rng.randint(1, groups),
                    "area": w * h,
                    "bbox": [x, y, w, h],
                    "iscrowd": 0,
                }
            )
            box_id += 1
    categories = [{"id": c, "name": f"group {c}"} for c in range(1, 8)]
    return {"info": {}, "descriptions": descriptions, "images": images, "annotations": annotations, "categories": categories}


def synthetic_results(gt: GroundTruth, seed: int) -> list[dict[str, Any]]:
    """A middling model: most boxes found with jitter, some groups wrong, false boxes, tied scores."""
    rng = random.Random(seed + 1)
    out: list[dict[str, Any]] = []
    for b in gt.boxes:
        if rng.random() < 0.25:
            continue
        x, y, w, h = b.bbox
        j = rng.choice([0, 5, 20, 60])
        out.append(
            {
                "image_id": b.image_id,
                "category_id": b.category_id if rng.random() < 0.85 else rng.randint(1, 3),
                "bbox": [x + rng.uniform(-j, j), y + rng.uniform(-j, j), w, h],
                "score": round(rng.random(), 2),
            }
        )
    for _ in range(len(gt.samples) // 2):
        im = rng.choice(gt.images)
        out.append(
            {
                "image_id": im.id,
                "category_id": rng.randint(1, 2),
                "bbox": [rng.uniform(0, 400), rng.uniform(0, 300), rng.uniform(10, 200), rng.uniform(10, 200)],
                "score": rng.choice([0.3, 0.6, 1.0]),
            }
        )
    return out


CPU: list[float] = []  # the process CPU time of each median_time call, beside its wall time


def median_time(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """Median wall time of `fn` over `runs` runs, and its last result; the median CPU time of the
    process goes to CPU (numpy runs these single-threaded, so on a busy machine CPU time is what
    the work costs and wall time what the other jobs left of it)."""
    times, cpu, out = [], [], None
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    CPU.append(statistics.median(cpu))
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    gt = groundtruth_from_json(synthetic_release(args.samples, args.seed), "synthetic")
    results = synthetic_results(gt, args.seed)
    ids = [s.id for s in gt.samples]
    score_results(gt, results, ids)  # warm-up
    t_score, _ = median_time(lambda: score_results(gt, results, ids), args.runs)
    t_build, resampler = median_time(lambda: McResampler(gt, results, ids), args.runs)
    t_boot, intervals = median_time(lambda: bootstrap_interval(resampler, args.resamples, seed=args.seed), args.runs)
    idx = draw(len(ids), args.resamples, args.seed, resampler.strata)
    w = np.ones((1, len(ids)))
    rows = []
    for name, part in (("official", "official"), ("corrected", "corrected")):

        def one(part: str = part) -> None:
            for start in range(0, len(idx), 1000):
                batch = idx[start : start + 1000]
                w = np.bincount((batch + len(ids) * np.arange(len(batch))[:, None]).ravel(), minlength=len(batch) * len(ids))
                w = w.reshape(len(batch), len(ids)).astype(np.float64)
                if part == "official":
                    resampler._official_ap(w, None)
                    for st in resampler._styles:
                        resampler._official_ap(w, st)
                else:
                    resampler._corrected.aps(w)
                    for table in resampler._corrected_styles.values():
                        table.aps(w)

        rows.append((name, median_time(one, args.runs)[0]))
    del w

    print(
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()} "
        f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}), Python {platform.python_version()}, numpy {np.__version__}"
    )
    print(f"\n    python perf/bench_intervals.py --samples {args.samples} --resamples {args.resamples} --runs {args.runs}\n")
    print(f"{len(gt.samples)} samples, {len(gt.boxes)} GT boxes, {len(results)} predicted boxes; median of {args.runs} runs\n")
    c_score, c_build, c_boot, *c_rows = CPU
    print("| what | median wall s | median CPU s |\n|---|---:|---:|")
    print(f"| full scorer once (`score_results`, both protocols, for scale) | {t_score:.3f} | {c_score:.3f} |")
    print(f"| build the resampler (match once, both protocols) | {t_build:.3f} | {c_build:.3f} |")
    print(f"| **{args.resamples} resamples, all 16 numbers of both protocols** | **{t_boot:.3f}** | **{c_boot:.3f}** |")
    for (name, t), c in zip(rows, c_rows):
        print(f"| of which the AP50 numbers of the {name} protocol (overall + 3 styles) | {t:.3f} | {c:.3f} |")
    print(f"| **build + resamples** (target < 10 s) | **{t_build + t_boot:.3f}** | **{c_build + c_boot:.3f}** |")
    for name in ("official/ap50", "corrected/ap50", "corrected/acc"):
        iv = intervals[name]
        print(f"\n{name}: {iv.estimate:.4f} [{iv.lo:.4f}, {iv.hi:.4f}]" if iv else f"\n{name}: no interval")


if __name__ == "__main__":
    main()
