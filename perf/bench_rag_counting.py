"""MM-NIAH's RAG baseline when token counting is the bottleneck: `/tokenize` per piece against the
embedding model's own tokenizer loaded locally (`--embed-tokenizer`), at the same latencies.

    python perf/bench_rag_counting.py [--samples 24] [--tokens 30000] [--images-per-doc 30]
                                      [--delay-ms 100] [--concurrency 16] [--embed-concurrency 64]
                                      [--rounds 3] [--plain-server] [--profile DIR]
                                      [--work /tmp/np-bench-rag-count] [--json OUT]

The simulated server (models/simulated.py) in its own process answers chat, `/v1/embeddings` and
`/tokenize`, each held --delay-ms; its `/tokenize` counts whitespace-separated words, and the
word-level tokenizer.json this script writes counts the same (the run checks that on its probes).
A real embedding server computes vectors on its GPU, not on the client's cores, so by default the
simulated one makes each text's and image's vector (and its JSON) once and joins its answers from
those strings: the same bytes as the plain server's (checked at the start), at little CPU per
request (`--plain-server`: the vectors made per request, in Python).
Both runs are `python -m needlepoint.cli eval mm_niah --solver rag ...` child processes on the
same documents (perf/bench_mm_niah_memory.py writes them), `--rounds` pairs interleaved (the order
swapped each round); printed: samples/s (the whole command, start-up included), the load average
before and after each run, the requests of each kind the server saw, and whether the two runs kept
the same pieces of every sample; `--profile DIR` runs each client under cProfile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from measure import with_bytecode  # noqa: E402


def fast_server_class() -> type:
    """SimulatedServer whose embedding answers cost little CPU, as a GPU server's cost the client's
    cores nothing: each text's and image's vector, and its JSON, made once and kept by the text
    (the image's data URL's digest), the answer joined from those strings. The bytes are
    json.dumps of the answer the plain server builds (`same_answer` checks it at the start)."""
    import hashlib
    from typing import Any as _Any

    import orjson
    from aiohttp import web

    from needlepoint.models.simulated import SimulatedServer, simulated_token_count

    class FastServer(SimulatedServer):  # type: ignore[misc]
        image_table: Path | None = None  # vectors of the documents' images, made before the runs

        def __post_init__(self) -> None:
            super().__post_init__()
            self._texts: dict[str, tuple[str, int]] = {}
            self._images: dict[bytes, str] = {}
            if self.image_table is not None:
                table = json.loads(self.image_table.read_text())
                self._images = {bytes.fromhex(k): v for k, v in table.items()}

        def text_json(self, text: str) -> tuple[str, int]:
            got = self._texts.get(text)
            if got is None:
                got = self._texts[text] = (json.dumps(self.text_vector(text)), simulated_token_count(text))
            return got

        async def image_json(self, url: str) -> str:
            import base64

            key = hashlib.sha1(url.encode("ascii")).digest()
            got = self._images.get(key)
            if got is None:
                data = base64.b64decode(url.split(",", 1)[1])
                vector = await asyncio.get_running_loop().run_in_executor(None, self.image_vector, data)
                got = self._images[key] = json.dumps(vector)
            return got

        def answer_bytes(self, body: dict[str, _Any], vectors: list[str], tokens: int) -> bytes:
            rows = ", ".join(f'{{"index": {i}, "object": "embedding", "embedding": {v}}}' for i, v in enumerate(vectors))
            usage = f'{{"prompt_tokens": {tokens}, "total_tokens": {tokens}}}'
            return f'{{"object": "list", "model": {json.dumps(body["model"])}, "data": [{rows}], "usage": {usage}}}'.encode()

        async def _embeddings(self, request: _Any) -> _Any:
            refusal = self._refused(request)
            if refusal is not None:
                return refusal
            body = orjson.loads(await request.read())  # an image request holds ~100 KB of base64
            refusal = self._unknown_model(body)
            if refusal is not None:
                return refusal
            if self.embed_delay_s:
                await asyncio.sleep(self.embed_delay_s)
            if "messages" in body:
                self.embed_log.append(("embeddings", 1))
                content = [p for m in body["messages"] for p in m.get("content", [])]
                urls = [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]
                text = "".join(p.get("text", "") for p in content if p.get("type") == "text")
                vectors, tokens = ([await self.image_json(urls[0])] if urls else [self.text_json(text)[0]]), 0
            else:
                inputs = body.get("input")
                inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
                self.embed_log.append(("embeddings", len(inputs)))
                made = [self.text_json(str(t)) for t in inputs]
                vectors = [v for v, _ in made]
                tokens = sum(n for (_, n), t in zip(made, inputs) if isinstance(t, str))
            return web.Response(body=self.answer_bytes(body, vectors, tokens), content_type="application/json")

    return FastServer


def image_table(pool: Path, path: Path) -> Path:
    """The simulated vector (as JSON) of every image of the pool, by the digest of the data URL the
    client sends for it (its file's bytes, which pass through as they are): made once, before the
    runs, as a served model's work is not the client's. An image not in it is computed as it comes."""
    import base64
    import hashlib

    from needlepoint.models.simulated import simulated_image_embedding

    if not path.exists():
        table = {}
        for file in sorted(pool.rglob("*.jpg")):
            data = file.read_bytes()
            url = "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
            table[hashlib.sha1(url.encode("ascii")).hexdigest()] = json.dumps(simulated_image_embedding(data))
        path.write_text(json.dumps(table))
    return path


def same_answer(server_class: type) -> bool:
    """Whether the fast server answers texts and an image byte for byte as the plain one does."""
    import base64
    import io

    from PIL import Image

    from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME, SimulatedServer

    out = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 30, 40)).save(out, format="JPEG")
    url = "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii")
    bodies = [
        {"model": SIMULATED_EMBEDDER_NAME, "input": ["summarize:", "summarize: The penguin sings 12 times.", ""]},
        {
            "model": SIMULATED_EMBEDDER_NAME,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
        },
    ]
    import urllib.request

    def post(base: str, body: dict[str, Any]) -> bytes:
        req = urllib.request.Request(base + "/embeddings", json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return bytes(resp.read())

    with SimulatedServer() as plain, server_class() as fast:
        return all(post(plain.url, b) == post(fast.url, b) == post(fast.url, b) for b in bodies)


def serve(delay_ms: float, fast: bool, images: Path | None = None) -> int:
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
    cls = fast_server_class() if fast else SimulatedServer
    if fast:
        cls.image_table = images
    server = cls(default="A", models=("bench",), delay_s=d, embed_delay_s=d, tokenize_delay_s=d)
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


def run(root: Path, out: Path, args: argparse.Namespace, extra: list[str], profile: Path | None = None) -> dict[str, Any]:
    """One RAG run against a fresh server; wall time, rate and the server's request counts."""
    from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME

    serve_cmd = [sys.executable, __file__, "--serve", str(args.delay_ms)]
    serve_cmd += ["--plain-server"] if args.plain_server else ["--image-table", str(args.image_table)]
    server = subprocess.Popen(serve_cmd, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    cmd = [
        sys.executable, "-m", "needlepoint.cli", "eval", "mm_niah", "--data", str(root), "--split", "val",
        "--model", "bench", "--api-url", url, "--solver", "rag", "--embed-model", SIMULATED_EMBEDDER_NAME,
        "--embed-url", url, "--solver-option", f"embed_concurrency={args.embed_concurrency}",
        "--concurrency", str(args.concurrency), "--out", str(out), "--no-progress", "--no-report", *extra,
    ]  # fmt: skip
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    prefix = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", *cmd[2:]] if profile else cmd
    proc = subprocess.run(prefix, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    mid = resource.getrusage(resource.RUSAGE_CHILDREN)  # the client's CPU: the server is not reaped yet
    server.send_signal(signal.SIGTERM)
    got, _ = server.communicate(timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"eval failed ({proc.returncode}): {proc.stderr[-2000:]}")
    requests = json.loads(got.strip().splitlines()[-1])
    return {
        "wall_s": round(wall, 2),
        "samples_per_s": round(args.samples / wall, 3),
        "load_average_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
        "client_cpu_s": round(mid.ru_utime + mid.ru_stime - before.ru_utime - before.ru_stime, 2),
        "server_cpu_s": round(after.ru_utime + after.ru_stime - mid.ru_utime - mid.ru_stime, 2),
        "requests": requests,
        "command": " ".join(cmd[2:]),
    }


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
    p.add_argument("--rounds", type=int, default=3, help="pairs of runs, interleaved (medians printed)")
    p.add_argument("--plain-server", action="store_true", help="the plain simulated server (vectors made per request)")
    p.add_argument("--profile", type=Path, help="a folder for each run's cProfile of the client")
    p.add_argument("--json", type=Path)
    p.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    p.add_argument("--image-table", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve is not None:
        return serve(args.serve, fast=not args.plain_server, images=args.image_table)
    with_bytecode()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    import bench_mm_niah_memory as mem

    pool = args.work / f"images-{args.images_per_doc}"
    mem.write_images(pool, args.images_per_doc, docs=args.samples)
    root = args.work / f"data-{args.samples}-{args.tokens}"
    shape = mem.write_release(root, args.samples, pool, args.images_per_doc, args.tokens)
    tok = word_tokenizer(args.work / "tokenizer")
    if not args.plain_server:
        assert same_answer(fast_server_class()), "the fast server must answer as the plain one does"
        args.image_table = image_table(pool, args.work / f"image-vectors-{args.images_per_doc}-{args.samples}.json")
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):  # interleaved, the order swapped each round: the machine is shared
        stamp = time.strftime("%H%M%S") + f"-{r}"
        order = ["served", "local"] if r % 2 == 0 else ["local", "served"]
        got: dict[str, Any] = {}
        for kind in order:
            extra = ["--embed-tokenizer", str(tok)] if kind == "local" else []
            profile = args.profile / f"{kind}-{r}.prof" if args.profile else None
            got[kind] = run(root, args.work / f"{kind}-{stamp}", args, extra, profile)
        got["speedup"] = round(got["local"]["samples_per_s"] / got["served"]["samples_per_s"], 2)
        got["same_selection"] = kept(args.work / f"served-{stamp}") == kept(args.work / f"local-{stamp}")
        rounds.append(got)
        brief = {
            k: v if not isinstance(v, dict) else [v["samples_per_s"], v["client_cpu_s"], v["server_cpu_s"]]
            for k, v in got.items()
        }
        print(json.dumps(brief), flush=True)  # samples/s, client and server CPU seconds
    median = statistics.median
    result = {
        "samples": args.samples,
        "mean_text_tokens": shape["mean_text_tokens"],
        "delay_ms": args.delay_ms,
        "server": "plain" if args.plain_server else "fast (vectors made once per text, answers joined from kept JSON)",
        "rounds": rounds,
        "median_samples_per_s": {k: median(r[k]["samples_per_s"] for r in rounds) for k in ("served", "local")},
        "median_client_cpu_s_per_sample": {
            k: round(median(r[k]["client_cpu_s"] for r in rounds) / args.samples, 4) for k in ("served", "local")
        },
        "median_speedup": median(r["speedup"] for r in rounds),
        "same_selection": all(r["same_selection"] for r in rounds),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
