"""Where the client's time goes before an MM-NIAH request is sent, stage by stage, one sample after
another in this process (no server, no concurrency: the CPU each stage costs a sample).

    python perf/bench_mm_niah_stages.py [--data DIR] [--local-images] [--rounds 2]

DIR is an MM-NIAH release folder (default: the one perf/bench_mm_niah_memory.py writes with
`--sizes 200`: the release's shape, 30k-100k tokens and 20-60 images a document, every document
its own images; run that first). For every sample, in a run's order:

- prompt: `MmNiah.prompt` (the row read again from its file and checked by its line's CRC-32,
  the prompt text, the text cut at the image placeholders);
- images: what the request carries of each image (`OpenAICompatModel._encode_images`: the file
  URL with --local-images, else base64), each image read once, its record description noted;
- sent: `sent_messages` (what the record names of each image: path, digest or file identity,
  size), from what the request read;
- body: the request's JSON pieces (`request_pieces`);
- key: the call cache's key (`conversation_key`);
- record: the record's JSON line with the text as sent.

The first round meets every image for the first time (files read, digests taken); later rounds
find what the caches keep, as a run does for an image it has sent before: each image's record
description and, with --local-images, its file URL. Base64 is not found again on this data: its
8,000 distinct images (4.3 MB of base64 a document) are far more than the client's 32 MB image
cache holds. Prints ms a sample per stage and round. For these 200 samples at 64 requests in
flight and 100 ms a request the ideal is 500 samples/s (4 waves in 0.4 s): 2 ms of client CPU a
sample, everything included.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from pathlib import Path
from typing import Any

from measure import with_bytecode

DEFAULT_DATA = Path("/tmp/np-bench-mm-niah/data-200-30000-100000-20-60-0")


async def _round(bench: Any, samples: list[Any], client: Any) -> dict[str, float]:
    """ms a sample of each stage, over `samples` one after another."""
    from needlepoint.core.conversation import Generation
    from needlepoint.core.files import json_line
    from needlepoint.models.openai_compat import request_pieces
    from needlepoint.solvers.calls import conversation_key
    from needlepoint.solvers.sent import sent_messages

    generation = Generation()
    spent = dict.fromkeys(("prompt", "images", "sent", "body", "key", "record"), 0.0)
    for sample in samples:
        t0 = time.perf_counter()
        conversation = bench.prompt(sample)
        t1 = time.perf_counter()
        images = await client._encode_images(conversation)
        t2 = time.perf_counter()
        sent = await sent_messages(conversation)
        t3 = time.perf_counter()
        request_pieces("bench", conversation, generation, images)
        t4 = time.perf_counter()
        conversation_key("model", "bench", conversation, generation)
        t5 = time.perf_counter()
        json_line({"id": sample.id, "turns": [{"sent": sent, "reply": "A"}]})
        t6 = time.perf_counter()
        for name, took in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
            spent[name] += took
    return {name: took / len(samples) * 1000 for name, took in spent.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="an MM-NIAH release folder")
    parser.add_argument("--local-images", action="store_true", help="images by their file URLs (eval --local-images)")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the samples (default 2)")
    ns = parser.parse_args(argv)
    with_bytecode()
    if not ns.data.is_dir():
        sys.exit(f"{ns.data} does not exist; write it with perf/bench_mm_niah_memory.py first (see this script's docstring)")
    from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
    from needlepoint.models.openai_compat import OpenAICompatModel

    bench = MmNiah(split="val")
    started = time.perf_counter()
    samples = bench.load(ns.data)
    load_s = time.perf_counter() - started
    client = OpenAICompatModel("bench", ["http://127.0.0.1:9/v1"], local_images=ns.local_images)  # its caches last across rounds
    rounds = [asyncio.run(_round(bench, samples, client)) for _ in range(ns.rounds)]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}: Python {platform.python_version()}, "
        f"{len(samples)} samples of {ns.data}, {'--local-images' if ns.local_images else 'base64'}, "
        f"loaded in {load_s:.2f} s\n"
    )
    print("| stage | " + " | ".join(f"round {i + 1} (ms a sample)" for i in range(len(rounds))) + " |")
    print("|---|" + "---:|" * len(rounds))
    for name in rounds[0]:
        print(f"| {name} | " + " | ".join(f"{r[name]:.2f}" for r in rounds) + " |")
    print("| all | " + " | ".join(f"{sum(r.values()):.2f}" for r in rounds) + " |")
    print(f"\ncommand: python perf/bench_mm_niah_stages.py --data {ns.data}{' --local-images' if ns.local_images else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
