"""Peak RSS of `needlepoint eval ref_adv_s` as the sample count grows, alone on the machine.

The harness comparison (bench_ref_adv_harness.py) interleaves two tools and servers, which makes its
memory figures noisy; this runs only needlepoint against a local simulated server, several times.

    python perf/bench_ref_adv_memory.py [--runs 3] [--sizes 400,1600,4800] [--row-group 1132] [--report]

The data is written in a child process: a child's ru_maxrss starts at the peak of the process it
is forked from, so this process stays small.
"""

from __future__ import annotations

import argparse
import os
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
    ns = parser.parse_args()
    with_bytecode()
    exe = str(Path(sys.executable).parent / "needlepoint")
    sizes = tuple(int(v) for v in ns.sizes.split(","))
    peaks: dict[int, list[float]] = {n: [] for n in sizes}
    with tempfile.TemporaryDirectory() as tmp, SimulatedServer(default='{"bboxes": [[0, 0, 10, 10]]}', models=("m",)) as server:
        root = Path(tmp)
        for n in sizes:
            make_release_in_child(root / f"data{n}", n, 0, ns.row_group)
        timeline: list[tuple[int, float]] = []
        for run in range(ns.runs):
            for n in sizes:
                argv = [
                    exe,
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
                    str(root / f"run{n}-{run}"),
                    "--concurrency",
                    "64",
                    "--no-progress",
                    "--json",
                    *([] if ns.report else ["--no-report"]),
                ]
                child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                points, status, usage = _watch(child.pid, root / f"run{n}-{run}" / "records.jsonl")
                if run == 0 and n == max(sizes):
                    timeline = points
                if status != 0:
                    raise SystemExit(f"the run of {n} samples failed (status {status})")
                peaks[n].append(usage.ru_maxrss / 1024)
    print(
        f"command: python perf/bench_ref_adv_memory.py --runs {ns.runs} --sizes {ns.sizes} --row-group {ns.row_group}"
        f"{' --report' if ns.report else ''}\n"
    )
    print("| samples | peak RSS median (MB) | min-max (MB) | runs (MB) |\n|---:|---:|---|---|")
    for n in sizes:
        v = peaks[n]
        print(f"| {n} | {statistics.median(v):.0f} | {min(v):.0f}-{max(v):.0f} | {', '.join(f'{x:.0f}' for x in v)} |")
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
