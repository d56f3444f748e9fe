"""Build MC-Bench-style multi-image grounding training data from a detection set.

Reads the detection file (and referring expressions), removes MC-Bench's images when asked,
draws the samples (draw.py) and writes each as the eval prompt needlepoint sends (McBench.prompt,
sequence mode, `<image>` where each image goes) with its answer (answers.py), then the `--mix`
samples, `dataset_info.json`, a per-sample sidecar `samples_meta.jsonl` (kind, image ids, source
annotation id of every answer box) and `manifest.json` (inputs with hashes, shares, seed,
counts, images that do not decode, version).

The folder is written whole or not at all (`needlepoint.contract.build.staged`). Every image a sample
references is decoded once (reduced) when first drawn; a pair with an image that does not decode
is drawn again, and the image is counted and named in the manifest.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from needlepoint import __version__
from needlepoint.benchmarks.mc_bench.benchmark import BAND, McBench, McSample
from needlepoint.benchmarks.mc_bench.parse import PairGeometry
from needlepoint.benchmarks.mc_bench.sft.answers import grounding_answer, json_answer
from needlepoint.benchmarks.mc_bench.sft.coco import DetectionSet, read_detections
from needlepoint.benchmarks.mc_bench.sft.draw import Draft, Drawer, schedule
from needlepoint.benchmarks.mc_bench.sft.mix import read_mix
from needlepoint.benchmarks.mc_bench.sft.pairs import SAME_SUPERCATEGORY, build_pools
from needlepoint.benchmarks.mc_bench.sft.templates import DEFAULT_SHARES, KINDS, REF_KINDS
from needlepoint.benchmarks.mc_bench.sft.writers import FORMATS, SampleWriter, data_file, entry, write_dataset_info
from needlepoint.contract.build import COMPLETE, staged
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.files import AtomicFile, write_json
from needlepoint.core.geometry import BoxFormat, check_box_format
from needlepoint.core.images import check_decodes, safe_path

META = "samples_meta.jsonl"
MANIFEST = "manifest.json"
REDRAWS = 1000  # draws of a sample before its images' failures to decode stop the build
BAD_LISTED = 100  # images that do not decode, named in the manifest
CATEGORY_KINDS = ("cat_first", "cat_second", "cat_both", "two_groups")


@dataclass
class BuildOptions:
    """What `needlepoint build mc_bench_sft` was asked for."""

    coco: Path
    images: Path
    out: Path
    samples: int
    box_format: str | None
    format: str = "sharegpt"
    seed: int = 0
    refs: Path | None = None
    exclude: Path | None = None
    mix: Path | None = None
    shares: dict[str, float | None] = field(default_factory=dict)  # kind -> share given by a flag
    grounding_tokens: bool = False
    prompt_file: Path | None = None
    prompt_wording: str | None = None  # eval's --prompt-wording (finetuned-baseline: the paper's instruction)


def resolve_shares(given: dict[str, float | None], have_refs: bool) -> dict[str, float]:
    """Shares of the kinds, summing to 1. Flags override the defaults; without --refs the
    referring kinds' default shares go to the category kinds not set by a flag, in proportion,
    so that negatives keep MC-Bench's share."""
    explicit = {k: v for k, v in given.items() if v is not None}
    for k, v in explicit.items():
        if k not in DEFAULT_SHARES:
            raise DataError(f"unknown sample kind {k!r}; the kinds are {', '.join(KINDS)}")
        if not math.isfinite(v) or v < 0:
            raise DataError(f"--share-{k.replace('_', '-')} {v} must be a number of 0 or more")
    shares = {**DEFAULT_SHARES, **explicit}
    if not have_refs:
        wanted = [k for k in REF_KINDS if explicit.get(k, 0) > 0]
        if wanted:
            raise DataError(
                f"--share-{wanted[0].replace('_', '-')} needs referring expressions; give --refs refs.json or set it to 0"
            )
        moved = sum(shares[k] for k in REF_KINDS)
        for k in REF_KINDS:
            shares[k] = 0.0
        targets = [k for k in CATEGORY_KINDS if k not in explicit and shares[k] > 0]
        total = sum(shares[k] for k in targets)
        for k in targets:
            shares[k] += moved * shares[k] / total
    total = sum(shares.values())
    if total <= 0:
        raise DataError("every --share-* is 0; give at least one kind a share above 0")
    return {k: shares[k] / total for k in KINDS}


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, read in blocks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _ref_rows(ds: DetectionSet, refs: dict[int, tuple[str, ...]], skipped: Counter[str]) -> np.ndarray:
    """Rows of the usable annotations that have expressions; the others are counted."""
    if not refs:
        return np.zeros(0, np.int64)
    ids = np.fromiter(refs.keys(), np.int64, len(refs))
    order = np.argsort(ds.ann_ids, kind="stable")
    pos = np.searchsorted(ds.ann_ids, ids, sorter=order)
    pos = np.minimum(pos, max(len(order) - 1, 0))
    found = (len(order) > 0) & (ds.ann_ids[order[pos]] == ids) if len(order) else np.zeros(len(ids), bool)
    rows = order[pos[found]]
    usable = np.fromiter((int(ds.ann_cat[r]) not in ds.unusable[int(ds.ann_image[r])] for r in rows), bool, len(rows))
    skipped["refs naming no usable annotation"] += int(len(ids) - np.count_nonzero(usable))
    return np.sort(rows[usable])


class _Images:
    """Image paths under the images folder, each made safe and checked to exist once, and to
    decode when first drawn (memory grows with the images used, never with the sample count)."""

    def __init__(self, ds: DetectionSet, root: Path) -> None:
        self.ds, self.root = ds, root
        self.known: dict[int, Path] = {}
        self.decodes: set[int] = set()
        self.bad: dict[int, str] = {}  # image index -> why it cannot be used

    def path(self, i: int) -> Path:
        p = self.known.get(i)
        if p is None:
            p = safe_path(self.root, self.ds.file_names[i], str(self.ds.source), absolute=True)
            if not p.is_file():
                raise DataError(
                    f"image {self.ds.file_names[i]} of {self.ds.source} is not in {self.root}; give --images the folder that holds the detection set's images"
                )
            self.known[i] = p
        return p

    def usable(self, i: int) -> bool:
        """Whether image i decodes whole (checked once, at reduced size); a bad one is recorded."""
        if i in self.decodes:
            return True
        if i in self.bad:
            return False
        path = self.path(i)
        try:
            check_decodes(path, self.ds.file_names[i])
        except DataError as exc:
            self.bad[i] = str(exc)
            return False
        self.decodes.add(i)
        return True


def _exclusion(ds: DetectionSet, images: _Images, folder: Path) -> tuple[np.ndarray, dict[str, Any]]:
    """Which images are MC-Bench's (by content or perceptual hash), and the report of it."""
    from needlepoint.benchmarks.mc_bench.sft.dedup import DHASH_MAX, PHASH_MAX, hash_candidates, mc_bench_reference

    reference, ann = mc_bench_reference(folder)
    excluded = np.zeros(ds.n_images, bool)
    how: Counter[str] = Counter()
    names = []
    paths = [images.path(i) for i in range(ds.n_images)]
    for i, h in enumerate(hash_candidates(paths)):
        if isinstance(h, str):  # does not decode: never drawn
            images.bad[i] = h
            excluded[i] = True
            continue
        images.decodes.add(i)
        kind = reference.match(h)
        if kind:
            excluded[i] = True
            how[kind] += 1
            names.append(ds.file_names[i])
    report = {
        "mc_bench": {"annotations": str(ann), "sha256": sha256_file(ann), "images": reference.size},
        "checked_images": ds.n_images,
        "excluded_images": sum(how.values()),
        "excluded_by_content_hash": how["content"],
        "excluded_by_perceptual_hash": how["perceptual"],
        "perceptual_rule": f"dHash within {DHASH_MAX} bits and pHash within {PHASH_MAX} bits",
        "excluded_files": names,
    }
    return excluded, report


def _chance_same_super(drawer: Drawer, rng: random.Random, trials: int = 2000) -> float:
    """How often a uniformly drawn partner shares a supercategory with a drawn anchor."""
    p = drawer.p
    hits = 0
    for _ in range(trials):
        a = int(p.with_boxes[rng.randrange(len(p.with_boxes))])
        b = int(p.images[rng.randrange(len(p.images))])
        hits += a != b and p.shares_supercategory(a, b)
    return hits / trials


def build(opts: BuildOptions, progress: Progress | None = None) -> dict[str, Any]:
    """Write the training data to `opts.out`, whole or not at all (`needlepoint.contract.build.staged`);
    returns the manifest (also written there)."""
    progress = progress or Progress()
    if opts.samples < 1:
        raise DataError(f"--samples {opts.samples} must be 1 or more")
    if opts.format not in FORMATS:
        raise DataError(f"--format {opts.format!r} is unknown; use sharegpt (LLaMA-Factory) or swift (ms-swift)")
    box_format = check_box_format(opts.box_format)
    if opts.grounding_tokens:
        if box_format not in (None, "norm_1000_xyxy"):
            raise DataError("--grounding-tokens writes Qwen2-VL's 0-1000 coordinates; drop --box-format or give norm_1000_xyxy")
        box_format = "norm_1000_xyxy"
    if box_format is None:
        raise DataError(
            "--box-format is required: the box convention of the model to train (abs_xyxy, norm_1000_xyxy or norm_1_xyxy)"
        )
    if not opts.images.is_dir():
        raise DataError(f"--images {opts.images} is not a folder; give the folder that holds the detection set's images")
    if opts.mix is not None:
        sum(1 for _ in read_mix(opts.mix))  # checked before the long part
    shares = resolve_shares(opts.shares, opts.refs is not None)
    # The eval prompt of the answer format trained: `eval --answer-format grounding-tokens` asks in
    # the tokens' syntax, so the instruction the model is trained on is the one it is scored with.
    bench = McBench(
        box_format=box_format,
        input_mode="sequence",
        prompt_file=opts.prompt_file,
        answer_format="grounding-tokens" if opts.grounding_tokens else "json",
        prompt_wording=opts.prompt_wording,
    )
    with staged(opts.out, MANIFEST, "mc_bench_sft", _leftover, lambda text: print(text, file=sys.stderr)) as work:
        return _build(opts, work, box_format, shares, bench, progress)


def _leftover(folder: Path) -> bool:
    """Whether a folder without a manifest holds only what an interrupted build of an older
    needlepoint left (which wrote in place)."""
    own = {data_file(f) + tmp for f in FORMATS for tmp in ("", ".tmp")} | {META, META + ".tmp", "dataset_info.json"}
    return {p.name for p in folder.iterdir()} <= own


class Progress:
    """What a build tells the user while it runs: a sentence per long phase, and a line of
    samples written (both on stderr; silent when `quiet`)."""

    def __init__(self, quiet: bool = True) -> None:
        self.quiet = quiet
        self.bar: Any = None

    def note(self, text: str) -> None:
        if not self.quiet:
            print(f"build mc_bench_sft: {text}", file=sys.stderr, flush=True)

    def start(self, total: int) -> None:
        if self.quiet:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        self.bar = Bar(
            TextColumn("[bold]build mc_bench_sft"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self.task = self.bar.add_task("samples", total=total)
        self.bar.start()

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _build(
    opts: BuildOptions, out: Path, box_format: BoxFormat, shares: dict[str, float], bench: McBench, progress: Progress
) -> dict[str, Any]:
    """The build proper, written into `out` (the partial folder); returns the manifest."""
    progress.note(f"reading {opts.coco}")
    ds = read_detections(opts.coco)
    skipped: Counter[str] = Counter(ds.skipped)
    refs: dict[int, tuple[str, ...]] = {}
    if opts.refs is not None:
        from needlepoint.benchmarks.mc_bench.sft.refs import read_refs

        refs = read_refs(opts.refs, skipped)
    ref_rows = _ref_rows(ds, refs, skipped)
    if shares["ref_one"] + shares["ref_both"] > 0 and not len(ref_rows):
        raise DataError(
            f"no referring expression in {opts.refs} names a usable annotation of {opts.coco}; check that both come from the same dataset"
        )
    images = _Images(ds, opts.images.resolve())
    allowed = np.ones(ds.n_images, bool)
    decontamination: dict[str, Any] = {"done": False}
    if opts.exclude is not None:
        progress.note(f"hashing the images of {opts.exclude} and the {ds.n_images} images of {opts.coco} (decontamination)")
        excluded, decontamination = _exclusion(ds, images, opts.exclude)
        decontamination["done"] = True
        allowed &= ~excluded
    pools = build_pools(ds, allowed, ref_rows)
    if not len(pools.with_boxes) or len(pools.images) < 2:
        raise DataError(
            f"{opts.coco} has no usable box on two or more images (after skipping crowd, degenerate and excluded ones)"
        )

    rng = random.Random(opts.seed)
    drawer = Drawer(pools, refs, rng)
    counts: Counter[str] = Counter()
    boxes_total = 0
    redrawn = 0
    mix_count = 0
    mix_skipped: list[str] = []
    progress.start(opts.samples)
    try:
        with SampleWriter(out, opts.format) as writer, AtomicFile(out / META, fsync=False) as meta:
            for index, k in enumerate(schedule([shares[k] for k in KINDS], opts.samples)):
                draft = drawer.draw(KINDS[k])
                for _ in range(REDRAWS):
                    if all([images.usable(i) for i in draft.pair]):
                        break
                    redrawn += 1
                    draft = drawer.draw(KINDS[k])
                else:
                    raise DataError(
                        f"{len(images.bad)} images of {opts.images} do not decode and a sample of kind {draft.kind} found no pair of "
                        f"images that do in {REDRAWS} draws (first: {next(iter(images.bad.values()))}); replace or remove them"
                    )
                sample, info = _render(index, draft, ds, images, bench, box_format, opts.grounding_tokens)
                writer.write(sample)
                meta.write(json.dumps(info) + "\n")
                counts[draft.kind] += 1
                boxes_total += sum(len(b) for b in draft.boxes)
                progress.advance()
            if opts.mix is not None:
                for sample in read_mix(opts.mix):
                    reason = _undecodable(sample["images"])
                    if reason is not None:
                        mix_skipped.append(reason)
                        continue
                    writer.write(sample)
                    meta.write(json.dumps({"index": opts.samples + mix_count, "kind": "mix"}) + "\n")
                    mix_count += 1
            data_path = writer.close()
    finally:
        progress.stop()
    info_path = write_dataset_info(out, opts.format)

    inputs: dict[str, Any] = {
        "coco": {"path": str(opts.coco), "sha256": sha256_file(opts.coco)},
        "images": str(opts.images.resolve()),
    }
    for name, path in (("refs", opts.refs), ("mix", opts.mix), ("prompt_file", opts.prompt_file)):
        if path is not None:
            inputs[name] = {"path": str(path), "sha256": sha256_file(path)}
    outputs = {p.name: sha256_file(p) for p in (data_path, out / META, info_path) if p is not None}
    bad = sorted(images.bad.items())
    manifest = {
        "builder": "mc_bench_sft",
        "status": COMPLETE,
        "needlepoint_version": __version__,
        "seed": opts.seed,
        "samples": opts.samples,
        "mix_samples": mix_count,
        "format": opts.format,
        "box_format": box_format,
        "grounding_tokens": opts.grounding_tokens,
        "prompt_wording": bench.prompt_wording,
        "input_mode": "sequence",
        "shares": shares,
        "counts": {k: counts[k] for k in KINDS},
        "answer_boxes": boxes_total,
        "pairs": {
            "same_supercategory_probability": SAME_SUPERCATEGORY,
            "share_sharing_a_supercategory": drawer.same_super_pairs / max(drawer.pairs, 1),
            "share_by_chance": _chance_same_super(drawer, random.Random(opts.seed + 1)),
            "cat_both_with_boxes_in_both_images": drawer.both_with_targets[0] / max(drawer.both_with_targets[1], 1),
        },
        "skipped_annotations": dict(sorted(skipped.items())),
        "detection_set": {
            "images": ds.n_images,
            "usable_boxes": len(ds.ann_ids),
            "categories": len(ds.categories),
            "federated": ds.verified_absent is not None,
            "referring_annotations": int(len(ref_rows)),
        },
        "decontamination": decontamination,
        "images_not_decodable": {
            "count": len(bad),
            "samples_redrawn": redrawn,
            "files": {ds.file_names[i]: why for i, why in bad[:BAD_LISTED]},
            "mix_samples_skipped": len(mix_skipped),
            "mix_reasons": mix_skipped[:BAD_LISTED],
        },
        "inputs": inputs,
        "outputs": outputs,
    }
    write_json(out / MANIFEST, manifest)
    return manifest


def _undecodable(paths: list[str]) -> str | None:
    """Why one of a mix sample's images does not decode, or None when all do."""
    for p in paths:
        try:
            check_decodes(Path(p), p)
        except DataError as exc:
            return str(exc)
    return None


def _render(
    index: int, draft: Draft, ds: DetectionSet, images: _Images, bench: McBench, box_format: BoxFormat, tokens: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sample as the tools read it (the eval prompt, `<image>` per image) and its sidecar line."""
    a, b = draft.pair
    refs = (ImageRef(key=ds.file_names[a], path=images.path(a)), ImageRef(key=ds.file_names[b], path=images.path(b)))
    sizes = (tuple(ds.sizes[a].tolist()), tuple(ds.sizes[b].tolist()))
    sample = McSample(str(index), draft.text, None, (int(ds.image_ids[a]), int(ds.image_ids[b])), refs, PairGeometry(sizes, BAND))
    conversation = bench.prompt(sample)
    paths: list[str] = []
    user = ""
    for part in conversation.messages[0].parts:
        if isinstance(part, ImageRef):
            user += "<image>"
            paths.append(str(part.path))
        else:
            user += part
    answer = grounding_answer(draft.boxes, sizes) if tokens else json_answer(draft.boxes, sizes, box_format)
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    info = {
        "index": index,
        "kind": draft.kind,
        "image_ids": list(sample.image_ids),
        "file_names": [ds.file_names[a], ds.file_names[b]],
        "text": draft.text,
        "groups": list(draft.groups),
        "boxes": [[{"group": x.group, "ann_id": x.ann_id} for x in image] for image in draft.boxes],
    }
    return entry(messages, paths), info
