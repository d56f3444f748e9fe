"""What the HTML report costs a run, as a user types the command: the command with and without the
report (and, optionally, another source tree's command), interleaved on the same data and server.

    python perf/bench_report_overhead.py [--bench ref_adv_s|mm_niah|mc_bench|refcoco] [--samples 1600] [--rounds 3]
                                         [--delay-ms 100] [--old-src DIR] [--processes N] [--data DIR]
                                         [--images-per-doc 20-60] [--tokens 30000-100000]

ref_adv_s: bench_ref_adv_harness's synthetic Ref-Adv-s parquet (640x480 textured JPEGs of 85 KB
mean, row groups of 1,132), made in a child process. mm_niah: bench_mm_niah_memory's release
shape, every document with its own images as in the release: --samples documents of --tokens
tokens of text (LO-HI spread evenly, or one number T: T-28k..T+28k) with --images-per-doc (LO-HI
or one number) distinct 448x448 noisy JPEGs (50-100 KB) each, plus 4 option images on
retrieval-image rows. mc_bench: the authors' annotation file (tests/data/mc-bench, 2,000 pairs
of 4,000 images) beside mc-bench_images/ of textured JPEGs at each image's own size, the first
--samples pairs (--limit). refcoco: the lmms-lab parquet layout, --samples rows of one expression
and one 640x480 JPEG each. Server: perf/serve_simulated.py in
its own process, one reply after --delay-ms (for mm_niah with --bytes-only: bodies counted, not
parsed; for mc_bench a box in each image). Each variant runs, with PYTHONPATH at its tree,

    python -m needlepoint.cli eval ref_adv_s --data D --model bench-model --api-url URL
        --box-format abs_xyxy --concurrency 64 --out RUN --no-progress
    python -m needlepoint.cli eval mm_niah --data D --split val --model bench-model --api-url URL
        --concurrency 64 --out RUN --no-progress
    python -m needlepoint.cli eval mc_bench --data D [--limit N] --model bench-model --api-url URL
        --concurrency 64 --out RUN --no-progress --box-format abs_xyxy
    python -m needlepoint.cli eval refcoco --data D --model bench-model --api-url URL
        --concurrency 64 --out RUN --no-progress --box-format abs_xyxy

plus --no-report for that variant; with --processes N also the default command with `--processes
N`. Printed, medians over the rounds: the answering time (the first request's arrival to the last
answer, at the server), the time from the last answer to the command's end (and per sample), the
whole command's wall time, its CPU time (user + system, its drawing processes included), its peak
RSS (the command's own process, wait4), the run folder's size (per sample) and its report's
thumbnails (files, and mean KB a file). On a shared machine the CPU time is the steadier
comparison. Targets (issue 45): after the last answer at most 1 ms a sample with the report on,
thumbnails at most 10 KB each, the report's peak RSS within 1.2x of --no-report's.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_ref_adv_harness import MODEL, ROW_GROUP, folder_mb, make_release_in_child, timed  # noqa: E402
from measure import ServerProcess, with_bytecode  # noqa: E402


def thumbs_of(run: Path) -> tuple[int, float]:
    """(files, mean KB a file) under the run's report/thumbs/."""
    folder = run / "report" / "thumbs"
    sizes = [p.stat().st_size for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []
    return len(sizes), (sum(sizes) / len(sizes) / 1000 if sizes else 0.0)


def ref_adv_data(ns: argparse.Namespace, tmp: Path) -> Path:
    """The synthetic Ref-Adv-s release (kept under --data when given)."""
    if ns.data is not None:  # the release of an earlier run of this script (same --samples), or made there
        data = Path(ns.data) / f"samples-{ns.samples}"
        marker = data / ".made"
        if not marker.exists():
            make_release_in_child(data, ns.samples, 0, ROW_GROUP)
            marker.write_text("ok\n")
        return data
    data, _ = make_release_in_child(tmp / "data", ns.samples, 0, ROW_GROUP)
    return Path(data)


def mm_niah_data(ns: argparse.Namespace, tmp: Path) -> Path:
    """An MM-NIAH release of --samples documents, each with its own images (kept under --data)."""
    from bench_mm_niah_memory import write_images, write_release

    root = Path(ns.data) if ns.data is not None else tmp
    pool = root / f"pool-{ns.images_per_doc}-{ns.samples}"
    per_doc, tokens = _span(ns.images_per_doc), _span(ns.tokens)
    if not (pool / ".made").exists():
        write_images(pool, per_doc, ns.samples)
        (pool / ".made").write_text("ok\n")
    data = root / f"data-{ns.samples}-{ns.images_per_doc}-{ns.tokens}"
    write_release(data, ns.samples, pool, per_doc, tokens, ns.samples)
    return data / "mm_niah_val"


MC_BENCH_RELEASE = HERE.parent / "tests" / "data" / "mc-bench" / "mc-bench_v0.2_val.json"  # the authors' 2,000 pairs
MC_BENCH_REPLY = (
    '```json\n{"image_1": [{"group": 1, "bbox_2d": [100, 100, 300, 260]}], '
    '"image_2": [{"group": 1, "bbox_2d": [40, 60, 220, 240]}]}\n```'
)


def mc_bench_data(ns: argparse.Namespace, tmp: Path) -> Path:
    """MC-Bench's release layout: the authors' annotation file (tests/data) beside mc-bench_images/
    holding a textured JPEG at each image's own size (4,000, about 500 MB; kept under --data)."""
    return _made_in_child((Path(ns.data) if ns.data is not None else tmp) / "mc-bench", "write_mc_bench")


def _made_in_child(data: Path, writer: str, *args: int) -> Path:
    """`data`, written by this module's `writer(data, *args)` in a child process unless an earlier
    run made it (its `.made` mark): this process stays small, so wait4's peak RSS is the commands'."""
    if not (data / ".made").exists():
        call = ", ".join([f"Path({str(data)!r})", *map(str, args)])
        code = f"import sys; sys.path.insert(0, {str(HERE)!r}); from pathlib import Path; import bench_report_overhead as b; b.{writer}({call})"
        subprocess.run([sys.executable, "-c", code], check=True)
        (data / ".made").write_text("ok\n")
    return data


def write_mc_bench(data: Path) -> None:
    """The annotation file copied into `data`, and every image it names drawn at its size."""
    import json

    import numpy as np
    from bench_ref_adv_harness import _image

    images = data / "mc-bench_images"
    release = json.loads(MC_BENCH_RELEASE.read_bytes())
    rng = np.random.default_rng(0)
    for k, im in enumerate(release["images"]):
        path = images / im["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_image(rng, k, int(im["width"]), int(im["height"])))
    shutil.copyfile(MC_BENCH_RELEASE, data / MC_BENCH_RELEASE.name)


def refcoco_data(ns: argparse.Namespace, tmp: Path) -> Path:
    """The lmms-lab RefCOCO parquet layout (`RefCOCO/data/val-00000-of-00001.parquet`, the card's
    columns): --samples rows of one referring expression each, every row its own 640x480 textured
    JPEG, as bench_ref_adv_harness draws them (kept under --data)."""
    root = Path(ns.data) if ns.data is not None else tmp
    return _made_in_child(root / f"refcoco-{ns.samples}" / "RefCOCO", "write_refcoco", ns.samples)


def write_refcoco(data: Path, n: int) -> None:
    """`n` rows of the RefCOCO card's columns, in row groups of ROW_GROUP."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from bench_ref_adv_harness import H, W, _image

    rng = np.random.default_rng(0)
    path = data / "data" / "val-00000-of-00001.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = None
    try:
        for start in range(0, n, ROW_GROUP):
            rows = []
            for i in range(start, min(n, start + ROW_GROUP)):
                x, y = float(rng.integers(0, W - 200)), float(rng.integers(0, H - 150))
                rows.append(
                    {
                        "question_id": str(i),
                        "image": {"bytes": _image(rng, i), "path": f"COCO_train2014_{i:012d}.jpg"},
                        "question": "Please carefully observe the area circled in the image and come up with a caption for the area.",
                        "answer": [f"the second cup from the right on the table (case {i})"],
                        "segmentation": [x, y, x + 180.0, y, x + 180.0, y + 140.0],
                        "bbox": [x, y, 180.0, 140.0],
                        "iscrowd": 0,
                        "file_name": f"COCO_train2014_{i:012d}.jpg",
                    }
                )
            table = pa.Table.from_pylist(rows)
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table, row_group_size=ROW_GROUP)
    finally:
        if writer is not None:
            writer.close()


def _span(text: str) -> tuple[int, int]:
    """ "LO-HI" or one number N (N-N), as bench_mm_niah_memory takes them."""
    lo, _, hi = str(text).partition("-")
    return int(lo), int(hi or lo)


MC_BENCH_SAMPLES = 2000  # the release's pairs


def command(bench: str, data: Path, url: str, out: Path, samples: int) -> list[str]:
    """The command as a user types it (module form, so that PYTHONPATH picks the tree); MC-Bench's
    fixed release is cut to the first `samples` pairs by --limit."""
    argv = [sys.executable, "-m", "needlepoint.cli", "eval", bench, "--data", str(data)]
    if bench == "mm_niah":
        argv += ["--split", "val"]
    if bench == "mc_bench" and samples < MC_BENCH_SAMPLES:
        argv += ["--limit", str(samples)]
    argv += ["--model", MODEL, "--api-url", url, "--concurrency", "64", "--out", str(out), "--no-progress"]
    return argv + (["--box-format", "abs_xyxy"] if bench in ("ref_adv_s", "mc_bench", "refcoco") else [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", choices=("ref_adv_s", "mm_niah", "mc_bench", "refcoco"), default="ref_adv_s")
    parser.add_argument("--samples", type=int, default=1600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay-ms", type=int, default=100)
    parser.add_argument("--data", type=Path, help="keep the synthetic release in this folder and reuse it")
    parser.add_argument("--old-src", type=Path, help="another tree's src/ (e.g. an export of an earlier commit)")
    parser.add_argument("--processes", type=int, default=1, help="also the default command with --processes N")
    parser.add_argument("--images-per-doc", default="20-60", help="mm_niah: distinct images a document, LO-HI or N")
    parser.add_argument("--tokens", default="30000-100000", help="mm_niah: tokens of text a document, LO-HI or a mean T")
    parser.add_argument("--no-baseline", action="store_true", help="leave out the --no-report variant")
    ns = parser.parse_args()
    if ns.bench == "mc_bench" and ns.samples > MC_BENCH_SAMPLES:
        parser.error(f"MC-Bench's release holds {MC_BENCH_SAMPLES} pairs; --samples must be at most that")
    with_bytecode(HERE.parent / "src", *([ns.old_src] if ns.old_src else []))
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    # MM-NIAH's 4 MB bodies are counted, not parsed (serve_simulated.py --bytes-only): a parsing
    # server on the same two cores bounded the answering rate itself (perf/NOTES.md)
    served = {"mm_niah": ["--reply", "A", "--bytes-only"], "mc_bench": ["--reply", MC_BENCH_REPLY]}.get(ns.bench, [])
    server = ServerProcess(ns.delay_ms, tmp, MODEL, served)
    try:
        make_data = {"mm_niah": mm_niah_data, "mc_bench": mc_bench_data, "refcoco": refcoco_data}.get(ns.bench, ref_adv_data)
        data = make_data(ns, tmp)
        server.start()
        here = str(HERE.parent / "src")
        variants = [("report (default)", here, [])]
        if not ns.no_baseline:
            variants.append(("--no-report", here, ["--no-report"]))
        if ns.old_src:
            variants.append((f"report, {ns.old_src}", str(ns.old_src.resolve()), []))
            if not ns.no_baseline:
                variants.append((f"--no-report, {ns.old_src}", str(ns.old_src.resolve()), ["--no-report"]))
        if ns.processes > 1:
            variants.append((f"report, --processes {ns.processes}", here, ["--processes", str(ns.processes)]))
        delay = ns.delay_ms / 1000
        rows: dict[str, list[tuple[float, ...]]] = {}
        for r in range(ns.rounds + 1):  # round 0 warms the file cache and is not counted
            for label, src, extra in variants if r % 2 else variants[::-1]:  # alternating order
                out = tmp / f"run-{r}-{len(rows.get(label, []))}-{abs(hash(label))}"
                argv = command(ns.bench, data, server.url, out, ns.samples) + extra
                server.stats()
                run = timed(argv, tmp / "log.txt", env={**os.environ, "PYTHONPATH": src})
                run.stats = server.stats()
                if run.rc != 0 or run.stats.get("requests", 0) < ns.samples:
                    raise SystemExit(
                        f"{label} failed: exit {run.rc}, {run.stats.get('requests')} requests; see {tmp / 'log.txt'}"
                    )
                size = folder_mb(out)
                files, kb = thumbs_of(out)
                shutil.rmtree(out, ignore_errors=True)
                if r:
                    rows.setdefault(label, []).append(
                        (
                            run.answering(delay) or 0,
                            run.after_last_answer(delay) or 0,
                            run.wall_s,
                            run.cpu_s,
                            run.maxrss_mb,
                            size,
                            files,
                            kb,
                        )
                    )
                    print(
                        f"round {r} {label}: answering {rows[label][-1][0]:.2f} s, after {rows[label][-1][1]:.2f} s, "
                        f"RSS {run.maxrss_mb:.0f} MB, load average {os.getloadavg()[0]:.1f}",
                        file=sys.stderr,
                    )
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    shape = f" --images-per-doc {ns.images_per_doc} --tokens {ns.tokens}" if ns.bench == "mm_niah" else ""
    print(
        f"command: python perf/bench_report_overhead.py --bench {ns.bench} --samples {ns.samples} --rounds {ns.rounds} "
        f"--delay-ms {ns.delay_ms}{shape}{' --old-src ' + str(ns.old_src) if ns.old_src else ''}"
        f"{f' --processes {ns.processes}' if ns.processes > 1 else ''}; 1-minute load average after: {os.getloadavg()[0]:.1f}\n"
    )
    ideal = ns.samples / (math.ceil(ns.samples / 64) * delay)
    print(f"ideal rate while serving: {ideal:.0f} samples/s ({ns.samples} / (ceil({ns.samples} / 64) x {delay:g} s))\n")
    print(
        "| variant | answering (s) | samples/s while serving (of ideal) | after the last answer (s) | after per sample (ms) "
        "| whole command (s) | CPU, command + children (s) | peak RSS (MB) | run folder (MB) | per sample (KB) "
        "| thumbnails (files, KB each) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, values in rows.items():
        ans, after, wall, cpu, rss, size, files, kb = (statistics.median(v[i] for v in values) for i in range(8))
        lo, hi = min(v[1] for v in values), max(v[1] for v in values)
        print(
            f"| {label} | {ans:.2f} | {ns.samples / ans:.0f} ({ns.samples / ans / ideal:.0%}) | {after:.2f} ({lo:.2f}-{hi:.2f}) "
            f"| {1000 * after / ns.samples:.2f} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {size:.1f} | {1000 * size / ns.samples:.0f} "
            f"| {files:.0f}, {kb:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
