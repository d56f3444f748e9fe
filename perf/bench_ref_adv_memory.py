"""Peak RSS of `needlepoint eval ref_adv_s` as the sample count grows, alone on the machine.

The harness comparison (bench_ref_adv_harness.py) interleaves two tools and servers, which makes its
memory figures noisy; this runs only needlepoint against a local simulated server, several times.

    python perf/bench_ref_adv_memory.py [--runs 3] [--sizes 400,1600,4800] [--row-group 1132] [--report]
                                        [--no-ci] [--trees OLD/src,NEW/src]

With --trees the command runs from each source folder in turn (PYTHONPATH; `python -m
needlepoint.cli`), each run of each size, and the table has a row per tree: before and after a
change, interleaved. The defaults are a user's: intervals on (1,000 resamples), --no-report unless
--report; --no-ci turns the intervals off.

The data is written in a child process: a child's ru_maxrss starts at the peak of the process it
is forked from, so this process stays small.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ref_adv_harness import ROW_GROUP, make_release_in_child  # noqa: E402
from measure import GrowingLines, with_bytecode  # noqa: E402

from needlepoint.models.simulated import SimulatedServer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="400,1600,4800", help="comma-separated sample counts")
    parser.add_argument("--row-group", type=int, default=ROW_GROUP, help=f"rows per parquet row group (default {ROW_GROUP})")
    parser.add_argument("--report", action="store_true", help="write the HTML report too (default: --no-report)")
    parser.add_argument("--no-ci", action="store_true", help="eval --no-ci (default: the intervals on, as a user runs it)")
    parser.add_argument("--trees", help="comma-separated source folders, run in turn (PYTHONPATH), e.g. OLD/src,NEW/src")
    ns = parser.parse_args()
    trees = [t for t in (ns.trees or "").split(",") if t]
    with_bytecode(*(Path(t) for t in trees))
    exe = str(Path(sys.executable).parent / "needlepoint")
    sizes = tuple(int(v) for v in ns.sizes.split(","))
    peaks: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, SimulatedServer(default='{"bboxes": [[0, 0, 10, 10]]}', models=("m",)) as server:
        root = Path(tmp)
        for n in sizes:
            make_release_in_child(root / f"data{n}", n, 0, ns.row_group)
        timeline: list[tuple[int, float]] = []
        for run, tree, n in ((run, tree, n) for run in range(ns.runs) for tree in trees or [""] for n in sizes):
            env = {**os.environ, "PYTHONPATH": tree} if tree else None
            argv = [
                *([sys.executable, "-m", "needlepoint.cli"] if tree else [exe]),
                "eval",
                "ref_adv_s",
                "--data",
                str(root / f"data{n}"),
                "--model",
                "m",
                "--api-url",
                server.url,
                "--box-format",
                "abs_xyxy",
                "--out",
                str(root / f"run{n}-{run}-{trees.index(tree) if tree else 0}"),
                "--concurrency",
                "64",
                "--no-progress",
                "--json",
                *([] if ns.report else ["--no-report"]),
                *(["--no-ci"] if ns.no_ci else []),
            ]
            out = root / f"run{n}-{run}-{trees.index(tree) if tree else 0}"
            child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            points, status, usage = _watch(child.pid, out / "records.jsonl")
            if run == 0 and n == max(sizes) and tree == (trees[-1] if trees else ""):
                timeline = points
            if status != 0:
                raise SystemExit(f"the run of {n} samples failed (status {status})")
            peaks.setdefault((tree, n), []).append(usage.ru_maxrss / 1024)
            shutil.rmtree(out, ignore_errors=True)  # measured: not written back while the next run is timed
    print(
        f"command: python perf/bench_ref_adv_memory.py --runs {ns.runs} --sizes {ns.sizes} --row-group {ns.row_group}"
        f"{' --report' if ns.report else ''}{' --no-ci' if ns.no_ci else ''}{f' --trees {ns.trees}' if trees else ''}\n"
    )
    print("| tree | samples | peak RSS median (MB) | min-max (MB) | runs (MB) |\n|---|---:|---:|---|---|")
    for (tree, n), v in peaks.items():
        print(
            f"| {tree or 'installed'} | {n} | {statistics.median(v):.0f} | {min(v):.0f}-{max(v):.0f} | "
            f"{', '.join(f'{x:.0f}' for x in v)} |"
        )
    print(f"\nRSS of the {max(sizes)}-sample run as it goes (sampled every 20 ms; samples stored -> RSS MB):")
    step = max(1, max(sizes) // 12)
    shown, mark = [], -1
    for stored, rss in timeline:
        if stored // step != mark:
            mark = stored // step
            shown.append(f"{stored}: {rss:.0f}")
    print(", ".join(shown))
    return 0


def _watch(pid: int, records: Path) -> tuple[list[tuple[int, float]], int, os.struct_rusage]:
    """Sample (samples stored, RSS in MB) of a running child every 20 ms until it exits; return
    the samples, its exit status and its resource usage (ru_maxrss is the peak)."""
    page = os.sysconf("SC_PAGE_SIZE")
    stored_lines = GrowingLines(records)
    points: list[tuple[int, float]] = []
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return points, status, usage
        try:
            rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page / 2**20
            stored = stored_lines()
            if rss > 0:
                points.append((stored, rss))
        except (OSError, IndexError, ValueError):
            pass
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())
