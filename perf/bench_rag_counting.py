"""MM-NIAH's RAG baseline when token counting is the bottleneck: `/tokenize` per piece against the
embedding model's own tokenizer loaded locally (`--embed-tokenizer`), at the same latencies.

    python perf/bench_rag_counting.py [--samples 24] [--tokens 30000] [--images-per-doc 30]
                                      [--delay-ms 100] [--concurrency 16] [--embed-concurrency 64]
                                      [--work /tmp/np-bench-rag-count] [--json OUT]

The simulated server (models/simulated.py) in its own process answers chat, `/v1/embeddings` and
`/tokenize`, each held --delay-ms; its `/tokenize` counts whitespace-separated words, and the
word-level tokenizer.json this script writes counts the same (the run checks that on its probes).
Both runs are `python -m needlepoint.cli eval mm_niah --solver rag ...` child processes on the
same documents (perf/bench_mm_niah_memory.py writes them); printed: samples/s, the requests of
each kind the server saw, and whether the two runs kept the same pieces of every sample.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def serve(delay_ms: float) -> int:
    """Chat, embeddings and /tokenize, each delayed; on SIGTERM print the request counts as JSON."""
    from needlepoint.models.simulated import SimulatedServer

    counts = {"embeddings": 0, "tokenize": 0}

    class Counting(list):  # type: ignore[type-arg]
        def append(self, item: object) -> None:
            counts[item[0]] += 1  # type: ignore[index]

    class NoLog(list):  # type: ignore[type-arg]
        def append(self, item: object) -> None:
            pass

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    d = delay_ms / 1000
    server = SimulatedServer(default="A", models=("bench",), delay_s=d, embed_delay_s=d, tokenize_delay_s=d)
    server.log = NoLog()
    server.embed_log = Counting()
    server.start()
    print(server.url, flush=True)
    while not stop.wait(0.5):
        pass
    server.stop()
    print(json.dumps(counts), flush=True)
    return 0


def word_tokenizer(folder: Path) -> Path:
    """A tokenizer.json counting whitespace-separated words, as the simulated /tokenize does."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def run(root: Path, out: Path, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """One RAG run against a fresh server; wall time, rate and the server's request counts."""
    from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME

    server = subprocess.Popen([sys.executable, __file__, "--serve", str(args.delay_ms)], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    cmd = [
        sys.executable, "-m", "needlepoint.cli", "eval", "mm_niah", "--data", str(root), "--split", "val",
        "--model", "bench", "--api-url", url, "--solver", "rag", "--embed-model", SIMULATED_EMBEDDER_NAME,
        "--embed-url", url, "--solver-option", f"embed_concurrency={args.embed_concurrency}",
        "--concurrency", str(args.concurrency), "--out", str(out), "--no-progress", "--no-report", *extra,
    ]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    server.send_signal(signal.SIGTERM)
    got, _ = server.communicate(timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"eval failed ({proc.returncode}): {proc.stderr[-2000:]}")
    requests = json.loads(got.strip().splitlines()[-1])
    return {"wall_s": wall, "samples_per_s": args.samples / wall, "requests": requests, "command": " ".join(cmd[2:])}


def kept(run_dir: Path) -> dict[str, Any]:
    """Every sample's retrieval note (what was kept, each needle's rank)."""
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines() if line]
    return {r["id"]: r["solver"]["rag"] for r in rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=24)
    p.add_argument("--tokens", type=int, default=30000)
    p.add_argument("--images-per-doc", type=int, default=30)
    p.add_argument("--delay-ms", type=float, default=100.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--embed-concurrency", type=int, default=64)
    p.add_argument("--work", type=Path, default=Path("/tmp/np-bench-rag-count"))
    p.add_argument("--json", type=Path)
    p.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve is not None:
        return serve(args.serve)
    import bench_mm_niah_memory as mem

    pool = args.work / f"images-{args.images_per_doc}"
    mem.write_images(pool, args.images_per_doc, docs=args.samples)
    root = args.work / f"data-{args.samples}-{args.tokens}"
    shape = mem.write_release(root, args.samples, pool, args.images_per_doc, args.tokens)
    stamp = time.strftime("%H%M%S")
    tok = word_tokenizer(args.work / "tokenizer")
    served = run(root, args.work / f"served-{stamp}", args, [])
    local = run(root, args.work / f"local-{stamp}", args, ["--embed-tokenizer", str(tok)])
    result = {
        "samples": args.samples,
        "mean_text_tokens": shape["mean_text_tokens"],
        "delay_ms": args.delay_ms,
        "served_tokenize": served,
        "local_tokenizer": local,
        "speedup": local["samples_per_s"] / served["samples_per_s"],
        "same_selection": kept(args.work / f"served-{stamp}") == kept(args.work / f"local-{stamp}"),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
