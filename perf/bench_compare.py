"""Time of `needlepoint compare` on two synthetic 2,000-sample MC-Bench runs: reading and pairing the
run folders, the paired bootstrap (1,000 resamples, every Table 2 number of both protocols, with
McNemar), and the page (4,000 thumbnails, one card per sample).

    python perf/bench_compare.py [--samples 2000] [--resamples 1000] [--runs 1] [--seed 0]

The release (annotation file and one small JPEG per image) and two run folders (records.jsonl of two
middling models, run.json naming the data and its fingerprint) are made in a temporary folder, then
each phase is timed in this process, as `compare` runs them, and the whole command once through
`needlepoint.cli.main`. The synthetic annotation file and results are those of
perf/bench_intervals.py. Prints a Markdown table, the command, the date and the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_intervals import synthetic_release, synthetic_results  # noqa: E402

from needlepoint.benchmarks.mc_bench.benchmark import IMAGES_DIR, RELEASE_FILE, McBench  # noqa: E402
from needlepoint.benchmarks.mc_bench.groundtruth import groundtruth_from_json  # noqa: E402
from needlepoint.cli import main as cli_main  # noqa: E402
from needlepoint.compare.page import write_page  # noqa: E402
from needlepoint.compare.paired import compare_runs  # noqa: E402
from needlepoint.compare.runs import load_runs, pair_runs  # noqa: E402
from needlepoint.core.config import dataset_fingerprint  # noqa: E402
from needlepoint.core.files import json_line, write_json  # noqa: E402
from needlepoint.core.geometry import xywh_to_xyxy  # noqa: E402


def write_release(folder: Path, samples: int, seed: int) -> Path:
    """The synthetic annotation file beside one small JPEG per image (each 640 x 480, as it says)."""
    from PIL import Image

    release = synthetic_release(samples, seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RELEASE_FILE).write_text(json.dumps(release))
    buf = io.BytesIO()
    Image.new("RGB", (640, 480), (200, 210, 190)).save(buf, format="JPEG", quality=80)
    for im in release["images"]:
        path = folder / IMAGES_DIR / im["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(buf.getvalue())
    return folder


def write_run(run_dir: Path, data: Path, model: str, results: list[dict[str, Any]], fingerprint: str, gt: Any) -> Path:
    """A run folder as `eval` leaves it: run.json and one done record per sample (its parsed boxes)."""
    by_image = {image_id: (s.id, place) for s in gt.samples for place, image_id in enumerate(s.image_ids)}
    answers: dict[str, list[dict[str, Any]]] = {s.id: [] for s in gt.samples}
    for r in results:
        sid, place = by_image[r["image_id"]]
        answers[sid].append({"image": place, "group": r["category_id"], "bbox": xywh_to_xyxy(r["bbox"]), "score": r["score"]})
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {"benchmark": "mc_bench", "data": str(data), "model": model, "options": {"box_format": "abs_xyxy"}}
    write_json(
        run_dir / "run.json",
        {
            "hash": model,
            "identity": {"benchmark": "mc_bench", "model": model, "dataset": fingerprint},
            "config": config,
            "status": "complete",
        },
    )
    with open(run_dir / "records.jsonl", "wb") as fh:
        for s in gt.samples:
            boxes = answers[s.id]
            fh.write(
                json_line(
                    {
                        "id": s.id,
                        "status": "done",
                        "answer": boxes,
                        "parse_error": None,
                        "scores": {"boxes": len(boxes), "groups": len({b["group"] for b in boxes})},
                    }
                )
                + b"\n"
            )
    return run_dir


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, float, Any]:
    """Median wall and process CPU seconds of `fn` over `runs` runs, and its last result."""
    wall, cpu, out = [], [], None
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = write_release(root / "data", args.samples, args.seed)
        gt = groundtruth_from_json(json.loads((data / RELEASE_FILE).read_text()), "synthetic")
        fingerprint = dataset_fingerprint(McBench(box_format="abs_xyxy").load(data))
        a = write_run(root / "a", data, "model-a", synthetic_results(gt, args.seed), fingerprint, gt)
        b = write_run(root / "b", data, "model-b", synthetic_results(gt, args.seed + 7), fingerprint, gt)

        rows = []
        w, c, runs = timed(lambda: load_runs([a, b]), args.runs)
        rows.append(("read both run folders and the dataset (`load_runs`)", w, c))
        w, c, pairing = timed(lambda: pair_runs(runs), args.runs)
        rows.append(("pair them (`pair_runs`)", w, c))
        w, c, comparison = timed(lambda: compare_runs(pairing, args.resamples, 0.95, args.seed), args.runs)
        rows.append((f"**paired bootstrap, {args.resamples} resamples, 16 numbers, McNemar** (`compare_runs`)", w, c))
        w, c, _ = timed(lambda: write_page(comparison, root / "page-cold"), 1)
        rows.append(("the page, thumbnails drawn (`write_page`, first time)", w, c))
        w, c, _ = timed(lambda: write_page(comparison, root / "page-cold"), args.runs)
        rows.append(("the page again (thumbnails there)", w, c))

        def whole() -> int:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                return cli_main(["compare", str(a), str(b), "--out", str(root / "page-cli"), "--resamples", str(args.resamples)])

        w, c, rc = timed(whole, 1)
        assert rc == 0
        rows.append(("**the whole command** (`needlepoint compare A B`, page with new thumbnails)", w, c))

    print(
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()} "
        f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}), Python {platform.python_version()}"
    )
    print(f"\n    python perf/bench_compare.py --samples {args.samples} --resamples {args.resamples} --runs {args.runs}\n")
    print(f"{len(gt.samples)} paired samples, {len(gt.boxes)} GT boxes; median of {args.runs} run(s)\n")
    print("| what | wall s | CPU s |\n|---|---:|---:|")
    for name, w, c in rows:
        print(f"| {name} | {w:.2f} | {c:.2f} |")
    ap50 = next(m for m in comparison.contrasts[0].rows if m.name == "official/ap50")
    acc = next(m for m in comparison.contrasts[0].rows if m.name == "corrected/acc")
    print(
        f"\nofficial/ap50: A {ap50.base:.4f}, B {ap50.other:.4f}, B - A {ap50.diff:+.4f} [{ap50.lo:+.4f}, {ap50.hi:+.4f}], p {ap50.p:.3f}"
    )
    if acc.mcnemar is not None:
        print(
            f"corrected/acc: only A right {acc.mcnemar.only_a}, only B right {acc.mcnemar.only_b}, McNemar p {acc.mcnemar.p:.3g}"
        )


if __name__ == "__main__":
    main()
