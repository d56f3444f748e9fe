"""The most this machine allows an MM-NIAH client: a bare aiohttp loop sending ready-made request
bodies to the simulated server, against the ideal rate, beside needlepoint's own command.

    python perf/bench_mm_niah_ceiling.py [--data DIR] [--concurrency 64] [--delay-ms 100]
                                         [--local-images] [--rounds 3] [--build-in-loop]

DIR is a release folder of perf/bench_mm_niah_memory.py (default: its `--sizes 200` set, the
release's shape: 30k-100k tokens and 20-60 images a document, every document its own images; run
that first). Every body is built before the clock starts (--build-in-loop: as each request is
sent, on the event loop): the row's text and question, each image as base64 (or its file:// URL
with --local-images), one `orjson.dumps`. They are sent at --concurrency, after an untimed round,
to perf/serve_simulated.py --bytes-only in its own process, and the rate at the server (the same
window as perf/bench_mm_niah_memory.py's: first to last arrival plus the delay) is printed against
the ideal N / (ceil(N / concurrency) x delay). The simulated server shares the two cores with the
client, as in every measurement here; what a client with no work of its own reaches is the bound
for needlepoint's `eval` on the same data (docs/performance.md#mm-niah-long-documents).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson
import pybase64
from bench_mm_niah_memory import serving
from measure import ServerProcess

DEFAULT_DATA = Path("/tmp/np-bench-mm-niah/data-200-30000-100000-20-60-0")


def rows_of(folder: Path) -> list[dict[str, object]]:
    """The release's rows, task files in name order (as many as its manifest counts)."""
    rows = []
    for path in sorted((folder / "annotations").glob("*.jsonl")):
        with path.open("rb") as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


def body(row: dict[str, object], images: Path, local: bool) -> bytes:
    """One chat request of a row: its text, then its images (base64, or file URLs)."""
    parts: list[dict[str, object]] = [{"type": "text", "text": f"{row['context']}\n{row['question']}"}]
    for name in row.get("images_list") or []:  # type: ignore[attr-defined]
        path = images / str(name)
        if local:
            url = "file://" + os.path.abspath(path)
        else:
            url = "data:image/jpeg;base64," + pybase64.b64encode(path.read_bytes()).decode("ascii")
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return orjson.dumps({"model": "bench", "messages": [{"role": "user", "content": parts}], "max_tokens": 32})


async def send_all(url: str, make: list[object], concurrency: int) -> float:
    """Send every body (bytes, or a callable making them) at `concurrency`; the client's CPU seconds."""
    gate = asyncio.Semaphore(concurrency)
    cpu = time.process_time()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(item: object) -> None:
            async with gate:
                data = item() if callable(item) else item
                async with session.post(
                    f"{url}/chat/completions", data=data, headers={"Content-Type": "application/json"}
                ) as resp:
                    await resp.read()
                    resp.raise_for_status()

        await asyncio.gather(*(one(item) for item in make))
    return time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a release folder of bench_mm_niah_memory.py")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--local-images", action="store_true", help="images by their file:// URLs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build-in-loop", action="store_true", help="build each body as it is sent, not before")
    ns = parser.parse_args(argv)
    folder = ns.data / "mm_niah_val"
    if not (folder / "annotations").is_dir():
        sys.exit(f"{folder}/annotations is missing: write the set with perf/bench_mm_niah_memory.py --sizes 200 first")
    rows = rows_of(folder)
    images = folder / "images"
    if ns.build_in_loop:
        make: list[object] = [lambda row=row: body(row, images, ns.local_images) for row in rows]
    else:
        make = [body(row, images, ns.local_images) for row in rows]
    mean_mb = statistics.mean(len(body(r, images, ns.local_images)) for r in rows[:20]) / 1e6
    server = ServerProcess(ns.delay_ms, ns.data.parent, "bench", ["--reply", "A", "--bytes-only"], name="ceiling").start()
    shares = []
    try:
        how = ("file URLs" if ns.local_images else "base64") + (", built as sent" if ns.build_in_loop else ", built before")
        print(f"{len(rows)} rows, {how}, {mean_mb:.1f} MB a body (first 20); --concurrency {ns.concurrency}, {ns.delay_ms:g} ms")
        for k in range(-1, ns.rounds):  # round -1: untimed, its connections and the server warm up
            server.stats()  # reset
            cpu = asyncio.run(send_all(server.url, make, ns.concurrency))
            got = serving(server.stats(), len(rows), ns.concurrency, ns.delay_ms)
            share = got["serving_rate"] / got["ideal_rate"]
            if k < 0:
                continue
            shares.append(share)
            print(
                f"round {k + 1}: {got['serving_rate']:.0f} samples/s of {got['ideal_rate']:.0f} ({share:.1%}); client CPU {cpu:.2f} s"
            )
    finally:
        server.stop()
    print(
        f"median {statistics.median(shares):.1%} of the ideal (range {min(shares):.1%}-{max(shares):.1%}); load {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
