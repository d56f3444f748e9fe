"""MM-NIAH release files: one JSONL per task and split, an images folder; prompts built as the
authors' `get_input` builds them (docs/protocols/mm-niah.md)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mm_niah.aggregate import checked_depth_bin
from needlepoint.benchmarks.mm_niah.judge import official_answer
from needlepoint.benchmarks.mm_niah.ranges import TASKS
from needlepoint.contract.base import DataError
from needlepoint.core import marks
from needlepoint.core.conversation import ImageRef
from needlepoint.core.images import safe_file
from needlepoint.core.jsonl import read_jsonl_offsets, read_line_at
from needlepoint.core.numeric import size

PLACEHOLDER = "<image>"
OPTION_SENTENCE = "\nAnswer with the option's letter from the given choices directly."
OPEN_SENTENCE = "\nAnswer the question using a single word or phrase."
SPLITS = ("val", "test")


@dataclass
class NiahSample:
    """One MM-NIAH row: its small fields and images in placeholder order. The document text is not
    held (it is most of a long run's memory): `text()` re-reads the row from its file."""

    id: str
    task: str
    row_id: Any
    question: str
    images: list[ImageRef]
    answer: Any
    context_length: float
    placed_depth: Any
    source: Path
    offset: int
    length: int  # of the row's line in bytes, read back in one read
    crc: int  # of the row's line, to tell that it is the one loaded
    digest: str  # of the prompt text, in the run identity (fingerprint)
    meta: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The row as loaded, read again from its file; DataError when the file no longer holds it."""
        return read_line_at(self.source, self.offset, self.length, self.crc, f"row {self.row_id}")

    def text(self) -> str:
        """The full prompt text (context, newline, question with options and instruction)."""
        return full_text(self.row())[0]

    def fingerprint(self) -> str:
        keys = ",".join(im.key for im in self.images)
        return f"{self.id}|{self.digest}|{self.answer}|{self.context_length}|{self.placed_depth}|{keys}"


def text_digest(text: str) -> str:
    """A short digest of a document's prompt text (the sample's part of the run identity)."""
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def check_built(folder: Path) -> None:
    """Refuse a set that `needlepoint build mm_niah` did not finish: its manifest says it is
    incomplete, or it has no manifest but holds an interrupted build's files; DataError naming it."""
    from needlepoint.benchmarks.mm_niah.build import MANIFEST, looks_like_leftover
    from needlepoint.contract.build import COMPLETE, folder_state

    if folder_state(folder, MANIFEST, looks_like_leftover) not in (COMPLETE, "other"):
        raise DataError(
            f"{folder} is an incomplete build of `needlepoint build mm_niah` (stopped before it finished; "
            f"see {folder / MANIFEST}); it would be scored as if it were the whole set: run the build again"
        )


def split_folder(data: Path, split: str | None) -> tuple[Path, str]:
    """The `mm_niah_{split}` folder and its split: `data` itself (its name tells the split), or
    its child `mm_niah_{split}` (split default val)."""
    if split is not None and split not in SPLITS:
        raise DataError(f"--split must be val or test, not {split!r}")
    if (data / "annotations").is_dir():
        named = next((s for s in SPLITS if data.name == f"mm_niah_{s}"), None)
        if split is not None and named is not None and named != split:
            raise DataError(
                f"--data {data} is the {named} split but --split says {split}; drop --split or point --data elsewhere"
            )
        check_built(data)
        return data, split or named or "val"
    split = split or "val"
    child = data / f"mm_niah_{split}"
    if (child / "annotations").is_dir():
        check_built(child)
        return child, split
    partial = child.with_name(child.name + ".partial")
    if partial.is_dir():
        check_built(partial)
    raise DataError(
        f"{data} is not an MM-NIAH release folder: expected {child}/annotations/ or {data}/annotations/; "
        "point --data at the folder holding mm_niah_val/ and mm_niah_test/"
    )


def full_text(row: dict[str, Any]) -> tuple[str, list[str]]:
    """The authors' prompt for a row (context, newline, question with options and instruction)
    and the image paths in the order of its placeholders."""
    meta = row.get("meta") or {}
    question = str(row["question"])
    images = list(row.get("images_list") or [])
    letters = [chr(ord("A") + i) for i in range(26)]
    if meta.get("choices"):
        for letter, choice in zip(letters, meta["choices"]):
            question += f"\n{letter}. {choice}"
        question += OPTION_SENTENCE
    elif meta.get("choices_image_path"):
        for letter, _ in zip(letters, meta["choices_image_path"]):
            question += f"\n{letter}. {PLACEHOLDER}"
        images += list(meta["choices_image_path"])
        question += OPTION_SENTENCE
    else:
        question += OPEN_SENTENCE
    return f"{haystack(row)}\n{question}", images


def haystack(row: dict[str, Any]) -> str:
    """A row's context as the model reads it: the authors' runner drops the tokenizer's
    end-of-sequence marks left in the haystack (looked for first, by `marks`: a search is quicker
    than a replace that finds nothing in a long document)."""
    context = str(row["context"])
    return context.replace("</s>", "") if marks.positions(context, "</s>") else context


def image_pieces(text: str) -> list[str]:
    """`text` cut at its `<image>` placeholders, as `str.split` cuts it (by `marks`: quicker on a
    long document)."""
    return marks.split(text, PLACEHOLDER)


def placeholders(text: str) -> int:
    """How many `<image>` placeholders `text` holds (as `str.count` counts them)."""
    return len(marks.positions(text, PLACEHOLDER))


def _check_row(row: dict[str, Any], task: str, where: str) -> None:
    """The fields a row needs, with the types the prompt and the scoring rely on; DataError
    otherwise (found at load time, before anything is sent)."""
    missing = [k for k in ("id", "context", "question", "meta") if k not in row]
    if missing:
        raise DataError(f"{where} lacks {', '.join(missing)}; is this an MM-NIAH file?")
    meta = row["meta"]
    if not isinstance(meta, dict):
        raise DataError(f"{where}: `meta` must be an object; is this an MM-NIAH file?")
    length = meta.get("context_length")
    size(length, where, "`meta.context_length`", "fix the data file")
    for key in ("choices", "choices_image_path"):
        if meta.get(key) is not None and not isinstance(meta[key], list):
            raise DataError(f"{where}: `meta.{key}` must be a list or null; fix the data file")
    images = row.get("images_list") or []
    if not isinstance(images, list) or not all(isinstance(n, str) for n in images):
        raise DataError(f"{where}: `images_list` must be a list of image file names; fix the data file")
    if not all(isinstance(n, str) for n in meta.get("choices_image_path") or []):
        raise DataError(f"{where}: `meta.choices_image_path` must list image file names; fix the data file")
    checked_depth_bin(meta.get("placed_depth", 0.0), where)
    official_answer(task, row.get("answer"))


def load_task(path: Path, task: str, images_root: Path, found: dict[str, Path]) -> tuple[list[NiahSample], list[tuple[str, str]]]:
    """Samples of one task file, and (sample id, reason) for rows that cannot be sent. `found`
    keeps the image names already checked (inside the folder, a file), with their paths: the
    documents of a release share images, and each is checked and stat'ed once."""
    samples: list[NiahSample] = []
    skipped: list[tuple[str, str]] = []
    for line in read_jsonl_offsets(path, "check --data"):
        where, row = line.where, line.row
        _check_row(row, task, where)
        sid = f"{task}/{row['id']}"
        text, names = full_text(row)
        count = placeholders(text)
        if count != len(names):
            skipped.append((sid, f"{count} <image> placeholders but {len(names)} images"))
            continue
        try:
            checked = [(n, safe_file(images_root, n, where)) for n in names if n not in found]
        except DataError as exc:
            skipped.append((sid, str(exc)))
            continue
        absent = next((path for _, (path, regular) in checked if not regular), None)
        if absent is not None:
            skipped.append((sid, f"image {absent} does not exist"))
            continue
        found.update((n, path) for n, (path, _) in checked)
        paths = [found[n] for n in names]
        meta = row["meta"]
        samples.append(
            NiahSample(
                id=sid,
                task=task,
                row_id=row["id"],
                question=str(row["question"]),
                images=[ImageRef(key=n, path=p) for n, p in zip(names, paths)],
                answer=official_answer(task, row.get("answer")),
                context_length=float(meta["context_length"]),
                placed_depth=meta.get("placed_depth", 0.0),
                source=path,
                offset=line.offset,
                length=line.length,
                crc=line.crc,
                digest=text_digest(text),
                meta={k: meta.get(k) for k in ("num_images", "context_length_text", "context_length_image")},
            )
        )
    return samples, skipped


def load_release(data: Path, split: str | None, tasks: list[str]) -> tuple[list[NiahSample], list[tuple[str, str]], str]:
    """All requested tasks of a split, shortest context first; the rows skipped; the split."""
    folder, split = split_folder(data, split)
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise DataError(f"unknown task(s) {', '.join(unknown)}; use {', '.join(TASKS)}")
    images_root = folder / "images"
    samples: list[NiahSample] = []
    skipped: list[tuple[str, str]] = []
    any_task = False
    images: dict[str, Path] = {}
    for task in tasks:
        path = folder / "annotations" / f"{task}.jsonl"
        if not path.is_file():
            continue
        any_task = True
        got, bad = load_task(path, task, images_root, images)
        samples += got
        skipped += bad
    if not any_task:
        raise DataError(f"{folder / 'annotations'} holds none of the task files {', '.join(t + '.jsonl' for t in tasks)}")
    samples.sort(key=lambda s: s.context_length)
    return samples, skipped, split
