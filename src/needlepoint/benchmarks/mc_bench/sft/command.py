"""`needlepoint build mc_bench_sft`: the flags and the entry point (imports stay light here)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from needlepoint.benchmarks.mc_bench.sft.templates import KINDS


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The builder's flags."""
    p.add_argument(
        "--coco", type=Path, required=True, help="COCO-format detection annotations (COCO, LVIS, Objects365, OmniLabel)"
    )
    p.add_argument("--images", type=Path, required=True, help="the folder holding the detection set's images")
    p.add_argument("--refs", type=Path, help="RefCOCO-style referring expressions as JSON (annotation id to sentences)")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument("--samples", type=int, required=True, help="number of synthetic samples (the paper: about 53000)")
    p.add_argument("--box-format", help="the target model's box convention: abs_xyxy, norm_1000_xyxy, norm_1_xyxy")
    p.add_argument("--format", default="sharegpt", help="sharegpt (LLaMA-Factory) or swift (ms-swift JSONL); default sharegpt")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0); the same seed gives the same output")
    p.add_argument(
        "--exclude", type=Path, help="MC-Bench release folder: none of its images may appear (content and perceptual hash)"
    )
    p.add_argument("--mix", type=Path, help="image-level multi-image samples (ShareGPT JSON or JSONL) appended after checking")
    p.add_argument(
        "--grounding-tokens",
        action="store_true",
        help="answers in Qwen2-VL's <|box_start|>(x1,y1),(x2,y2)<|box_end|> tokens, 0-1000",
    )
    p.add_argument("--prompt-file", type=Path, help="the eval prompt template used with `eval --prompt-file`, if any")
    p.add_argument(
        "--prompt-wording",
        choices=("needlepoint", "finetuned-baseline"),
        help="the eval prompt's wording, as `eval --prompt-wording` (finetuned-baseline: \"Output the bounding boxes of "
        '<description>"); default needlepoint',
    )
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    g = p.add_argument_group("shares of the sample kinds (defaults in docs/training-data.md; normalised to sum to 1)")
    for kind in KINDS:
        g.add_argument(f"--share-{kind.replace('_', '-')}", type=float, dest=f"share_{kind}", metavar="X")


def run(ns: argparse.Namespace) -> int:
    """Build, then print a one-paragraph summary on stderr."""
    from needlepoint.benchmarks.mc_bench.sft.builder import BuildOptions, Progress, build

    opts = BuildOptions(
        coco=ns.coco,
        images=ns.images,
        out=ns.out,
        samples=ns.samples,
        box_format=ns.box_format,
        format=ns.format,
        seed=ns.seed,
        refs=ns.refs,
        exclude=ns.exclude,
        mix=ns.mix,
        grounding_tokens=ns.grounding_tokens,
        prompt_file=ns.prompt_file,
        prompt_wording=ns.prompt_wording,
        shares={k: getattr(ns, f"share_{k}") for k in KINDS},
    )
    m = build(opts, Progress(quiet=ns.no_progress))
    counts = ", ".join(f"{k} {v}" for k, v in m["counts"].items())
    print(f"wrote {m['samples']} samples ({counts}) and {m['mix_samples']} mix samples to {ns.out}", file=sys.stderr)
    skipped = m["skipped_annotations"]
    if skipped:
        print("skipped: " + ", ".join(f"{v} {k}" for k, v in skipped.items()), file=sys.stderr)
    bad = m["images_not_decodable"]
    if bad["count"] or bad["mix_samples_skipped"]:
        print(
            f"skipped {bad['count']} images that do not decode ({bad['samples_redrawn']} samples drawn again) and "
            f"{bad['mix_samples_skipped']} mix samples with such an image; they are named in {ns.out / 'manifest.json'}",
            file=sys.stderr,
        )
    d = m["decontamination"]
    if d.get("done"):
        print(
            f"excluded {d['excluded_images']} of {d['checked_images']} images as MC-Bench's "
            f"({d['excluded_by_content_hash']} by content hash, {d['excluded_by_perceptual_hash']} by perceptual hash)",
            file=sys.stderr,
        )
    return 0
