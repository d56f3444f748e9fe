"""Building an MM-NIAH set: cells of context length x needle depth, `per_cell` samples each, for
every task, written in the release layout that `needlepoint eval mm_niah` reads.

Samples are built cell by cell in a fixed order (task, length, depth, repeat), each from the next
pieces of the corpus stream and its own random generator seeded by (seed, task, length, depth,
repeat), so the same inputs and seed give byte-identical files.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from needlepoint import __version__
from needlepoint.benchmarks.mm_niah.build import BUILD_TASKS, MANIFEST, SPOOL, looks_like_leftover, needles, tokens
from needlepoint.benchmarks.mm_niah.build.corpus import (
    CorpusImage,
    CorpusStats,
    ImageResolver,
    corpus_files,
    documents,
    file_sha256,
)
from needlepoint.benchmarks.mm_niah.build.haystack import (
    ContextWriter,
    CorpusExhausted,
    Gathered,
    GatherStats,
    Insert,
    PieceStream,
    gather,
    write_context,
)
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_EDGES, EXTENDED_EDGES
from needlepoint.contract.build import COMPLETE, partial_folder, staged
from needlepoint.core.errors import DataError
from needlepoint.core.files import write_atomic


@dataclass
class BuildConfig:
    """What a build is made from (the CLI's flags)."""

    corpus: list[Path]
    out: Path
    images: Path | None = None
    tasks: list[str] = field(default_factory=lambda: list(BUILD_TASKS))
    lengths: list[int] = field(default_factory=lambda: list(CONTEXT_EDGES))
    depths: list[float] = field(default_factory=lambda: [0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    per_cell: int = 50
    split: str = "val"
    seed: int = 0
    needle_images: Path | None = None
    blink: Path | None = None
    max_tiles: int = tokens.MAX_TILES
    counting_needles: tuple[int, int] = (2, 5)


OVERSHOOT = 1.25


def upper_bound(length: int, lengths: list[int]) -> int:
    """The exclusive upper end of a cell's lengths: 25% above the target, and never past the next
    scoring-bin edge or requested length (so every sample lands in its cell's bin)."""
    above = sorted({*CONTEXT_EDGES, *EXTENDED_EDGES, *lengths})
    return min(int(length * OVERSHOOT), next((e for e in above if e > length), 2 * length))


def spread(depth: float, k: int) -> list[float]:
    """k needle depths around `depth` (within 0.1 on either side, inside [0, 1]) whose mean is `depth`."""
    if k == 1:
        return [depth]
    half = min(0.1, depth, 1.0 - depth)
    return [depth - half + 2 * half * i / (k - 1) for i in range(k)]


class _Images:
    """Writes images under `images/` once: corpus images by content digest, needle images by sample."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.written = 0

    def corpus(self, im: CorpusImage) -> str:
        name = f"haystack/{im.digest}{im.suffix}"
        path = self.root / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(im.data)
            self.written += 1
        return name

    def write(self, name: str, data: bytes) -> str:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.written += 1
        return name

    def open(self, name: str) -> Any:
        """A written image, decoded (corpus images were checked and capped in size when read)."""
        from PIL import Image

        im = Image.open(self.root / name)
        im.load()  # closes the file
        return im


class Builder:
    """One build: the corpus stream, the images, the counts for the manifest."""

    def __init__(
        self, config: BuildConfig, progress: Callable[[int], None] | None = None, note: Callable[[str], None] | None = None
    ) -> None:
        self.config = config
        self.folder = config.out / f"mm_niah_{config.split}"
        self.work = partial_folder(self.folder)  # written there, renamed to `folder` when complete
        self.note = note or (lambda text: None)
        self.images = _Images(self.work / "images")
        self.cartoons = needles.CartoonSource(config.needle_images)
        self.corpus_stats = CorpusStats()
        self.gather_stats = GatherStats()
        self.progress = progress or (lambda n: None)
        self.resolver = ImageResolver(config.images)
        self.files = corpus_files(config.corpus)
        self.corpus_stats.files = [{"path": str(p), "sha256": file_sha256(p), "bytes": p.stat().st_size} for p in self.files]
        self.stream = PieceStream(documents(self.files, self.resolver, self.corpus_stats))
        self.spool = self.work / SPOOL
        self.samples: dict[str, int] = {}
        self.skipped_tasks: dict[str, str] = {}

    # --- one sample ---------------------------------------------------------------------------

    def _gather(self, length: int, extra: int, slack: int, need_image: bool) -> Gathered:
        upper = upper_bound(length, self.config.lengths)
        while True:
            got = gather(
                self.stream, length, upper, extra, slack, self.spool, self.config.max_tiles, self.images.corpus, self.gather_stats
            )
            if not need_image or got.images:
                return got
            self.gather_stats.haystacks_without_image += 1

    def _row(self, fh: IO[str], rid: int, body: Callable[[ContextWriter], dict[str, Any]]) -> None:
        """Write one row: the context streams straight into the file; the small fields follow it."""
        buf = io.StringIO()
        writer = ContextWriter(fh)
        fh.write(f'{{"id": {rid}, "context": "')
        fields = body(writer)
        totals = writer.totals
        meta = fields.pop("meta")
        question_images = fields.pop("question_images", [])
        meta.update(
            context_length=totals.text_tokens + totals.image_tokens,
            context_length_text=totals.text_tokens,
            context_length_image=totals.image_tokens,
            num_images=len(totals.images_list),
        )
        rest = {"images_list": totals.images_list + question_images, **fields, "meta": meta}
        buf.write(json.dumps(rest, ensure_ascii=False)[1:])
        fh.write('", ' + buf.getvalue() + "\n")

    def _text_task(self, task: str, rng: random.Random, length: int, depth: float) -> Callable[[ContextWriter], dict[str, Any]]:
        if task == "retrieval-text":
            tn = needles.retrieval_needle(rng)
        elif task == "counting-text":
            tn = needles.counting_needles(rng, rng.randint(*self.config.counting_needles))
        else:
            tn = needles.reasoning_needles(rng)
        depths = spread(depth, len(tn.statements))
        extra = sum(tokens.count(" " + s) for s in tn.statements)
        got = self._gather(length, extra, len(tn.statements) + 2, need_image=False)

        def body(writer: ContextWriter) -> dict[str, Any]:
            inserts = [Insert(d * got.total, statement=s, index=i) for i, (d, s) in enumerate(zip(depths, tn.statements))]
            write_context(got, inserts, writer)
            writer.finish()
            placed: Any = depths if len(depths) > 1 else depths[0]
            return {
                "question": tn.question,
                "answer": tn.answer,
                "meta": {"placed_depth": placed, "needles": tn.statements, "choices": None, "choices_image_path": None},
            }

        return body

    def _retrieval_image(
        self, rid: int, rng: random.Random, length: int, depth: float
    ) -> Callable[[ContextWriter], dict[str, Any]]:
        options = self.cartoons.pick(rng, 4)
        needle = options[0]
        got = self._gather(length, 0, 3, need_image=True)
        line, _, n = min(got.images, key=lambda im: (abs(im[1] - depth * got.total), im[0]))
        base_name = self._image_name_at(got, line)
        pasted = needles.paste(self.images.open(base_name), [needle.image], rng)
        stem = f"needle/retrieval-image/{rid}"
        name = self.images.write(f"{stem}_haystack.jpg", needles.jpeg_bytes(pasted))
        order = list(range(4))
        rng.shuffle(order)
        option_names = [
            self.images.write(f"{stem}_option{k}.png", needles.png_bytes(options[i].image)) for k, i in enumerate(order)
        ]
        answer = order.index(0)

        def body(writer: ContextWriter) -> dict[str, Any]:
            rest = got.total - n - 1
            write_context(got, [Insert(depth * rest, images=[(name, n)])], writer, skip_image_line=line)
            writer.finish()
            return {
                "question": "Which of the following cartoon images was pasted into one of the images of the document?",
                "answer": answer,
                "meta": {"placed_depth": depth, "needles": [needle.name], "choices": None, "choices_image_path": option_names},
            }

        return body

    def _counting_image(self, rid: int, rng: random.Random, length: int) -> Callable[[ContextWriter], dict[str, Any]]:
        cartoon = self.cartoons.pick(rng, 1)[0]
        got = self._gather(length, 0, 2, need_image=True)
        counts = [rng.randint(1, 5) for _ in got.images]
        reference = f"needle/cartoons/{cartoon.name}.png"
        if not (self.images.root / reference).exists():
            self.images.write(reference, needles.png_bytes(cartoon.image))

        def hook(name: str, i: int) -> str:
            pasted = needles.paste(self.images.open(name), [cartoon.image] * counts[i], rng)
            return self.images.write(f"needle/counting-image/{rid}_{i}.jpg", needles.jpeg_bytes(pasted))

        def body(writer: ContextWriter) -> dict[str, Any]:
            write_context(got, [], writer, image_hook=hook)
            writer.finish()
            placed = [pos / got.total for _, pos, _ in got.images]
            return {
                "question": "Each image of the document may contain copies of the following cartoon: <image>. How many copies "
                "are in each image, in order? Answer with a JSON list of integers, one per image.",
                "question_images": [reference],
                "answer": counts,
                "meta": {
                    "placed_depth": placed,
                    "needles": [cartoon.name] * sum(counts),
                    "choices": None,
                    "choices_image_path": None,
                },
            }

        return body

    def _reasoning_image(
        self, rng: random.Random, length: int, depth: float, blink: Any
    ) -> Callable[[ContextWriter], dict[str, Any]]:
        from needlepoint.benchmarks.mm_niah.build.blink import image_name

        q = blink.pick(rng)
        inserted = []
        for data in q.context_images:
            name, (w, h) = image_name(data)
            if not (self.images.root / name).exists():
                self.images.write(name, data)
            inserted.append((name, tokens.image_tokens(w, h, self.config.max_tiles)))
        options = None
        if q.option_images:
            options = []
            for data in q.option_images:
                name, _ = image_name(data)
                if not (self.images.root / name).exists():
                    self.images.write(name, data)
                options.append(name)
        extra = sum(n + 1 for _, n in inserted)
        got = self._gather(length, extra, 3, need_image=False)
        question = q.question
        if q.subtask != "Jigsaw":
            question = "Two consecutive images of the document are frames from one video. " + question

        def body(writer: ContextWriter) -> dict[str, Any]:
            write_context(got, [Insert(depth * got.total, images=inserted)], writer)
            writer.finish()
            return {
                "question": question,
                "answer": q.answer,
                "meta": {"placed_depth": depth, "needles": [q.source], "choices": q.choices, "choices_image_path": options},
            }

        return body

    def _image_name_at(self, got: Gathered, line: int) -> str:
        from needlepoint.benchmarks.mm_niah.build.haystack import read_spool

        for number, item in enumerate(read_spool(got.spool)):
            if number == line:
                return str(item["i"])
        raise AssertionError("image line not in spool")

    # --- the whole build ----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Build every task's file into the partial folder, write the manifest, and rename the
        folder into place (`needlepoint.contract.build.staged`): a failed build leaves nothing."""
        cfg = self.config
        tasks = []
        for task in cfg.tasks:
            if task == "reasoning-image" and cfg.blink is None:
                self.skipped_tasks[task] = "needs BLINK's jigsaw / multi-view data: give --blink DIR"
                continue
            tasks.append(task)
        blink = None
        if "reasoning-image" in tasks:
            from needlepoint.benchmarks.mm_niah.build.blink import BlinkSource

            blink = BlinkSource(cfg.blink)  # type: ignore[arg-type]  # reasoning-image is kept only when --blink was given
        with staged(self.folder, MANIFEST, "mm_niah", looks_like_leftover, self.note) as work:
            (work / "annotations").mkdir(parents=True, exist_ok=True)
            (work / "images").mkdir(parents=True, exist_ok=True)
            try:
                for task in tasks:
                    self._build_task(task, blink)
            except CorpusExhausted:
                built = sum(self.samples.values())
                raise DataError(
                    f"the corpus ran out after {built} samples ({self.corpus_stats.documents_read} documents read); "
                    f"nothing was written to {self.folder}: give more shards, or fewer --lengths / a smaller --per-cell"
                ) from None
            finally:
                self.spool.unlink(missing_ok=True)
            manifest = self.manifest(tasks, blink)
            write_atomic(work / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        return manifest

    def _build_task(self, task: str, blink: Any) -> None:
        cfg = self.config
        path = self.work / "annotations" / f"{task}.jsonl"
        rid = 0
        with path.open("w", encoding="utf-8", newline="\n") as fh:
            for length in cfg.lengths:
                for depth in cfg.depths:
                    for rep in range(cfg.per_cell):
                        rng = random.Random(f"{cfg.seed}:{task}:{length}:{depth!r}:{rep}")
                        if task in ("retrieval-text", "counting-text", "reasoning-text"):
                            body = self._text_task(task, rng, length, depth)
                        elif task == "retrieval-image":
                            body = self._retrieval_image(rid, rng, length, depth)
                        elif task == "counting-image":
                            body = self._counting_image(rid, rng, length)
                        else:
                            body = self._reasoning_image(rng, length, depth, blink)
                        self._row(fh, rid, body)
                        rid += 1
                        self.progress(1)
        self.samples[task] = rid

    def manifest(self, tasks: list[str], blink: Any = None) -> dict[str, Any]:
        cfg = self.config
        return {
            "builder": "mm_niah",
            "status": COMPLETE,
            "needlepoint_version": __version__,
            "split": cfg.split,
            "seed": cfg.seed,
            "tasks_built": {t: self.samples.get(t, 0) for t in tasks},
            "tasks_skipped": self.skipped_tasks,
            "lengths": cfg.lengths,
            "depths": cfg.depths,
            "per_cell": cfg.per_cell,
            "corpus": {"files": self.corpus_stats.files, **{k: v for k, v in asdict(self.corpus_stats).items() if k != "files"}},
            "images_source": self.resolver.source,
            "needle_images": [{"name": p.name, "sha256": file_sha256(p)} for p in self.cartoons.files]
            or "drawn by needlepoint (seeded)",
            "haystack": asdict(self.gather_stats),
            "images_written": self.images.written,
            "tokenizer": {
                "encoding": tokens.ENCODING,
                "ranks_sha256": tokens.RANKS_SHA256,
                "text_rule": "each text segment between <image> placeholders encoded on its own (encode_ordinary)",
            },
            "image_tokens": {
                "rule": tokens.TILING_RULE,
                "max_tiles": cfg.max_tiles,
                "tile": tokens.TILE,
                "tokens_per_tile": tokens.TOKENS_PER_TILE,
            },
            "blink": {
                "folder": str(cfg.blink),
                "files": [{"path": str(p), "sha256": file_sha256(p)} for p in blink.files],
                "questions_skipped_unreadable_image": blink.skipped_unreadable,
            }
            if blink
            else None,
        }
