"""Time and peak memory of `needlepoint eval mm_niah --dry-run` on an MM-NIAH release layout, and
(optional) the time a `--serve vllm` server takes to answer.

    python perf/bench_dry_run.py [--sizes 200,800] [--tokens 30000] [--images-per-doc 20]
                                 [--work /tmp/np-bench-dry-run] [--tokenizer PATH]
                                 [--serve-bin PYTHON_OR_VLLM --serve-model DIR [--serve-arg ARGS]]

The release is the one perf/bench_mm_niah_memory.py writes (`mm_niah_val/annotations/<task>.jsonl`
and `images/`, documents of about --tokens tokens of real text with --images-per-doc 448x448
JPEGs each, distinct per document, plus 4 option images on retrieval-image rows). For each size
it runs, as a child process,

    python -m needlepoint.cli eval mm_niah --data DIR --split val --model Qwen/Qwen2.5-VL-7B-Instruct
        --dry-run --json --dry-run-file OUT [--tokenizer PATH]

and prints a Markdown table: wall time, samples/s, peak RSS (wait4 ru_maxrss), and what the dry
run counted (requests, images, bytes, prompt tokens, the longest prompt).

With --serve-bin and --serve-model it also times `serve.ServePlan`: from starting the server to
its first answer of /v1/models, and its stop.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mm_niah_memory as niah  # noqa: E402  (the release writer, shared)
from measure import with_bytecode  # noqa: E402


def dry_run(data: Path, out: Path, tokenizer: Path | None) -> dict[str, Any]:
    """One dry run as a child process: its counts, wall time and peak RSS."""
    cmd = [sys.executable, "-m", "needlepoint.cli", "eval", "mm_niah", "--data", str(data), "--split", "val"]
    cmd += ["--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--dry-run", "--json", "--dry-run-file", str(out)]
    cmd += ["--tokenizer", str(tokenizer)] if tokenizer else []
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    stdout = proc.stdout.read() if proc.stdout else ""
    if status != 0:
        raise SystemExit(f"the dry run failed: {proc.stderr.read() if proc.stderr else ''}")
    return {"wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "counts": json.loads(stdout)}


def serve_time(bin: str, model: str, args: list[str]) -> dict[str, float]:
    """Seconds from starting one server to its answer of /v1/models, and to its stop."""
    from needlepoint.serve import ServePlan, ServeSpec

    plan = ServePlan([ServeSpec("model", "vllm", model, args=tuple(args), bin=bin)], show_progress=False)
    folder = Path(f"/tmp/np-bench-serve-{os.getpid()}")
    t = time.perf_counter()
    with plan:
        plan.start(folder, max_images=1)
        ready = time.perf_counter() - t
        t = time.perf_counter()
    return {"ready_s": ready, "stop_s": time.perf_counter() - t}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,800", help="comma-separated sample counts (default 200,800)")
    parser.add_argument("--tokens", type=int, default=30000)
    parser.add_argument("--images-per-doc", type=int, default=20)
    parser.add_argument("--work", type=Path, default=Path("/tmp/np-bench-dry-run"))
    parser.add_argument("--tokenizer", type=Path, help="a tokenizer.json (or model folder) for --tokenizer")
    parser.add_argument("--serve-bin", help="the vLLM executable or a Python that has vLLM")
    parser.add_argument("--serve-model", help="a model folder for the server start time")
    parser.add_argument("--serve-arg", action="append", default=[], help="more server flags (split like a shell)")
    ns = parser.parse_args(argv)
    with_bytecode()

    pool = ns.work / f"images-{ns.images_per_doc}"
    count, total = niah.write_images(pool, ns.images_per_doc)
    print(f"images: {count} files, mean {total / count / 1024:.0f} KB", file=sys.stderr)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print()
    print(
        "| samples | wall (s) | samples/s | peak RSS (MB) | requests | images | request bytes (MB) | prompt tokens | longest prompt |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in [int(s) for s in ns.sizes.split(",") if s.strip()]:
        root = ns.work / f"data-{n}-{ns.tokens}-{ns.images_per_doc}"
        niah.write_release(root, n, pool, ns.images_per_doc, ns.tokens)
        r = dry_run(root, ns.work / f"requests-{n}.jsonl", ns.tokenizer)
        c = r["counts"]
        print(
            f"| {n} | {r['wall_s']:.1f} | {n / r['wall_s']:.0f} | {r['peak_rss_mb']:.0f} | {c['requests']} | {c['images']} | "
            f"{c['bytes'] / 1e6:.0f} | {c['prompt_tokens']} | {c['longest_prompt']['tokens']} |",
            flush=True,
        )
    if ns.serve_bin and ns.serve_model:
        args = [a for v in ns.serve_arg for a in shlex.split(v)]
        t = serve_time(ns.serve_bin, ns.serve_model, args)
        print(f"\nserver: answers /v1/models after {t['ready_s']:.1f} s, stops in {t['stop_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
