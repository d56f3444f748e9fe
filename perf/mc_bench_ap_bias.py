"""Is the upward shift of MC-Bench AP50's bootstrap a real bias of the estimate? (issue 41 item 4)

    python perf/mc_bench_ap_bias.py [--size 365] [--subsets 200] [--boot 30] [--resamples 200]

The released 2,000 samples (1,459 image clusters) with the authors' perturbed results are taken as
a population whose AP50 is known. Samples of `--size` clusters are drawn without replacement:
their AP50's mean minus the population's is the estimate's own bias at that size. For `--boot` of
them a bootstrap (clusters with replacement, `--resamples` draws) gives the shift of the bootstrap
mean above the sample's estimate. Both are printed in units of the sd of the sample AP50, with the
coverage of the 95% percentile interval of the population AP50 over the `--boot` samples.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from needlepoint.benchmarks.mc_bench.groundtruth import load_groundtruth
from needlepoint.benchmarks.mc_bench.resample import McResampler
from needlepoint.benchmarks.mc_bench.scoring import read_results

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "mc-bench"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=365)
    ap.add_argument("--subsets", type=int, default=200)
    ap.add_argument("--boot", type=int, default=30)
    ap.add_argument("--resamples", type=int, default=200)
    args = ap.parse_args()
    gt = load_groundtruth(DATA / "mc-bench_v0.2_val.json")
    results = read_results(DATA / "perturbed_noswap_result.json")
    r = McResampler(gt, results, [s.id for s in gt.samples])
    n = len(r.units)
    rng = np.random.default_rng(0)
    for metric in ("corrected/ap50", "official/ap50"):
        truth = r.metrics(np.arange(n))[metric]
        assert truth is not None
        subsets = np.stack([np.sort(rng.choice(n, args.size, replace=False)) for _ in range(args.subsets)])
        est = r.metrics_batch(subsets)[metric]
        sd = est.std(ddof=1)
        shifts, covered = [], 0
        for row in subsets[: args.boot]:
            drawn = row[rng.integers(0, args.size, size=(args.resamples, args.size))]
            boot = r.metrics_batch(drawn)[metric]
            whole = r.metrics(row)[metric]
            assert whole is not None
            shifts.append((boot.mean() - whole) / boot.std(ddof=1))
            lo, hi = np.quantile(boot, [0.025, 0.975])
            covered += int(lo <= truth <= hi)
        print(
            f"{metric}: population {truth:.4f}; {args.subsets} samples of {args.size} clusters: mean {est.mean():.4f}, "
            f"sd {sd:.4f}, bias of the estimate {(est.mean() - truth) / sd:+.2f} sd; bootstrap mean above the "
            f"estimate {np.mean(shifts):+.2f} sd; percentile interval covers the population AP50 in {covered} of {args.boot}"
        )


if __name__ == "__main__":
    main()
