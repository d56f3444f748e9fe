"""`needlepoint build mm_niah`: flags, their checks (one sentence each), progress, the summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from needlepoint.benchmarks.mm_niah.build import BUILD_TASKS, MANIFEST, tokens
from needlepoint.core.errors import DataError

if TYPE_CHECKING:
    from needlepoint.benchmarks.mm_niah.build.builder import BuildConfig

DEFAULT_LENGTHS = "1k,2k,4k,8k,12k,16k,24k,32k,40k,48k,64k"
DEFAULT_DEPTHS = "0,0.2,0.4,0.6,0.8,1.0"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--corpus",
        nargs="+",
        required=True,
        type=Path,
        help="OBELICS shards (.parquet or .jsonl with texts/images lists), or folders of them",
    )
    p.add_argument(
        "--images",
        type=Path,
        help="img2dataset output folder, a url-to-file map (.json/.jsonl/.tsv), or the folder local image paths are relative to",
    )
    p.add_argument("--out", required=True, type=Path, help="where mm_niah_{split}/ is written (must not hold a build already)")
    p.add_argument("--tasks", default=",".join(BUILD_TASKS), help="comma-separated tasks (default: all six)")
    p.add_argument(
        "--lengths",
        default=DEFAULT_LENGTHS,
        help=f"target context lengths in tokens, e.g. 1k,64k,128k,1m (default {DEFAULT_LENGTHS})",
    )
    p.add_argument("--depths", default=DEFAULT_DEPTHS, help=f"needle depths in [0, 1] (default {DEFAULT_DEPTHS})")
    p.add_argument("--per-cell", type=int, default=50, help="samples per length x depth cell (default 50)")
    p.add_argument("--split", default="val", help="the split folder name: val or test (default val)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--needle-images", type=Path, help="a folder of cartoon images to use as image needles (default: drawn ones)")
    p.add_argument("--blink", type=Path, help="BLINK's data folder (Jigsaw, Multi-view_Reasoning parquet) for reasoning-image")
    p.add_argument(
        "--max-tiles",
        type=int,
        default=tokens.MAX_TILES,
        help=f"InternVL-1.5 tiling's tile limit for image tokens (default {tokens.MAX_TILES})",
    )
    p.add_argument("--no-progress", action="store_true")


def parse_length(text: str) -> int:
    """'4k' -> 4000, '1m' -> 1000000, '1500' -> 1500 (decimal k and m, as the scoring bins)."""
    t = text.strip().lower()
    scale = 1000 if t.endswith("k") else 1_000_000 if t.endswith("m") else 1
    number = t[:-1] if scale > 1 else t
    try:
        value = float(number) * scale
    except ValueError:
        raise DataError(f"--lengths has {text!r}, which is not a length; write e.g. 4k, 128k or 1m") from None
    if value < 100 or value != int(value):
        raise DataError(f"--lengths has {text!r}; lengths are whole token counts of at least 100")
    return int(value)


def parse_config(ns: argparse.Namespace) -> BuildConfig:
    from needlepoint.benchmarks.mm_niah.build.builder import BuildConfig

    tasks = [t.strip() for t in ns.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in BUILD_TASKS]
    if unknown or not tasks:
        raise DataError(f"--tasks has {', '.join(unknown) or 'nothing'}; choose from {', '.join(BUILD_TASKS)}")
    lengths = [parse_length(x) for x in ns.lengths.split(",") if x.strip()]
    try:
        depths = [float(x) for x in ns.depths.split(",") if x.strip()]
    except ValueError:
        raise DataError(f"--depths {ns.depths!r} must be numbers between 0 and 1, e.g. 0,0.2,0.4,0.6,0.8,1.0") from None
    if not lengths or not depths or any(not 0.0 <= d <= 1.0 for d in depths):
        raise DataError(f"--depths {ns.depths!r} must be numbers between 0 and 1, e.g. 0,0.2,0.4,0.6,0.8,1.0")
    if len(set(lengths)) != len(lengths) or len(set(depths)) != len(depths):
        raise DataError("--lengths and --depths must not repeat a value")
    if ns.per_cell < 1:
        raise DataError("--per-cell must be at least 1")
    if ns.split not in ("val", "test"):
        raise DataError(f"--split must be val or test, not {ns.split!r}")
    if not 1 <= ns.max_tiles <= 40:
        raise DataError("--max-tiles must be between 1 and 40 (InternVL-1.5 uses 12 by default; 6 in some evaluations)")
    return BuildConfig(
        corpus=list(ns.corpus),
        out=ns.out,
        images=ns.images,
        tasks=tasks,
        lengths=sorted(lengths),
        depths=depths,
        per_cell=ns.per_cell,
        split=ns.split,
        seed=ns.seed,
        needle_images=ns.needle_images,
        blink=ns.blink,
        max_tiles=ns.max_tiles,
    )


def run(ns: argparse.Namespace) -> int:
    from needlepoint.benchmarks.mm_niah.build.builder import Builder

    config = parse_config(ns)
    total = len(config.lengths) * len(config.depths) * config.per_cell
    total *= len([t for t in config.tasks if t != "reasoning-image" or config.blink is not None])
    bar = None
    advance = None
    if not ns.no_progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        bar = Progress(
            TextColumn("[bold]build mm_niah"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        task = bar.add_task("build", total=total)

        def advance(n: int) -> None:
            bar.advance(task, n)

        bar.start()
    try:
        builder = Builder(config, advance, note=lambda text: print(text, file=sys.stderr))
        manifest = builder.run()
    finally:
        if bar is not None:
            bar.stop()
    err = sys.stderr
    for task, reason in manifest["tasks_skipped"].items():
        print(f"{task} skipped: {reason}", file=err)
    built = ", ".join(f"{t} {n}" for t, n in manifest["tasks_built"].items())
    corpus = manifest["corpus"]
    skipped = {k: corpus[f"documents_skipped_{k}"] for k in ("missing_image", "unreadable_image", "image_outside_folder")}
    print(
        f"built {built} samples into {builder.folder}; {corpus['documents_read']} documents read, {sum(skipped.values())} skipped "
        f"({skipped['missing_image']} for a missing image, {skipped['unreadable_image']} for an image that does not decode, "
        f"{skipped['image_outside_folder']} for an image path outside --images), {corpus['images_reduced']} big images stored "
        f"reduced; manifest: {builder.folder / MANIFEST}",
        file=err,
    )
    return 0
