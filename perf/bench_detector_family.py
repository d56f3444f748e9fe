"""The detector model families on MC-Bench: samples per second of `needlepoint.evaluate` with a
`DetectorModel` (models/detector_model.py) as the run's model, on the CPU, with a tiny random
Grounding DINO built here (the tests' configuration, perf/bench_agentic.py's builder).

    PYTHONPATH=src python perf/bench_detector_family.py [--pairs 64] [--concurrency 1,8,32] [--batch 8] [--compare-padded]

The demo's MC-Bench set (--pairs image pairs, sequence mode) is answered at each --concurrency:
every sample asks the detector for its two images with its text, and the requests in flight share
forward passes (up to --batch images a pass, only images of one processed size together, so no
image is padded). Measured: samples per second of the whole `evaluate` call (wall clock, run
folder, scoring and export included; the model is loaded before the clock starts), the images
per forward pass (median and largest) and the seconds per pass (median). A tiny model says what
the harness and the batching cost around a detector, not how fast a real one is: at full size on
a GPU the forward pass dominates (perf/bench_detector.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_agentic import tiny_grounding_dino
from measure import with_bytecode


def run(data: Path, workdir: Path, folder: Path, concurrency: int, batch: int, padded: bool) -> str:
    from needlepoint import api
    from needlepoint.core.store import read_records
    from needlepoint.models.detector_model import detector_model

    model = detector_model("grounding-dino", str(folder), device="cpu", batch_size=batch)
    model.detector.detector.unpadded = not padded  # padded: images of any size share a pass (the localizer's way)
    passes: list[tuple[int, float]] = []
    started: list[float] = []
    torch_model: Any = model.detector.detector.model

    def before(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        started.append(time.perf_counter())

    def after(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        passes.append((int(kwargs["pixel_values"].shape[0]), time.perf_counter() - started.pop()))

    torch_model.register_forward_pre_hook(before, with_kwargs=True)
    torch_model.register_forward_hook(after, with_kwargs=True)
    t0 = time.perf_counter()
    result = api.evaluate(
        benchmark="mc_bench",
        data=data,
        model=model,
        options={"box_format": "abs_xyxy", "input_mode": "sequence"},
        concurrency=concurrency,
        out=workdir / f"run-c{concurrency}-{'padded' if padded else 'unpadded'}",
        show_progress=False,
        report=False,
    )
    wall = time.perf_counter() - t0
    n = len(read_records(result.run_dir / "records.jsonl"))
    sizes = [p for p, _ in passes]
    return (
        f"| {concurrency} | {'padded' if padded else 'one size'} | {n} | {n / wall:.1f} | {wall:.2f} | {statistics.median(sizes):g} | {max(sizes)} "
        f"| {statistics.median(s for _, s in passes) * 1000:.1f} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=64, help="image pairs of the generated set (default 64)")
    parser.add_argument("--concurrency", default="1,8,32", help="samples in flight, comma-separated (default 1,8,32)")
    parser.add_argument("--batch", type=int, default=8, help="images per forward pass at most (default 8)")
    parser.add_argument(
        "--compare-padded",
        action="store_true",
        help="also let images of any size share a pass (padded, as the agentic localizer does): what one size a pass costs",
    )
    ns = parser.parse_args(argv)
    with_bytecode()
    import torch

    from needlepoint.benchmarks.mc_bench.demo import write_release

    lines = [
        f"### detector family grounding-dino (tiny random model, CPU, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads), MC-Bench demo set of {ns.pairs} pairs, --detector-batch {ns.batch}",
        "",
        "| concurrency | a pass holds | samples | samples/s | wall s | images/pass median | images/pass max | ms/pass median |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        data, _ = write_release(workdir / "data", pairs=ns.pairs)
        folder = tiny_grounding_dino(workdir / "tiny-grounding-dino")
        for c in (int(v) for v in ns.concurrency.split(",")):
            lines.append(run(data, workdir, folder, c, ns.batch, padded=False))
            if ns.compare_padded:
                lines.append(run(data, workdir, folder, c, ns.batch, padded=True))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
