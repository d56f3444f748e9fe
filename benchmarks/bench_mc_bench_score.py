"""Time of scoring MC-Bench results: needlepoint (official + corrected + analyses) against the
pycocotools-based official evaluation.

    python benchmarks/bench_mc_bench_score.py [--runs 7] [--data ../shared/data/mc-bench]
                                              [--results perturbed_noswap_result.json]

Rows, each the median of --runs runs:

- needlepoint in process: read the release file and the results file, `score_results` (official,
  corrected and analyses);
- needlepoint as a fresh Python process: the same plus interpreter start and imports, which is
  what a `needlepoint score mc_bench` command costs;
- pycocotools in process: what the authors' eval_mc_bench.py does with pycocotools (COCO index,
  loadRes, COCOeval.evaluate() for the regrouping step, loadRes and evaluate() again, accumulate()),
  regrouping itself left out (it is one image pair). Skipped if pycocotools is not installed.

Prints a Markdown table, the machine, and the command. Target: the needlepoint process well
under 1.5 s on 2 cores for 2,000 samples / ~3,000 boxes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mc-bench"

_CHILD = """
import sys
from needlepoint.benchmarks.mc_bench.groundtruth import load_groundtruth
from needlepoint.benchmarks.mc_bench.scoring import read_results, score_results
out = score_results(load_groundtruth(sys.argv[1]), read_results(sys.argv[2]))
print(out["official"]["ap50"])
"""


def needlepoint_score(gt_path: Path, results_path: Path) -> float:
    """Read both files and compute every metric; returns the official AP50."""
    from needlepoint.benchmarks.mc_bench.groundtruth import load_groundtruth
    from needlepoint.benchmarks.mc_bench.scoring import read_results, score_results

    return score_results(load_groundtruth(gt_path), read_results(results_path))["official"]["ap50"]


def needlepoint_process(gt_path: Path, results_path: Path) -> float:
    """The same in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", _CHILD, str(gt_path), str(results_path)], capture_output=True, text=True, check=True)
    return float(done.stdout.strip())


def pycocotools_official(coco_path: Path, results_path: Path) -> float:
    """The pycocotools work of the authors' evaluator; returns the unweighted mean AP50 of group 1."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(coco_path))
        first = COCOeval(coco, coco.loadRes(str(results_path)), "bbox")
        first.evaluate()
        final = COCOeval(coco, coco.loadRes(str(results_path)), "bbox")
        final.evaluate()
        final.accumulate()
    return float(final.eval["precision"][0, :, 0, 0, 2].mean())


def median_time(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--results", default="perturbed_noswap_result.json")
    args = ap.parse_args()
    release, coco, results = args.data / "mc-bench_v0.2_val.json", args.data / "MC-Bench_coco_format.json", args.data / args.results

    needlepoint_score(release, results)  # warm imports and caches of the file system
    rows = [
        ("needlepoint, in process: read files + official + corrected + analyses", median_time(lambda: needlepoint_score(release, results), args.runs)),
        ("needlepoint, fresh process (start, imports, read, score)", median_time(lambda: needlepoint_process(release, results), args.runs)),
    ]
    try:
        import pycocotools  # noqa: F401
    except ImportError:
        print("pycocotools is not installed: its row is skipped")
    else:
        rows.append(("pycocotools, in process: the official evaluator's COCOeval work", median_time(lambda: pycocotools_official(coco, results), max(1, min(args.runs, 3)))))

    print(f"MC-Bench scoring of {results.name}, median of {args.runs} runs (pycocotools: up to 3)\n")
    print("| what | median s |")
    print("|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} |")
    print(f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print("command: python benchmarks/bench_mc_bench_score.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
