"""Throughput over several endpoints: does one needlepoint process keep 1, 2, 4 and 8 servers busy?

    python perf/bench_endpoints.py [--endpoints 1,2,4,8] [--capacity 16] [--per-endpoint 400] [--runs 3]

Each endpoint is perf/serve_simulated.py in its own process, answering after 100 ms and at
most --capacity requests at once (a GPU server with a full batch): one endpoint serves at most
capacity / 0.1 s requests per second, E endpoints E times that. For each E, one `needlepoint eval
ref_adv_s` over E x --per-endpoint samples (the synthetic Ref-Adv-s release of
bench_ref_adv_harness.py: 640x480 JPEGs of about 85 KB, so each request carries ~117 KB of base64)
with --concurrency 2 x capacity x E and every endpoint passed as --api-url.

Measured: samples/s at the servers (requests / (last arrival - first arrival + 0.1 s), summed over
the endpoints), against the ideal E x capacity / 0.1 s; and the client's own CPU use (user + system
time of the needlepoint process, os.wait4) as a share of one core, and per request: the CPU of the
run less that of a 16-sample run (start-up, loading, scoring), over the other requests. The client
is one asyncio loop, so its own ceiling is one core / (CPU per request); when throughput stops
following the ideal, the table says whether the client had reached that ceiling (a whole core) or
was not given the CPU (a shared machine). A last row measures the ceiling directly: E endpoints
answering at once (0 ms, no capacity limit).
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

from bench_ref_adv_harness import MODEL, machine, make_release, needlepoint_exe
from measure import ServerProcess, with_bytecode

HERE = Path(__file__).resolve().parent
DELAY_MS = 100
SMALL = 16


def one_run(exe: Path, data: Path, servers: list[ServerProcess], n: int, concurrency: int, out: Path, delay_s: float) -> dict:
    """One eval; samples/s at the servers, wall, and the client's CPU share."""
    for s in servers:
        s.stats()  # reset the counters
    argv = [
        str(exe),
        "eval",
        "ref_adv_s",
        "--data",
        str(data),
        "--model",
        MODEL,
        "--box-format",
        "abs_xyxy",
        "--limit",
        str(n),
        "--concurrency",
        str(concurrency),
        "--out",
        str(out),
        "--no-progress",
        "--no-report",
        "--max-retries",
        "0",
    ]
    for s in servers:
        argv += ["--api-url", s.url]
    started = time.perf_counter()
    with open(out.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"needlepoint failed, see {out.with_suffix('.log')}")
    stats = [s.stats() for s in servers]
    requests = sum(st["requests"] for st in stats)
    if requests != n:
        raise RuntimeError(f"the servers saw {requests} requests for {n} samples")
    first = min(st["first"] for st in stats if st["first"])
    last = max(st["last"] for st in stats if st["last"])
    return {
        "rate": requests / (last - first + delay_s),
        "per_endpoint": [st["requests"] for st in stats],
        "wall": wall,
        "cpu": (usage.ru_utime + usage.ru_stime) / wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", default="1,2,4,8")
    parser.add_argument("--capacity", type=int, default=16, help="requests each endpoint answers at once (default 16)")
    parser.add_argument("--per-endpoint", type=int, default=400, help="samples per endpoint in a run (default 400)")
    parser.add_argument("--runs", type=int, default=3)
    ns = parser.parse_args(argv)
    with_bytecode()
    counts = [int(c) for c in ns.endpoints.split(",")]
    exe = needlepoint_exe()
    with tempfile.TemporaryDirectory(prefix="np-bench-endpoints-") as tmp_name:
        tmp = Path(tmp_name)
        data, jpeg = make_release(tmp / "release", max(counts) * ns.per_endpoint)
        print(f"machine: {machine()}; {max(counts) * ns.per_endpoint} samples, JPEG mean {jpeg / 1000:.1f} KB", file=sys.stderr)
        capped = [
            ServerProcess(DELAY_MS, tmp, MODEL, ["--capacity", str(ns.capacity)], f"capped-{i}").start()
            for i in range(max(counts))
        ]
        instant = [ServerProcess(0, tmp, MODEL, name=f"instant-{i}").start() for i in range(max(counts))]
        rows = []
        try:
            plans = [(e, capped[:e], DELAY_MS / 1000, 2 * ns.capacity * e, e * ns.capacity / (DELAY_MS / 1000)) for e in counts]
            plans.append((max(counts), instant, 0.0, 2 * ns.capacity * max(counts), None))
            one_run(exe, data, capped[:1], 64, 32, tmp / "warmup", DELAY_MS / 1000)
            load_before = os.getloadavg()[0]
            results: dict[int, list[dict]] = {i: [] for i in range(len(plans))}
            startup: list[float] = []
            for r in range(ns.runs):  # interleaved, so the machine's noise hits every row alike
                # Start-up and scoring cost of a run: a 16-sample run; the rest is CPU per request.
                startup.append(one_run(exe, data, instant, SMALL, 2 * ns.capacity, tmp / f"small-{r}", 0.0)["cpu_s"])
                for i, (e, servers, delay_s, conc, _ideal) in enumerate(plans):
                    n = e * ns.per_endpoint
                    results[i].append(one_run(exe, data, servers, n, conc, tmp / f"run-{i}-{r}", delay_s))
            load_after = os.getloadavg()[0]
            for i, (e, _servers, _delay, conc, ideal) in enumerate(plans):
                rates = [x["rate"] for x in results[i]]
                cpus = [x["cpu"] for x in results[i]]
                n = e * ns.per_endpoint
                fixed = statistics.median(startup)
                per_req = statistics.median(1000 * (x["cpu_s"] - fixed) / (n - SMALL) for x in results[i])
                med = statistics.median(rates)
                what = (
                    f"{e} x {DELAY_MS} ms, capacity {ns.capacity}" if ideal else f"{e} x 0 ms, no capacity limit (client ceiling)"
                )
                rows.append(
                    f"| {what} | {conc} | {ideal and f'{ideal:.0f}/s' or '-'} | {med:.0f}/s ({min(rates):.0f}-{max(rates):.0f}) "
                    f"| {f'{100 * med / ideal:.0f}%' if ideal else '-'} | {100 * statistics.median(cpus):.0f}% "
                    f"| {per_req:.2f} ms | {1000 / per_req:.0f}/s "
                    f"| {', '.join(map(str, results[i][-1]['per_endpoint']))} |"
                )
        finally:
            for s in capped + instant:
                s.stop()
    print(
        f"load average (1 min): {load_before:.1f} before, {load_after:.1f} after; {ns.runs} runs per row, median (min-max); "
        f"CPU of a {SMALL}-sample run (start-up): {statistics.median(startup):.2f} s"
    )
    print(
        "| endpoints | concurrency | ideal | samples/s at the servers | of ideal | client CPU (of one core) "
        "| client CPU per request | client ceiling on one core | requests per endpoint (last run) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
