"""CPU time of drawing a run's MM-NIAH heatmaps (the overall and the six tasks, PNG and SVG).

    PYTHONPATH=src python perf/bench_heatmaps.py [--rounds 3] [--extended]

Draws the seven heatmaps of a synthetic metrics block (random cells, 5 depths x 11 ranges; with
--extended also the seven over the 15 extended ranges) into a fresh folder each round, with
benchmarks/mm_niah/heatmap.py's `draw_all` of the checkout on PYTHONPATH, and prints the CPU
seconds (process time, so a busy machine's waits do not count) of each round: the first round
includes importing matplotlib. Run it with another checkout's `src` to compare two versions.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

TASKS = ("retrieval-text", "counting-text", "reasoning-text", "retrieval-image", "counting-image", "reasoning-image")


def _block(rng: random.Random, cols: int) -> dict[str, Any]:
    cells = [[round(rng.random(), 3) for _ in range(cols)] for _ in range(5)]
    counts = [[rng.randint(0, 9) for _ in range(cols)] for _ in range(5)]
    return {"cells": cells, "counts": counts, "overall": sum(map(sum, cells)) / (5 * cols)}


def metrics(extended: bool) -> dict[str, Any]:
    """A metrics block with every task, the overall, and (optionally) the extended ranges."""
    from needlepoint.benchmarks.mm_niah.aggregate import CONTEXT_RANGES

    rng = random.Random(0)
    out: dict[str, Any] = {
        "tasks": {t: _block(rng, len(CONTEXT_RANGES)) for t in TASKS},
        "overall": _block(rng, len(CONTEXT_RANGES)),
    }
    if extended:
        ranges = [*CONTEXT_RANGES[:-1], "64k", "128k", "256k", "512k", "1M"]
        out["extended"] = {
            "tasks": {t: _block(rng, len(ranges)) for t in TASKS},
            "overall": _block(rng, len(ranges)),
            "context_ranges": ranges,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--extended", action="store_true")
    ns = ap.parse_args()
    from needlepoint.benchmarks.mm_niah.heatmap import draw_all

    block = metrics(ns.extended)
    for k in range(ns.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.process_time()
            paths = draw_all(block, Path(tmp) / "heatmaps")
            print(f"round {k + 1}: {len(paths)} files in {time.process_time() - t:.2f} s CPU", flush=True)


if __name__ == "__main__":
    main()
