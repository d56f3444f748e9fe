"""A generated MM-NIAH set in the release layout (`mm_niah_val/annotations/{task}.jsonl`, images),
for the demo, the tests and the benchmarks; and the simulated model's answers to it.

Documents are filler sentences and filler images with needles placed at known depths. By default
the text is short and `context_length` is declared across the ranges 1k..64k, so the set is small;
`real_length=True` writes documents of about that many tokens (4 characters a token).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from needlepoint.core.drawing import COLOURS, place_boxes, render
from needlepoint.core.files import AtomicFile, write_atomic

TASKS = ("retrieval-text", "retrieval-image", "counting-text", "counting-image", "reasoning-text", "reasoning-image")
LENGTHS = (800, 1500, 3000, 6000, 10000, 14000, 20000, 28000, 36000, 44000, 56000, 70000)
DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)
WORDS = ("apple", "river", "lantern", "violet", "harbor", "pepper", "meadow", "copper", "falcon", "orchid")
FILLER = (
    "The committee met again on Tuesday to review the harbour budget. ",
    "Rain kept the market quiet for most of the afternoon. ",
    "A long train of barges moved slowly up the river past the mill. ",
    "Several visitors asked about the opening hours of the old library. ",
    "The bakery on the corner sold out of rye bread before noon. ",
)
IMAGE_TOKENS = 256
DISTRACTORS = ("Lanterns are never shared.",)
"""Statements placed beside the needles that the answer does not depend on: in the document, not in `meta.needles`."""


def _image(folder: Path, name: str, colour: str | None = None, count: int | None = None, size: int = 224) -> str:
    """Write a shapes image once; its drawing depends only on its name, so rebuilding a set that
    is already on disk gives the same documents."""
    path = folder / name
    if not path.exists():
        rng = random.Random(name)
        n = count if count is not None else rng.randint(2, 5)
        boxes = place_boxes(rng, size, size, n, 16, 40)
        shapes = [
            (b, colour or rng.choice(list(COLOURS)), "circle" if colour else rng.choice(("square", "circle"))) for b in boxes
        ]
        write_atomic(path, render(size, size, shapes, background=(250, 250, 250)))
    return name


def _document(rng: random.Random, needles: list[tuple[float, str]], n_images: int, target_tokens: int, real_length: bool) -> str:
    """Filler with `<image>` placeholders and needle sentences placed at their depths."""
    n_sent = max(12, target_tokens // 12) if real_length else 12
    sentences = [rng.choice(FILLER) for _ in range(n_sent)]
    slots = sorted(rng.sample(range(n_sent), min(n_images, n_sent)))
    for s in reversed(slots):
        sentences.insert(s, "<image>")
    for depth, sentence in sorted(needles, reverse=True):
        sentences.insert(round(depth * len(sentences)), sentence + " ")
    return "".join(sentences)


def make_rows(
    task: str, count: int, images: Path, seed: int = 11, real_length: bool = False, images_per_doc: int = 2
) -> list[dict[str, Any]]:
    """Rows of one task in the release's fields; images are written into `images`."""
    rng = random.Random(f"{seed}-{task}")
    rows = []
    pool = [_image(images, f"filler_{i}.jpg") for i in range(8)]
    for i in range(count):
        length = LENGTHS[i % len(LENGTHS)] + rng.randint(0, 300)
        depth = DEPTHS[(i // len(LENGTHS)) % len(DEPTHS)]
        n_images = images_per_doc if not real_length else max(1, images_per_doc)
        doc_images = [rng.choice(pool) for _ in range(n_images)]
        meta: dict[str, Any] = {"placed_depth": depth, "choices": None, "choices_image_path": None}
        needles: list[tuple[float, str]] = []
        answer: str | int | list[int]
        if task == "retrieval-text":
            word = rng.choice(WORDS)
            needles = [(depth, f"The secret word of the archive is {word}.")]
            question, answer = "What is the secret word of the archive?", word
        elif task == "reasoning-text":
            a, b = rng.randint(2, 9), rng.randint(2, 9)
            needles = [
                (depth, f"Mira has {a} lanterns."),
                (min(1.0, depth + 0.05), f"Tom has {b} lanterns more than Mira."),
                (min(1.0, depth + 0.1), DISTRACTORS[0]),
            ]
            question, answer = "How many lanterns does Tom have?", str(a + b)
        elif task == "counting-text":
            depths = sorted(rng.choice(DEPTHS) for _ in range(3))
            counts = [rng.randint(1, 6) for _ in depths]
            needles = [(d, f"The little penguin counted {c} needles.") for d, c in zip(depths, counts)]
            meta["placed_depth"] = depths
            question = "List, in order, how many needles the little penguin counted in each statement, as a JSON list."
            answer = counts
        elif task == "counting-image":
            counts = [rng.randint(1, 4) for _ in doc_images]
            doc_images = [_image(images, f"count_{task}_{i}_{j}.jpg", "red", c) for j, c in enumerate(counts)]
            question = "List, in order, how many red circles each image of the document holds, as a JSON list."
            answer = counts
        elif task == "retrieval-image":
            colour = rng.choice(list(COLOURS))
            needle = _image(images, f"needle_{i}.jpg", colour, 1)
            doc_images.insert(round(depth * len(doc_images)), needle)
            options = [needle] + [
                _image(images, f"option_{i}_{k}.jpg", c, 1)
                for k, c in enumerate(rng.sample([c for c in COLOURS if c != colour], 3))
            ]
            rng.shuffle(options)
            meta["choices_image_path"] = options
            question, answer = "Which of the following images appears in the document?", options.index(needle)
        else:  # reasoning-image
            direction = rng.choice(("left", "right"))
            needles = [(depth, f"The photographer noted that the camera was moving {direction}.")]
            meta["choices"] = ["The camera is moving left.", "The camera is moving right."]
            question, answer = "Which way is the camera moving?", 0 if direction == "left" else 1
        context = _document(rng, needles, 0, length, real_length)
        if doc_images:
            pieces = context.split(". ")
            step = max(1, len(pieces) // (len(doc_images) + 1))
            for j, _ in enumerate(doc_images):
                at = min(len(pieces) - 1, (j + 1) * step)
                pieces[at] = "<image>" + pieces[at]
            context = ". ".join(pieces)
        meta.update(
            context_length=length,
            context_length_text=length - IMAGE_TOKENS * len(doc_images),
            context_length_image=IMAGE_TOKENS * len(doc_images),
            num_images=len(doc_images),
            needles=[s for _, s in needles if s not in DISTRACTORS],  # what the answer depends on
        )
        rows.append(
            {"id": i, "images_list": doc_images, "context": context, "question": question, "answer": answer, "meta": meta}
        )
    return rows


def write_release(
    root: Path, per_task: int = 60, split: str = "val", seed: int = 11, real_length: bool = False, images_per_doc: int = 2
) -> Path:
    """Write `root/mm_niah_{split}/annotations/*.jsonl` and its images; return `root`."""
    folder = root / f"mm_niah_{split}"
    (folder / "annotations").mkdir(parents=True, exist_ok=True)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for task in TASKS:
        rows = make_rows(task, per_task, folder / "images", seed, real_length, images_per_doc)
        if split == "test":
            for r in rows:
                r.pop("answer")
        with AtomicFile(folder / "annotations" / f"{task}.jsonl") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    return root


def simulated_answer(task: str, answer: Any, context_length: float, rng: random.Random) -> str:
    """A plausible reply: right more often for short contexts and text needles."""
    p_right = max(0.15, 0.95 - context_length / 90000 - (0.25 if task.endswith("image") else 0.0))
    right = rng.random() < p_right
    if isinstance(answer, list):
        got = list(answer) if right else [max(0, v + rng.choice((-1, 1))) for v in answer]
        if not right and len(got) > 1:
            got[0] = answer[0]  # partial credit
        return json.dumps(got)
    if isinstance(answer, int):
        letter = chr(ord("A") + (answer if right else (answer + 1) % 4))
        return letter if rng.random() < 0.7 else f"The answer is {letter}."
    return f"The answer is {answer}." if right else "I could not find it."


def build(folder: Path) -> tuple[Path, dict[str, Any], dict[str, list[Any]]]:
    """The demo set on disk, the run options, and the simulated model's script."""
    from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
    from needlepoint.models.simulated import script_key

    write_release(folder)
    bench = MmNiah(split="val")
    rng = random.Random(5)
    script = {}
    for sample in bench.load(folder):
        script[script_key(bench.prompt(sample))] = [simulated_answer(sample.task, sample.answer, sample.context_length, rng)]
    return folder, {"split": "val"}, script
