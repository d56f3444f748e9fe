"""What the HTML report adds after the last answer: the command with and without the report, and
(optionally) another source tree's command, interleaved on the same data and server.

    python perf/bench_report_overhead.py [--samples 1600] [--rounds 3] [--delay-ms 100] [--old-src DIR]
                                         [--processes N]

Data: bench_ref_adv_harness's synthetic Ref-Adv-s parquet (640x480 JPEGs, row groups of 1,132),
made in a child process. Server: perf/serve_simulated.py in its own process. Each variant
runs `python -m needlepoint.cli eval ref_adv_s --data D --model bench-model --api-url URL
--box-format abs_xyxy --concurrency 64 --out RUN --no-progress` (plus --no-report for that
variant), PYTHONPATH pointing at the tree; with --processes N also the default command with
`--processes N` (docs/scale-out.md). Printed: the answering time (the first request's
arrival to the last answer, at the server), the time from the last answer to the command's end,
the whole command's wall time, and its CPU time (user + system, its drawing processes included),
and the run folder's size, medians over the rounds. On a shared machine the CPU time is the steadier comparison.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_ref_adv_harness import MODEL, ROW_GROUP, folder_mb, make_release_in_child, timed  # noqa: E402
from measure import ServerProcess, with_bytecode  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay-ms", type=int, default=100)
    parser.add_argument("--data", type=Path, help="keep the synthetic release in this folder and reuse it (one per --samples)")
    parser.add_argument("--old-src", type=Path, help="another tree's src/ (e.g. an export of an earlier commit)")
    parser.add_argument("--processes", type=int, default=1, help="also the default command with --processes N")
    ns = parser.parse_args()
    with_bytecode(HERE.parent / "src", *([ns.old_src] if ns.old_src else []))
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    server = ServerProcess(ns.delay_ms, tmp, MODEL)
    try:
        if ns.data is not None:  # the release of an earlier run of this script (same --samples), or made there
            data = ns.data / f"samples-{ns.samples}"
            marker = data / ".made"
            if not marker.exists():
                make_release_in_child(data, ns.samples, 0, ROW_GROUP)
                marker.write_text("ok\n")
        else:
            data, _ = make_release_in_child(tmp / "data", ns.samples, 0, ROW_GROUP)
        server.start()
        here = str(HERE.parent / "src")
        variants = [("report (default)", here, []), ("--no-report", here, ["--no-report"])]
        if ns.old_src:
            variants.append((f"report, {ns.old_src}", str(ns.old_src.resolve()), []))
        if ns.processes > 1:
            variants.append((f"report, --processes {ns.processes}", here, ["--processes", str(ns.processes)]))
        delay = ns.delay_ms / 1000
        rows: dict[str, list[tuple[float, float, float, float]]] = {}
        for r in range(ns.rounds + 1):  # round 0 warms the file cache and is not counted
            for label, src, extra in variants:
                out = tmp / f"run-{r}-{len(rows.get(label, []))}-{abs(hash(label))}"
                argv = [
                    sys.executable,
                    "-m",
                    "needlepoint.cli",
                    "eval",
                    "ref_adv_s",
                    "--data",
                    str(data),
                    "--model",
                    MODEL,
                    "--api-url",
                    server.url,
                    "--box-format",
                    "abs_xyxy",
                    "--concurrency",
                    "64",
                    "--out",
                    str(out),
                    "--no-progress",
                    *extra,
                ]
                server.stats()
                run = timed(argv, tmp / "log.txt", env={**os.environ, "PYTHONPATH": src})
                run.stats = server.stats()
                if run.rc != 0 or run.stats.get("requests") != ns.samples:
                    raise SystemExit(
                        f"{label} failed: exit {run.rc}, {run.stats.get('requests')} requests; see {tmp / 'log.txt'}"
                    )
                size = folder_mb(out)
                shutil.rmtree(out, ignore_errors=True)
                if r:
                    rows.setdefault(label, []).append(
                        (run.answering(delay) or 0, run.after_last_answer(delay) or 0, run.wall_s, run.cpu_s, size)
                    )
                    print(
                        f"round {r} {label}: answering {rows[label][-1][0]:.2f} s, after {rows[label][-1][1]:.2f} s, "
                        f"load average {os.getloadavg()[0]:.1f}",
                        file=sys.stderr,
                    )
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"command: python perf/bench_report_overhead.py --samples {ns.samples} --rounds {ns.rounds} --delay-ms {ns.delay_ms}"
        f"{' --old-src ' + str(ns.old_src) if ns.old_src else ''}{f' --processes {ns.processes}' if ns.processes > 1 else ''}; 1-minute load average after: {os.getloadavg()[0]:.1f}\n"
    )
    ideal = ns.samples / (math.ceil(ns.samples / 64) * delay)
    print(f"ideal rate while serving: {ideal:.0f} samples/s ({ns.samples} / (ceil({ns.samples} / 64) x {delay:g} s))\n")
    print(
        "| variant | answering (s) | samples/s while serving (of ideal) | after the last answer (s) | after / answering | after per sample (ms) | whole command (s) "
        "| CPU, command + its children (s) | CPU per sample (ms) | run folder (MB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, values in rows.items():
        ans, after, wall, cpu, size = (statistics.median(v[i] for v in values) for i in range(5))
        lo, hi = min(v[1] for v in values), max(v[1] for v in values)
        print(
            f"| {label} | {ans:.2f} | {ns.samples / ans:.0f} ({ns.samples / ans / ideal:.0%}) | {after:.2f} ({lo:.2f}-{hi:.2f}) | {after / ans:.2f} | {1000 * after / ns.samples:.2f} | {wall:.2f} "
            f"| {cpu:.2f} | {1000 * cpu / ns.samples:.2f} | {size:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
