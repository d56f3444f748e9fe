"""Peak memory of `needlepoint eval mm_niah` on long interleaved documents, by sample count.

    python perf/bench_mm_niah_memory.py [--sizes 50,200] [--tokens 30000-100000] [--images-per-doc 20-60]
                                              [--docs 0] [--concurrency 16] [--delay-ms 0] [--report] [--bytes-only]
                                              [--processes 1] [--local-images] [--gc] [--keep-runs]
                                              [--work /tmp/np-bench-mm-niah] [--profile]
                                              [--trees OLD/src,NEW/src --rounds 3]

Writes MM-NIAH release folders of N samples, by default in the release's shape (issue 45): every
document with images of its own (--docs 0; --docs D lets samples past D reuse the images of
earlier documents, as this script did before, about four uses an image at 200 documents of
--docs 50), 30k-100k tokens of real text a document (--tokens LO-HI spread evenly; a single
number T: spread over T-28k..T+28k, as before), 20-60 448x448 noisy JPEGs of 50-100 KB a document
(--images-per-doc LO-HI spread evenly, or one number), plus 4 option images on retrieval-image
rows. It serves the simulated model in its own process (perf/serve_simulated.py: one fixed reply
after --delay-ms), runs

    python -m needlepoint.cli eval mm_niah --data DIR --split val --model bench --api-url URL
        --out RUN --concurrency 16 --no-progress --no-report

(without --no-report when --report) as a child process for each N, and prints a Markdown table:
peak RSS of that child (wait4 ru_maxrss), wall time, samples/s, the rate at the server while it
answers (samples / (last arrival - first sample's arrival + delay); --local-images' probe, one
request before the run, is not a sample's) against the ideal N / (ceil(N / concurrency) x delay), the child's CPU seconds (and its first thread's, the event loop's: the bound when it nears the wall), mean request bytes, and the time
spent loading, answering and finishing (scoring, leaderboard files, heatmaps with --report).
The server's CPU seconds during the run are printed too: a server that parses every 4 MB body
bounds the rate itself; with --bytes-only it reads bodies without parsing them (serve_simulated.py).
--local-images runs the eval with it: the images go as file:// URLs and the server reads the files.
A release written before with the same arguments is used as it is, and each run folder is removed
once measured (--keep-runs keeps them): files written just before a run were written back to
disk by the kernel while it ran, on the cores it was timed on. The watcher counts the stored
records by reading what was appended since its last look (measure.GrowingLines).
Targets: peak RSS under 1.5 GB, flat in N; at 100 ms and --concurrency 64 on the release's shape,
70% of the ideal rate as a user types the command (base64, --report) and 85% with --local-images
(issue 45).

--trees A,B runs the command from each source folder in turn (PYTHONPATH), --rounds times, against
one server, and prints each run's share of the ideal and the medians by tree: a change measured
against the tree before it, interleaved, in the same hour. E.g. the issue-45 figures:

    git -C . archive HEAD | tar -x -C /tmp/old    # the tree before
    python perf/bench_mm_niah_memory.py --sizes 200 --concurrency 64 --delay-ms 100 --bytes-only \
        --report --trees /tmp/old/src,src --rounds 3            # as typed; --local-images for the other

--profile additionally loads the largest set in this process under tracemalloc and prints where
the memory held by the loaded samples is allocated (the part that grows with N).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from measure import GrowingLines, ServerProcess, with_bytecode

TASKS = ("retrieval-text", "retrieval-image", "counting-text", "counting-image", "reasoning-text", "reasoning-image")
IMAGE_TOKENS = 256
SIDE = 448
WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no will more about can its into than them "
    "only other new some could time these two may then first any my now such like our over man me even most made "
    "after also did many before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get here between both life "
    "being under never day same another know while last might us great old year off come since against go came "
    "right used take three harbour river market library committee bakery morning evening village council bridge "
    "winter summer lantern garden window street station letter museum farmer teacher doctor engineer painter"
).split()


# --- data --------------------------------------------------------------------------------------------


def _image(args: tuple[Path, int]) -> int:
    """A 448x448 JPEG: a gradient with noise, 50-100 KB, different for every seed."""
    import io

    import numpy as np
    from PIL import Image

    path, seed = args
    if path.exists():
        return path.stat().st_size
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:SIDE, 0:SIDE]
    a, b, c = rng.uniform(0.2, 0.8, 3)
    base = np.stack([(xx * a + seed) % 256, (yy * b + 3 * seed) % 256, ((xx + yy) * c) % 256], -1)
    arr = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(arr).save(out, format="JPEG", quality=90)
    path.write_bytes(out.getvalue())
    return len(out.getvalue())


def _text(rng: random.Random, chars: int) -> list[str]:
    """Sentences of common words adding up to about `chars` characters."""
    sentences, total = [], 0
    while total < chars:
        words = rng.choices(WORDS, k=rng.randint(8, 22))
        sentence = " ".join(words).capitalize() + ". "
        sentences.append(sentence)
        total += len(sentence)
    return sentences


def span(text: str) -> tuple[int, int]:
    """`LO-HI` or one number `N` (N-N) as a (lo, hi) pair."""
    lo, _, hi = str(text).partition("-")
    return int(lo), int(hi or lo)


def images_of(doc: int, images_per_doc: tuple[int, int]) -> int:
    """How many images document `doc` holds: spread evenly over the span, the same for a doc."""
    lo, hi = images_per_doc
    return lo + (doc * 7907) % (hi - lo + 1)


def _row(
    i: int, n: int, rng: random.Random, images_per_doc: tuple[int, int], tokens: tuple[int, int], docs: int = 0
) -> tuple[str, dict[str, Any]]:
    task = TASKS[i % len(TASKS)]
    doc = i % docs if docs else i  # with `docs`, documents past it reuse the images of an earlier one
    # Lengths spread evenly over [lo, hi] tokens of text (one number T: [T-28k, T+28k]), shuffled.
    spread = (i * 7919) % n / max(1, n - 1)
    lo, hi = tokens
    if lo != hi:
        text_tokens = int(lo + (hi - lo) * spread)
    else:
        text_tokens = int(lo - 28000 + 56000 * spread) if lo >= 28000 else int(lo * (0.1 + 1.8 * spread))
    images = [f"doc{doc:03d}/img{k:02d}.jpg" for k in range(images_of(doc, images_per_doc))]
    sentences = _text(rng, 4 * text_tokens)
    step = max(1, len(sentences) // (len(images) + 1))
    for k in range(len(images)):
        at = min(len(sentences) - 1, (k + 1) * step)
        sentences[at] = "<image>" + sentences[at]
    depth = round(rng.random(), 3)
    needle = f"The secret word of the archive is {rng.choice(WORDS)}. "
    sentences.insert(int(depth * len(sentences)), needle)
    meta: dict[str, Any] = {"placed_depth": depth, "choices": None, "choices_image_path": None}
    question, answer = "What is the secret word of the archive?", "x"
    if task == "retrieval-image":
        meta["choices_image_path"] = [f"doc{doc:03d}/opt{k}.jpg" for k in range(4)]
        question, answer = "Which of the following images appears in the document?", 1
    elif task == "reasoning-image":
        meta["choices"] = ["The camera is moving left.", "The camera is moving right."]
        question, answer = "Which way is the camera moving?", 0
    elif task.startswith("counting"):
        meta["placed_depth"] = [depth, min(1.0, depth + 0.1)]
        question, answer = "How many needles did the penguin count in each statement?", [1, 2]
    meta.update(
        context_length=text_tokens + IMAGE_TOKENS * len(images),
        context_length_text=text_tokens,
        context_length_image=IMAGE_TOKENS * len(images),
        num_images=len(images),
        needles=[needle.strip()],
    )
    row = {"id": i, "images_list": images, "context": "".join(sentences), "question": question, "answer": answer, "meta": meta}
    return task, row


def write_images(pool: Path, images_per_doc: tuple[int, int], docs: int = 200) -> tuple[int, int]:
    """The shared images folder: `docs` documents of distinct images (+4 options each)."""
    jobs = []
    for d in range(docs):
        (pool / f"doc{d:03d}").mkdir(parents=True, exist_ok=True)
        jobs += [(pool / f"doc{d:03d}" / f"img{k:02d}.jpg", d * 100 + k) for k in range(images_of(d, images_per_doc))]
        jobs += [(pool / f"doc{d:03d}" / f"opt{k}.jpg", d * 100 + 90 + k) for k in range(4)]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        sizes = list(ex.map(_image, jobs, chunksize=64))
    return len(sizes), sum(sizes)


def write_release(
    root: Path, n: int, pool: Path, images_per_doc: tuple[int, int], tokens: tuple[int, int], docs: int = 0
) -> dict[str, float]:
    """`root/mm_niah_val/` with n rows over the six tasks; images/ links to the shared pool. The
    rows are the same for the same arguments (a seeded generator), so a release written before is
    kept (`root/bench-release.json` says with which): writing 200 MB again before each measured run
    left the kernel writing it back to disk while the run was timed, on the same two cores."""
    folder = root / "mm_niah_val"
    made = root / "bench-release.json"
    asked: dict[str, Any] = {
        "n": n,
        "images_per_doc": list(images_per_doc),
        "tokens": list(tokens),
        "docs": docs,
        "pool": str(pool.resolve()),
    }
    if images_per_doc[0] == images_per_doc[1] and tokens[0] == tokens[1]:  # as this script wrote it before
        asked.update(images_per_doc=images_per_doc[0], tokens=tokens[0])
    whole = made.exists() and all((folder / "annotations" / f"{t}.jsonl").is_file() for t in TASKS)
    if whole:
        kept = json.loads(made.read_text())
        if kept.get("asked") == asked:
            return dict(kept["shape"])
    (folder / "annotations").mkdir(parents=True, exist_ok=True)
    link = folder / "images"
    if not link.exists():
        link.symlink_to(pool.resolve(), target_is_directory=True)
    rng = random.Random(f"bench-{n}")
    files = {t: (folder / "annotations" / f"{t}.jsonl").open("w", encoding="utf-8") for t in TASKS}
    lengths, chars, pictures = [], 0, set()
    try:
        for i in range(n):
            task, row = _row(i, n, rng, images_per_doc, tokens, docs)
            files[task].write(json.dumps(row) + "\n")
            lengths.append(row["meta"]["context_length_text"])
            pictures.update(row["images_list"])
            chars += len(row["context"])
    finally:
        for fh in files.values():
            fh.close()
    shape = {"mean_text_tokens": sum(lengths) / n, "text_mb": chars / 1e6, "distinct_images": len(pictures)}
    made.write_text(json.dumps({"asked": asked, "shape": shape}) + "\n")  # last: a release cut short is written again
    return shape


# --- one measured run --------------------------------------------------------------------------------


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _main_thread_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of a process's first thread so far: the event loop's thread of
    `needlepoint eval`, apart from its worker threads."""
    try:
        fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    data: Path,
    n: int,
    server: ServerProcess,
    run_dir: Path,
    concurrency: int,
    delay_ms: float = 0.0,
    report: bool = False,
    processes: int = 1,
    local_images: bool = False,
    gc_tally: bool = False,
) -> dict[str, Any]:
    """Run the eval as a child process; its peak RSS, phase times, request sizes, and the rate at
    the server (samples / (last arrival - first sample's arrival + delay), `serving`) against the ideal
    n / (ceil(n / concurrency) x delay)."""
    url = server.url
    cmd = [
        sys.executable,
        "-m",
        "needlepoint.cli",
        "eval",
        "mm_niah",
        "--data",
        str(data),
        "--split",
        "val",
        "--model",
        "bench",
        "--api-url",
        url,
        "--out",
        str(run_dir),
        "--concurrency",
        str(concurrency),
        "--no-progress",
        *([] if report else ["--no-report"]),
        *(["--processes", str(processes)] if processes > 1 else []),
        *(["--local-images"] if local_images else []),
    ]
    gc_file = run_dir.with_suffix(".gc.json")
    if gc_tally:  # the same command, its garbage collections timed (perf/gc_tally.py)
        cmd = [sys.executable, str(Path(__file__).resolve().parent / "gc_tally.py"), str(gc_file), *cmd[3:]]
    server.stats()  # restart the counters
    server_cpu = server.cpu_s()
    log = run_dir.with_suffix(".log")
    t0 = time.perf_counter()
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    marks: dict[str, float] = {}
    rss_trace: list[tuple[float, int]] = []
    done = threading.Event()
    stored = GrowingLines(run_dir / "records.jsonl")

    def watch() -> None:
        while not done.is_set():
            now = time.perf_counter() - t0
            rss_trace.append((now, _rss_kb(proc.pid)))
            loop_cpu = _main_thread_cpu_s(proc.pid)
            if loop_cpu is not None:
                marks["loop_cpu"] = loop_cpu  # the last reading, at most 0.1 s before the end
            if "loaded" not in marks and (run_dir / "run.json").exists():
                marks["loaded"] = now
            if "answered" not in marks and stored() >= n:
                marks["answered"] = now
            done.wait(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    arrivals = server.stats()
    server_cpu = server.cpu_s() - server_cpu
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"eval failed with exit code {proc.returncode}; see {log}")
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    sizes = [r["turns"][0]["request_bytes"] for r in records if r.get("turns")]
    loaded = marks.get("loaded", 0.0)
    answered = marks.get("answered", wall)
    rss_at_load = max((kb for t, kb in rss_trace if t <= loaded), default=0)
    peak_at = max(rss_trace, key=lambda item: item[1], default=(0.0, 0))[0]
    phase = "load" if peak_at <= loaded else "answer" if peak_at <= answered else "finish"
    return {
        "samples": n,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "rss_after_load_mb": rss_at_load / 1024,
        "peak_phase": phase,
        "wall_s": wall,
        "samples_per_s": n / wall,
        "answer_rate": n / max(answered - loaded, 1e-9),
        "load_s": loaded,
        "answer_s": answered - loaded,
        "finish_s": wall - answered,
        "mean_request_mb": sum(sizes) / len(sizes) / 1e6,
        "max_request_mb": max(sizes) / 1e6,
        "failed": sum(1 for r in records if r.get("status") != "done"),
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "loop_cpu_s": marks.get("loop_cpu", float("nan")),
        "gc": json.loads(gc_file.read_text()) if gc_tally else None,
        "server_cpu_s": server_cpu,
        "load_average": os.getloadavg()[0],
        **serving(arrivals, n, concurrency, delay_ms),
        "command": " ".join(cmd),
    }


def serving(arrivals: dict[str, Any], n: int, concurrency: int, delay_ms: float) -> dict[str, Any]:
    """Samples per second at the server while it answers, and the ideal at `delay_ms` (none at 0).
    The window starts at the first sample's request: requests beyond the `n` samples' come first
    (--local-images' probe, one chat request before the run) and are dropped from it."""
    delay = delay_ms / 1000
    if not arrivals.get("requests") or arrivals.get("first") is None:
        return {"serving_rate": float("nan"), "ideal_rate": float("nan"), "requests": 0}
    probes, head = arrivals["requests"] - n, arrivals.get("head") or []
    first = head[probes] if 0 < probes < len(head) else arrivals["first"]
    window = arrivals["last"] - first + delay
    ideal = n / (math.ceil(n / concurrency) * delay) if delay else float("nan")
    return {"serving_rate": n / window if window > 0 else float("nan"), "ideal_rate": ideal, "requests": arrivals["requests"]}


def profile_load(data: Path, top: int = 8) -> None:
    """Where the memory of the loaded samples comes from (tracemalloc, by line)."""
    import tracemalloc

    from needlepoint.benchmarks.mm_niah.benchmark import MmNiah

    tracemalloc.start(5)
    base = tracemalloc.take_snapshot()
    samples = MmNiah(split="val").load(data)
    snap = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    print(f"\ntracemalloc, loading {len(samples)} samples: held {current / 1e6:.1f} MB, peak {peak / 1e6:.1f} MB")
    for stat in snap.compare_to(base, "lineno")[:top]:
        print(f"  {stat.size_diff / 1e6:8.1f} MB  {stat.traceback[0]}")
    del samples
    tracemalloc.stop()


def alternate(ns: argparse.Namespace, sizes: list[int], sets: dict[int, Any], server: ServerProcess) -> int:
    """The command from each of --trees in turn (PYTHONPATH), --rounds times: each run's share of
    the ideal rate at the server, CPU and peak RSS, then the medians by tree."""
    import statistics

    trees = [t for t in ns.trees.split(",") if t]
    got: dict[tuple[str, int], list[dict[str, Any]]] = {}
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}: {os.cpu_count()} cores; "
        f"{ns.images_per_doc} images a document, "
        f"{'each document its own images' if not ns.docs else f'the images of {ns.docs} documents reused'}, "
        f"{ns.tokens} tokens; --concurrency {ns.concurrency}, {ns.delay_ms:g} ms, {'report on' if ns.report else '--no-report'}"
        f"{', --local-images' if ns.local_images else ''}"
    )
    print("| round | tree | samples | of the ideal | wall (s) | CPU (s) | peak RSS (MB) | load average |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for k in range(ns.rounds):
        for tree in trees:
            os.environ["PYTHONPATH"] = tree
            for n in sizes:
                root, shape = sets[n]
                run_dir = work_run(ns.work, n)
                r = measure(root, n, server, run_dir, ns.concurrency, ns.delay_ms, ns.report, ns.processes, ns.local_images)
                shutil.rmtree(run_dir, ignore_errors=True)
                got.setdefault((tree, n), []).append(r)
                print(
                    f"| {k + 1} | {tree} | {n} | {r['serving_rate'] / r['ideal_rate']:.1%} | {r['wall_s']:.2f} | "
                    f"{r['cpu_s']:.2f} | {r['peak_rss_mb']:.0f} | {r['load_average']:.1f} |",
                    flush=True,
                )
    print("\n| tree | samples | distinct images | of the ideal, median (range) | wall (s), median | peak RSS (MB), median |")
    print("|---|---:|---:|---:|---:|---:|")
    for (tree, n), rs in got.items():
        share = [r["serving_rate"] / r["ideal_rate"] for r in rs]
        print(
            f"| {tree} | {n} | {sets[n][1].get('distinct_images', '?')} | {statistics.median(share):.1%} "
            f"({min(share):.1%}-{max(share):.1%}) | {statistics.median(r['wall_s'] for r in rs):.2f} | "
            f"{statistics.median(r['peak_rss_mb'] for r in rs):.0f} |"
        )
    print(f"\ncommand: {rs[-1]['command']}")
    return 0


def work_run(work: Path, n: int) -> Path:
    run_dir = work / "runs" / f"run-{n}-{time.strftime('%H%M%S')}-{os.getpid()}"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    return run_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,200", help="comma-separated sample counts (default 50,200)")
    parser.add_argument(
        "--tokens",
        default="30000-100000",
        help="tokens of text a document: LO-HI, or a mean T (T-28k..T+28k) (default 30000-100000)",
    )
    parser.add_argument("--images-per-doc", default="20-60", help="images a document: LO-HI or one number (default 20-60)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--docs",
        type=int,
        default=0,
        help="documents of distinct images in the pool; samples past it reuse them (default 0: each document its own, as the release)",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/np-bench-mm-niah"), help="data and run folders")
    parser.add_argument("--profile", action="store_true", help="tracemalloc the loading of the largest set")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="the server's answer time (default 0)")
    parser.add_argument("--report", action="store_true", help="with the report (default --no-report)")
    parser.add_argument("--processes", type=int, default=1, help="eval --processes N (default 1)")
    parser.add_argument("--local-images", action="store_true", help="eval --local-images: the server reads the files")
    parser.add_argument("--keep-runs", action="store_true", help="keep each run folder (default: removed once measured)")
    parser.add_argument("--gc", action="store_true", help="time the command's garbage collections (perf/gc_tally.py)")
    parser.add_argument(
        "--bytes-only",
        action="store_true",
        help="the server reads each body without parsing it (serve_simulated.py --bytes-only)",
    )
    parser.add_argument(
        "--trees",
        help="comma-separated source folders (e.g. OLD/src,NEW/src): the command run from each in turn, "
        "--rounds times, PYTHONPATH set to it; prints each run and the medians by tree",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --trees (default 3)")
    ns = parser.parse_args(argv)
    with_bytecode(*(Path(t) for t in (ns.trees or "").split(",") if t))

    sizes = [int(s) for s in ns.sizes.split(",") if s.strip()]
    work = ns.work
    per_doc, tokens = span(ns.images_per_doc), span(ns.tokens)
    pool = work / f"images-{ns.images_per_doc}"
    t = time.perf_counter()
    count, total = write_images(pool, per_doc, ns.docs or max(sizes))
    print(f"images: {count} files, mean {total / count / 1024:.0f} KB ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    sets = {}
    for n in sizes:
        root = work / f"data-{n}-{ns.tokens}-{ns.images_per_doc}-{ns.docs}"
        sets[n] = (root, write_release(root, n, pool, per_doc, tokens, ns.docs))

    server = ServerProcess(ns.delay_ms, work, "bench", ["--reply", "A", *(["--bytes-only"] if ns.bytes_only else [])]).start()
    if ns.trees:
        try:
            return alternate(ns, sizes, sets, server)
        finally:
            server.stop()
    try:
        results = []
        for n in sizes:
            root, shape = sets[n]
            run_dir = work / "runs" / f"run-{n}-{time.strftime('%H%M%S')}"
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            print(f"running {n} samples ...", file=sys.stderr)
            res = measure(root, n, server, run_dir, ns.concurrency, ns.delay_ms, ns.report, ns.processes, ns.local_images, ns.gc)
            if not ns.keep_runs:  # measured: its records (130 MB at 800 long documents) need not reach the disk
                shutil.rmtree(run_dir, ignore_errors=True)  # while the next run is timed
            res.update(shape)
            results.append(res)
    finally:
        server.stop()

    print(
        f"\n{time.strftime('%Y-%m-%d')}, {platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{ns.images_per_doc} images of {SIDE}x{SIDE} per document, "
        f"{'each document its own images' if not ns.docs else f'the images of {ns.docs} documents reused'}, concurrency {ns.concurrency}, "
        f"server delay {ns.delay_ms:g} ms, {'report on' if ns.report else '--no-report'}\n"
    )
    print(
        "| samples | mean text tokens | document text (MB) | distinct images | peak RSS (MB) | peak in | RSS after load (MB) | "
        "wall (s) | samples/s | answering (samples/s) | at the server (samples/s, of ideal) | CPU (s): all (loop thread) | server CPU (s) | load average | "
        "load / answer / finish (s) | mean request (MB) | failed |"
    )
    print("|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for r in results:
        print(
            f"| {r['samples']} | {r['mean_text_tokens']:.0f} | {r['text_mb']:.0f} | {r.get('distinct_images', '?')} | {r['peak_rss_mb']:.0f} | "
            f"{r['peak_phase']} | {r['rss_after_load_mb']:.0f} | "
            f"{r['wall_s']:.1f} | {r['samples_per_s']:.1f} | {r['answer_rate']:.1f} | "
            f"{r['serving_rate']:.1f} of {r['ideal_rate']:.0f} ({r['serving_rate'] / r['ideal_rate']:.0%}) | "
            f"{r['cpu_s']:.1f} ({r['loop_cpu_s']:.1f}) | {r['server_cpu_s']:.1f} | {r['load_average']:.1f} | "
            f"{r['load_s']:.1f} / {r['answer_s']:.1f} / {r['finish_s']:.1f} | {r['mean_request_mb']:.2f} | {r['failed']} |"
        )
    for r in results:
        if r["gc"] is not None:
            g = r["gc"]
            print(
                f"\n{r['samples']} samples: {g['collections']} garbage collections, {g['ms']:.0f} ms ({g['full_ms']:.0f} ms full)"
            )
    print(f"\ncommand: {results[-1]['command']}")
    if ns.json:
        ns.json.write_text(json.dumps(results, indent=2) + "\n")
    if ns.profile:
        profile_load(sets[max(sizes)][0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
