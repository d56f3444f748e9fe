"""MM-NIAH's RAG baseline (`--solver rag`): embedding throughput and the memory of a long run.

    python perf/bench_rag.py [--delay-ms 100] [--texts 4096] [--images 64] [--counts 4096]
                             [--samples 200] [--tokens 30000] [--images-per-doc 20] [--concurrency 16]
                             [--work /tmp/np-bench-rag] [--skip-memory] [--json OUT]

1. Throughput: the simulated embedding server (models/simulated.py) in its own process, each
   `/v1/embeddings` request held --delay-ms before it is answered (`/tokenize` answers at once);
   the served embedder (models/embeddings.py, its defaults: 64 texts a request, 8 embedding
   requests and 64 /tokenize requests in flight) embeds --texts distinct texts, --images
   distinct 448x448 JPEGs and counts the tokens of --counts texts; texts/s, images/s, counts/s.
2. Memory: a 200-sample MM-NIAH set of documents of about --tokens tokens and --images-per-doc
   images (perf/bench_mm_niah_memory.py writes it), answered by
   `python -m needlepoint.cli eval mm_niah ... --solver rag --embed-url URL ...` as a child process
   against the same simulated server with no delay (chat and embeddings); its peak RSS from wait4,
   wall time and the embedding requests the server saw. Target: under 1.5 GB, as for plain MM-NIAH.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from measure import with_bytecode

HERE = Path(__file__).resolve().parent


def _memory_bench() -> Any:
    """perf/bench_mm_niah_memory.py as a module: its data writer is reused."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import bench_mm_niah_memory

    return bench_mm_niah_memory


class _NoLog(list):  # type: ignore[type-arg]
    """A log that keeps nothing (the server's logs would hold every document's text)."""

    def append(self, item: object) -> None:
        pass


def serve(delay_ms: float) -> int:
    """Serve the simulated chat model ("A") and embedder until SIGTERM; print the URL first; on
    SIGTERM print the embedding request counts as JSON."""
    from needlepoint.models.simulated import SimulatedServer

    counts = {"embeddings": 0, "tokenize": 0, "inputs": 0}

    class Counting(_NoLog):
        def append(self, item: object) -> None:
            kind, n = item  # type: ignore[misc]
            counts[kind] += 1
            counts["inputs"] += n if kind == "embeddings" else 0

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = SimulatedServer(default="A", models=("bench",), embed_delay_s=delay_ms / 1000)
    server.log = _NoLog()
    server.embed_log = Counting()
    server.start()
    print(server.url, flush=True)
    while not stop.wait(0.5):
        pass
    server.stop()
    print(json.dumps(counts), flush=True)
    return 0


class Server:
    """`serve()` in a child process."""

    def __init__(self, delay_ms: float) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(delay_ms)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            raise SystemExit("the simulated server did not start")

    def stop(self) -> dict[str, int]:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        return json.loads(out.strip().splitlines()[-1])


def throughput(url: str, n_texts: int, n_images: int, n_counts: int, work: Path) -> dict[str, Any]:
    """Embed texts, images, count tokens with the served embedder's defaults; rates per second."""
    mem = _memory_bench()
    from needlepoint.core.conversation import ImageRef
    from needlepoint.models.embeddings import ServedEmbedder
    from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME

    pool = work / "throughput-images"
    pool.mkdir(parents=True, exist_ok=True)
    refs = []
    for k in range(n_images):
        path = pool / f"img{k:03d}.jpg"
        mem._image((path, 5000 + k))
        refs.append(ImageRef(key=path.name, path=path))
    texts = [f"summarize:Sentence number {i} of the long document about harbour {i % 97}." for i in range(n_texts)]
    counts = [t[len("summarize:") :] for t in texts[:n_counts]]

    async def go() -> dict[str, float]:
        emb = ServedEmbedder(SIMULATED_EMBEDDER_NAME, url)
        try:
            await emb.check()
            t = time.perf_counter()
            await emb.embed_texts(texts)
            text_s = time.perf_counter() - t
            t = time.perf_counter()
            await emb.embed_images(refs)
            image_s = time.perf_counter() - t
            t = time.perf_counter()
            await emb.count_tokens(counts)
            count_s = time.perf_counter() - t
        finally:
            await emb.aclose()
        return {"texts_s": text_s, "images_s": image_s, "counts_s": count_s}

    took = asyncio.run(go())
    return {
        "texts": n_texts,
        "texts_per_s": n_texts / took["texts_s"],
        "text_wall_s": took["texts_s"],
        "images": n_images,
        "images_per_s": n_images / took["images_s"],
        "image_wall_s": took["images_s"],
        "counts": n_counts,
        "counts_per_s": n_counts / took["counts_s"],
        "count_wall_s": took["counts_s"],
    }


def memory(url: str, n: int, tokens: int, images_per_doc: int, concurrency: int, work: Path) -> dict[str, Any]:
    """A RAG run of n samples as a child process: peak RSS (wait4), wall time, failures."""
    from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME

    mem = _memory_bench()
    pool = work / f"images-{images_per_doc}"
    mem.write_images(pool, images_per_doc)
    root = work / f"data-{n}-{tokens}-{images_per_doc}"
    shape = mem.write_release(root, n, pool, images_per_doc, tokens)
    run_dir = work / "runs" / f"rag-{n}-{time.strftime('%H%M%S')}"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "needlepoint.cli",
        "eval",
        "mm_niah",
        "--data",
        str(root),
        "--split",
        "val",
        "--model",
        "bench",
        "--api-url",
        url,
        "--solver",
        "rag",
        "--embed-model",
        SIMULATED_EMBEDDER_NAME,
        "--embed-url",
        url,
        "--out",
        str(run_dir),
        "--concurrency",
        str(concurrency),
        "--no-progress",
        "--no-report",
    ]
    log = run_dir.with_suffix(".log")
    t0 = time.perf_counter()
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"eval failed with exit code {os.waitstatus_to_exitcode(status)}; see {log}")
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    pieces = [r["solver"]["rag"]["pieces"] for r in records]
    return {
        "samples": n,
        "mean_text_tokens": shape["mean_text_tokens"],
        "text_mb": shape["text_mb"],
        "mean_pieces": sum(pieces) / len(pieces),
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "wall_s": wall,
        "samples_per_s": n / wall,
        "failed": sum(1 for r in records if r.get("status") != "done"),
        "cache_mb": sum(p.stat().st_size for p in (run_dir / "cache" / "rag").glob("*.json")) / 1e6,
        "command": " ".join(cmd),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=100.0, help="delay of each embedding request (throughput part)")
    parser.add_argument("--texts", type=int, default=4096)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--counts", type=int, default=4096)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=30000)
    parser.add_argument("--images-per-doc", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--work", type=Path, default=Path("/tmp/np-bench-rag"))
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.serve is not None:
        return serve(ns.serve)
    with_bytecode()
    ns.work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {
        "machine": f"{platform.node()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    server = Server(ns.delay_ms)
    try:
        out["throughput"] = throughput(server.url, ns.texts, ns.images, ns.counts, ns.work)
    finally:
        out["throughput_requests"] = server.stop()
    t = out["throughput"]
    print(
        f"throughput at {ns.delay_ms:g} ms an embedding request: {t['texts_per_s']:.0f} texts/s ({t['texts']} in "
        f"{t['text_wall_s']:.1f} s), {t['images_per_s']:.1f} images/s ({t['images']} in {t['image_wall_s']:.1f} s), "
        f"{t['counts_per_s']:.0f} token counts/s ({t['counts']} in {t['count_wall_s']:.1f} s)"
    )
    if not ns.skip_memory:
        server = Server(0.0)
        try:
            out["memory"] = memory(server.url, ns.samples, ns.tokens, ns.images_per_doc, ns.concurrency, ns.work)
        finally:
            out["memory_requests"] = server.stop()
        m = out["memory"]
        print(
            f"memory: {m['samples']} samples of {m['mean_text_tokens']:.0f} text tokens ({m['mean_pieces']:.0f} pieces) each: "
            f"peak RSS {m['peak_rss_mb']:.0f} MB, {m['wall_s']:.1f} s ({m['samples_per_s']:.2f} samples/s), "
            f"{m['failed']} failed, cache {m['cache_mb']:.1f} MB; server saw {out['memory_requests']}"
        )
        print(f"command: {m['command']}")
    print(out["machine"], out["when"])
    if ns.json:
        ns.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
