"""Speed and peak memory of `needlepoint build mm_niah`, by sample count and by document length.

    python perf/bench_mm_niah_build.py [--documents 9000] [--work /tmp/np-bench-niah-build]

Writes a synthetic OBELICS-format corpus (needlepoint.demo.obelics: a parquet and a JSONL shard,
real JPEG/PNG images resolved through an img2dataset-style folder), then runs each build

    python -m needlepoint.cli build mm_niah --corpus SHARDS --images IMG2DATASET --out OUT
        --tasks TASKS --lengths LENGTHS --depths DEPTHS --per-cell N --seed 0 --no-progress

as a child process and prints a Markdown table: samples, tokens written (sum of context_length),
wall time, samples/s, tokens/s, and the child's peak RSS (wait4 ru_maxrss). The runs vary the
number of samples at a fixed length (memory must stay flat) and the document length up to 1M
tokens at one sample (memory must not follow the length).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from measure import measured

REPO = Path(__file__).resolve().parents[1]

RUNS = (
    # (label, tasks, lengths, depths, per-cell)
    (
        "samples: 5 tasks x 2 lengths x 3 depths x 2",
        "retrieval-text,retrieval-image,counting-text,counting-image,reasoning-text",
        "1k,4k",
        "0,0.5,1.0",
        2,
    ),
    (
        "samples: same cells x 8",
        "retrieval-text,retrieval-image,counting-text,counting-image,reasoning-text",
        "1k,4k",
        "0,0.5,1.0",
        8,
    ),
    (
        "samples: same cells x 32",
        "retrieval-text,retrieval-image,counting-text,counting-image,reasoning-text",
        "1k,4k",
        "0,0.5,1.0",
        32,
    ),
    ("length: 1 x 64k", "retrieval-text", "64k", "0.5", 1),
    ("length: 1 x 256k", "retrieval-text", "256k", "0.5", 1),
    ("length: 1 x 1M", "retrieval-text", "1m", "0.5", 1),
    ("length: 1 x 1M, counting-image (needles in every image)", "counting-image", "1m", "0.5", 1),
)


def run_build(corpus: dict[str, Path], out: Path, tasks: str, lengths: str, depths: str, per_cell: int) -> dict[str, float]:
    if out.exists():
        shutil.rmtree(out)
    argv = [
        sys.executable,
        "-m",
        "needlepoint.cli",
        "build",
        "mm_niah",
        "--corpus",
        str(corpus["shards"]),
        "--images",
        str(corpus["images"]),
        "--out",
        str(out),
        "--tasks",
        tasks,
        "--lengths",
        lengths,
        "--depths",
        depths,
        "--per-cell",
        str(per_cell),
        "--seed",
        "0",
        "--no-progress",
    ]
    wall, _, rss_mb = measured(argv)
    samples = 0
    tokens = 0
    for path in (out / "mm_niah_val" / "annotations").glob("*.jsonl"):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                samples += 1
                tokens += json.loads(line)["meta"]["context_length"]
    return {"samples": samples, "tokens": tokens, "wall": wall, "rss_mb": rss_mb}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--documents", type=int, default=20000, help="corpus documents to generate (about 330 tokens each)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/np-bench-niah-build"))
    args = ap.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    corpus_dir = args.work / f"corpus-{args.documents}"
    if not (corpus_dir / "shards").is_dir():
        # In a child of its own: on Linux a child's ru_maxrss starts from its parent's RSS at fork,
        # so this process must stay small for the builds' peaks to be their own.
        code = f"from pathlib import Path; from needlepoint.demo.obelics import write_corpus; write_corpus(Path({str(corpus_dir)!r}), documents={args.documents}, image_pool=40)"
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO / "src")}, check=True)
    corpus = {"shards": corpus_dir / "shards", "images": corpus_dir / "img2dataset"}
    print(
        f"corpus: {args.documents} documents in {time.perf_counter() - t0:.1f} s "
        f"({sum(p.stat().st_size for p in corpus['shards'].iterdir()) / 2**20:.1f} MB of shards)\n"
    )
    print("| run | samples | tokens written | wall s | samples/s | tokens/s | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, tasks, lengths, depths, per_cell in RUNS:
        r = run_build(corpus, args.work / "out", tasks, lengths, depths, per_cell)
        print(
            f"| {label} | {r['samples']} | {r['tokens']:,} | {r['wall']:.1f} | {r['samples'] / r['wall']:.2f} | "
            f"{r['tokens'] / r['wall']:,.0f} | {r['rss_mb']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
