"""MC-Bench bootstrap by image cluster, and tied scores (issue 41 items 4 and 5), on the real
annotations and the authors' perturbed results file.

    python perf/mc_bench_clusters_ties.py [--resamples 1000]

Prints: the clusters of shared image files; per unit (sample, image cluster) and metric the
estimate, the bootstrap mean, sd, how far the mean sits above the estimate in sds, the 95%
percentile interval and its width, and the seconds for the draws; then, with every score set to
1.0, official and corrected AP50 in the release's image numbering and under random renumberings
of the image ids (corrected: the mean over tie orders, which renumbering leaves unchanged).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from needlepoint.benchmarks.mc_bench.groundtruth import GroundTruth, groundtruth_from_json, load_groundtruth
from needlepoint.benchmarks.mc_bench.resample import McResampler, image_clusters
from needlepoint.benchmarks.mc_bench.scoring import read_results, score_results
from needlepoint.stats.bootstrap import draw, resampled

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "mc-bench"
METRICS = ("official/ap50", "corrected/ap50", "official/acc", "corrected/acc")


def renumbered(gt: GroundTruth, results: list[dict[str, Any]], seed: int) -> tuple[GroundTruth, list[dict[str, Any]]]:
    """The same annotations and results with the image ids permuted at random (file order kept)."""
    coco: dict[str, Any] = _release_json()
    ids = [im["id"] for im in coco["images"]]
    new = ids[:]
    random.Random(seed).shuffle(new)
    to = dict(zip(ids, new, strict=True))
    for im in coco["images"]:
        im["id"] = to[im["id"]]
    for a in coco["annotations"]:
        a["image_id"] = to[a["image_id"]]
    for d in coco["descriptions"]:
        d["images_id"] = [to[i] for i in d["images_id"]]
    return groundtruth_from_json(coco, "renumbered"), [{**r, "image_id": to[r["image_id"]]} for r in results]


def _release_json() -> dict[str, Any]:
    import json

    data: dict[str, Any] = json.loads((DATA / "mc-bench_v0.2_val.json").read_text())
    return data


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--resamples", type=int, default=1000)
    args = ap.parse_args()
    gt = load_groundtruth(DATA / "mc-bench_v0.2_val.json")
    cl = image_clusters(gt)
    sizes = Counter(Counter(cl.tolist()).values())
    files = {im.file_name for im in gt.images}
    shared = float(np.mean([sizes_of == 1 for sizes_of in np.bincount(cl)[cl]]))
    print(
        f"{len(gt.samples)} samples, {len(files)} files in {len(gt.images)} places, {cl.max() + 1} clusters; "
        f"{1 - shared:.1%} of samples in a cluster of 2+; cluster sizes {dict(sorted(sizes.items()))}"
    )
    results = read_results(DATA / "perturbed_noswap_result.json")
    ids = [s.id for s in gt.samples]
    for label, res in (("perturbed scores", results), ("every score 1.0", [{**r, "score": 1.0} for r in results])):
        r = McResampler(gt, res, ids)
        for unit, sampler in (("sample", r.samples), ("image cluster", r)):
            n = len(sampler.units)
            t = time.perf_counter()
            v = resampled(sampler, draw(n, args.resamples, 0, sampler.strata))
            secs = time.perf_counter() - t
            whole = sampler.metrics(np.arange(n))
            print(f"\n{label}, unit {unit} ({n} units, {args.resamples} resamples, {secs:.1f} s)")
            print(
                f"  {'metric':16} {'estimate':>9} {'boot mean':>9} {'sd':>7} {'(mean-est)/sd':>13} {'95% interval':>19} {'width':>7}"
            )
            for m in METRICS:
                x = v[m][~np.isnan(v[m])]
                est = whole[m]
                assert est is not None
                lo, hi = np.quantile(x, [0.025, 0.975])
                sd = x.std(ddof=1)
                print(
                    f"  {m:16} {est:9.4f} {x.mean():9.4f} {sd:7.4f} {(x.mean() - est) / sd:13.2f} [{lo:.4f}, {hi:.4f}] {hi - lo:7.4f}"
                )
    tied = [{**r, "score": 1.0} for r in results]
    base = score_results(gt, tied)
    print("\nevery score 1.0: release numbering")
    print(
        f"  official AP50 {base['official']['ap50']:.4f}; corrected AP50 {base['corrected']['ap50']:.4f} "
        f"(tie orders: {base['corrected']['ap50_tie_orders']})"
    )
    off, cor, idord = [], [], []
    for seed in range(20):
        g2, r2 = renumbered(gt, tied, seed)
        scored = score_results(g2, r2)
        off.append(scored["official"]["ap50"])
        cor.append(scored["corrected"]["ap50"])
        idord.append(scored["corrected"]["ap50_tie_orders"]["image_id_order"])
    print(
        f"20 renumberings: official AP50 {min(off):.4f}-{max(off):.4f}; corrected in image-id order "
        f"{min(idord):.4f}-{max(idord):.4f}; corrected (mean over tie orders) {min(cor)!r}-{max(cor)!r}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
