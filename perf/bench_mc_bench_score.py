"""Time of scoring MC-Bench results: the whole `needlepoint score mc_bench` command (official +
corrected + every analysis) against the authors' approach (pycocotools COCOeval plus their
regrouping step), on the same results file.

    python perf/bench_mc_bench_score.py [--runs 7] [--data tests/data/mc-bench]
                                              [--results perturbed_noswap_result.json]

Rows, each the median of --runs runs (the slow pycocotools rows: at most 3):

- the command as a user types it, run as a child process from the repository root:
  `needlepoint score mc_bench --predictions DATA/RESULTS --data DATA/ --json`; once through the
  `needlepoint` found on PATH (under pyenv that is a shell shim) and once through the entry-point
  script beside this interpreter;
- start-up alone: `python -c "import needlepoint.cli"`;
- the phases of the command in one fresh process (imports of numpy and scipy.optimize, reading
  the annotation and results files, the official protocol with its per-style runs, the corrected
  protocol with the analyses, JSON output), to show where the time goes;
- needlepoint in process: read both files and `score_results`, warm;
- the authors' approach in process and as a fresh process: `COCO()` on MC-Bench_coco_format.json,
  `loadRes`, `COCOeval.evaluate()`, the regrouping loop over the images with a group-2 box (for
  each: every ordered choice of GT groups, Hungarian matching on IoU, the results file read again),
  `loadRes` of the relabelled results, `evaluate()`, `accumulate()`, the weighted AP50 and the Acc,
  as docs/protocols/mc-bench.md describes eval_mc_bench.py. Skipped if pycocotools is not installed.

Both sides' official AP50 and Acc are printed beside the authors' reference values
(tests/data/README.md), so the timed work is known to be the real one. Prints a Markdown table,
the commands, the date and the machine. Target: the whole command under 1.5 s on 2 cores (2,000 samples, ~3,000 boxes).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from measure import with_bytecode

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "tests" / "data" / "mc-bench"
REFERENCE = {"perturbed_noswap_result.json": (0.6562401387740078, 0.8585), "dummy_result.json": (0.007176440403952977, 0.1445)}

_PHASES = """
import json, sys, time
t0 = time.perf_counter()
import needlepoint.cli
t1 = time.perf_counter()
import numpy
t2 = time.perf_counter()
import scipy.optimize
t3 = time.perf_counter()
from needlepoint.benchmarks.mc_bench.benchmark import annotation_path
from needlepoint.benchmarks.mc_bench.corrected import evaluate_corrected
from needlepoint.benchmarks.mc_bench.groundtruth import load_groundtruth
from needlepoint.benchmarks.mc_bench.scoring import _restrict, detections, read_results
from needlepoint.benchmarks.mc_bench.official import score_official
from needlepoint.benchmarks.mc_bench.groundtruth import STYLES
from pathlib import Path
t4 = time.perf_counter()
gt = load_groundtruth(annotation_path(Path(sys.argv[1])))
t5 = time.perf_counter()
dt = detections(read_results(sys.argv[2]), gt)
t6 = time.perf_counter()
official = score_official(gt, dt)
for style in STYLES:
    score_official(*_restrict(gt, dt, [s.id for s in gt.samples if s.style == style]))
t7 = time.perf_counter()
corrected = evaluate_corrected(gt, dt)
out = {"official": official, "corrected": corrected.scores(), "analyses": corrected.analyses()}
t8 = time.perf_counter()
json.dumps(out, indent=2)
t9 = time.perf_counter()
print(json.dumps({
    "import needlepoint.cli": t1 - t0, "import numpy": t2 - t1, "import scipy.optimize": t3 - t2,
    "import the scoring modules": t4 - t3, "read the annotation file": t5 - t4, "read the results file": t6 - t5,
    "official protocol + 3 per-style runs": t7 - t6, "corrected protocol + analyses": t8 - t7, "JSON output": t9 - t8,
}))
"""


def needlepoint_score(release: Path, results_path: Path) -> dict[str, Any]:
    """Read both files and compute every metric, in this process."""
    from needlepoint.benchmarks.mc_bench.groundtruth import load_groundtruth
    from needlepoint.benchmarks.mc_bench.scoring import read_results, score_results

    return score_results(load_groundtruth(release), read_results(results_path))


def authors_official(coco_path: Path, results_path: Path) -> tuple[float, float]:
    """The authors' procedure with pycocotools (docs/protocols/mc-bench.md, "The authors' metrics"):
    weighted AP50 and Acc."""
    import numpy as np
    import pycocotools.mask as mask_utils
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    from scipy.optimize import linear_sum_assignment

    def matched_ious(ev: COCOeval, image: int, group: int, gt_cat: int) -> list[float]:
        dts, gts = ev._dts.get((image, group), []), ev._gts.get((image, gt_cat), [])
        if not dts:
            return []
        ious = mask_utils.iou([d["bbox"] for d in dts], [g["bbox"] for g in gts], [int(g["iscrowd"]) for g in gts])
        if not len(ious):
            return []
        rows, cols = linear_sum_assignment(-ious)
        return [ious[r, c] for r, c in zip(rows, cols)]

    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(coco_path))
        first = COCOeval(coco, coco.loadRes(str(results_path)), "bbox")
        first.evaluate()
        relabelled = json.loads(results_path.read_text())
        for image in coco.getImgIds(catIds=coco.getCatIds("group 2")):
            pair = coco.loadImgs(image)[0]["pair_image_id"]
            gt_cats = list({a["category_id"] for i in (image, pair) for a in coco.loadAnns(coco.getAnnIds(imgIds=i))})
            dt_cats = {a["category_id"] for i in (image, pair) for a in first.cocoDt.loadAnns(first.cocoDt.getAnnIds(imgIds=i))}
            choices = list(itertools.permutations(gt_cats, len(dt_cats)))
            scores = []
            for choice in choices:
                values = [
                    v for group, cat in enumerate(choice, 1) for i in (image, pair) for v in matched_ious(first, i, group, cat)
                ]
                scores.append(sum(values) / len(values) if values else 0.0)
            best = choices[scores.index(max(scores))] if scores else ()
            relabelled = json.loads(results_path.read_text())  # read again for every image, as the authors do
            for old, new in enumerate(best, 1):
                for d in relabelled:
                    if d["category_id"] == old and d["image_id"] in (image, pair):
                        d["category_id"] = new
        final = COCOeval(coco, coco.loadRes(relabelled), "bbox")
        final.evaluate()
        final.accumulate()
    cats = coco.getCatIds()
    counts = {c: len(coco.getAnnIds(catIds=[c])) for c in cats}
    ap50 = 0.0
    for k, c in enumerate(cats):
        p = final.eval["precision"][0, :, k, 0, 2]
        if (p > -1).any():
            ap50 += counts[c] / sum(counts.values()) * float(np.mean(p[p > -1]))
    ids = coco.getImgIds()
    predicted = {d["image_id"] for d in relabelled}
    agree = [bool(coco.getAnnIds(imgIds=[i])) == (i in predicted) for i in ids]
    acc = sum(a and b for a, b in zip(agree[0::2], agree[1::2])) / (len(ids) / 2)
    return ap50, acc


def median_time(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run_child(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def shown(path: Path) -> str:
    """A path as the user would type it from the repository root."""
    return os.path.relpath(path, REPO)


def machine() -> str:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--results", default="perturbed_noswap_result.json")
    ap.add_argument("--authors-child", nargs=2, metavar=("COCO", "RESULTS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.authors_child:
        print(json.dumps(authors_official(Path(args.authors_child[0]), Path(args.authors_child[1]))))
        return
    with_bytecode()
    data = args.data.resolve()
    release, coco, results = data / "mc-bench_v0.2_val.json", data / "MC-Bench_coco_format.json", data / args.results
    for path in (release, coco, results):
        if not path.is_file():
            raise SystemExit(f"{path} does not exist; pass --data (a folder like tests/data/mc-bench) and --results")

    score_args = ["score", "mc_bench", "--predictions", shown(results), "--data", shown(data) + "/", "--json"]
    typed = "needlepoint " + " ".join(score_args)
    on_path = shutil.which("needlepoint")
    entry = Path(sys.executable).parent / "needlepoint"
    commands: list[tuple[str, list[str]]] = []
    if on_path:
        commands.append((f"`{typed}` (PATH: {on_path})", [on_path, *score_args]))
    if entry.is_file() and (not on_path or Path(on_path).resolve() != entry.resolve()):
        commands.append((f"`{typed}` (entry point {entry})", [str(entry), *score_args]))
    if not commands:
        commands.append(
            (f"`python -m needlepoint.cli {' '.join(score_args)}`", [sys.executable, "-m", "needlepoint.cli", *score_args])
        )

    printed = json.loads(run_child(commands[0][1]))  # warm the file cache; keep the numbers
    rows = [(what, median_time(lambda argv=argv: run_child(argv), args.runs)) for what, argv in commands]
    rows.append(
        (
            'start-up: `python -c "import needlepoint.cli"`',
            median_time(lambda: run_child([sys.executable, "-c", "import needlepoint.cli"]), args.runs),
        )
    )
    phases = [json.loads(run_child([sys.executable, "-c", _PHASES, str(data), str(results)])) for _ in range(args.runs)]
    for name in phases[0]:
        rows.append((f"  phase (fresh process): {name}", statistics.median(p[name] for p in phases)))
    needlepoint_score(release, results)
    rows.append(
        (
            "needlepoint in process, warm: read both files + official + corrected + analyses",
            median_time(lambda: needlepoint_score(release, results), args.runs),
        )
    )

    authors: tuple[float, float] | None = None
    try:
        import pycocotools  # noqa: F401
    except ImportError:
        print("pycocotools is not installed: the authors' rows are skipped\n")
    else:
        slow = max(1, min(args.runs, 3))
        child = [sys.executable, str(Path(__file__).resolve()), "--authors-child", str(coco), str(results)]
        authors = tuple(json.loads(run_child(child)))  # type: ignore[assignment]
        rows.append(
            (
                "authors' approach, fresh process (pycocotools COCOeval + regrouping, AP50 and Acc only)",
                median_time(lambda: run_child(child), slow),
            )
        )
        rows.append(("authors' approach in process, warm", median_time(lambda: authors_official(coco, results), slow)))

    print(f"MC-Bench scoring of {results.name}, median of {args.runs} runs (authors' approach: {max(1, min(args.runs, 3))})\n")
    print("| what | median s |")
    print("|---|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} |")
    print("\n| official metric | needlepoint command | authors' approach | reference (tests/data/README.md) |")
    print("|---|---|---|---|")
    ref = REFERENCE.get(results.name, (None, None))
    for k, name in enumerate(("AP50", "Acc")):
        theirs = "-" if authors is None else repr(authors[k])
        print(f"| {name} | {printed['official'][name.lower()]!r} | {theirs} | {ref[k] if ref[k] is not None else '-'} |")
    print(f"\ncorrected protocol (needlepoint only): AP50 {printed['corrected']['ap50']!r}, Acc {printed['corrected']['acc']!r}")
    print(f"\ndate: {time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"machine: {machine()}")
    if hasattr(os, "getloadavg"):
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print(f"timed command: {typed}  (cwd: the repository root)")
    print("this script: python perf/bench_mc_bench_score.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
