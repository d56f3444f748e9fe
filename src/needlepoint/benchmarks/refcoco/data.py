"""RefCOCO, RefCOCO+ and RefCOCOg samples: the eight evaluation splits, one sample per referring
expression, and the rules every layout's reader shares (a target box, an image side); the
converted JSONL files the Qwen-VL and InternVL evaluators download are read here, one per split
named as the split. layouts.py picks the layout `--data` holds (the parquet sets: hf.py; the
original pickles: refer.py). Every layout ends in the same samples: the expression, the target as
pixel [x1, y1, x2, y2], the image's size, the image.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlepoint.contract import DataError, ImageRef, is_box, read_jsonl, safe_file, size

__all__ = ["SPLITS", "RefCocoSample", "check_splits", "image_side", "read_jsonl_split", "split_of_name", "target_box"]

SPLITS = (
    "refcoco_val",
    "refcoco_testA",
    "refcoco_testB",
    "refcoco+_val",
    "refcoco+_testA",
    "refcoco+_testB",
    "refcocog_val",
    "refcocog_test",
)
"""The evaluation splits, in the order the model cards print them."""

JSONL_FIELDS = ("image", "sent", "bbox", "width", "height")


@dataclass
class RefCocoSample:
    """One referring expression: its split, the expression, the target box (pixel xyxy), the image
    and its size. `index` is the expression's place in its split (the line of a JSONL file)."""

    id: str
    split: str
    index: int
    caption: str
    gt: tuple[float, float, float, float]
    width: float
    height: float
    image: ImageRef
    file_name: str = ""

    def fingerprint(self) -> str:
        return f"{self.id}|{self.caption}|{list(self.gt)}|{self.width}x{self.height}|{self.file_name}"


def check_splits(splits: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """`--splits` as a tuple of known split names (None: every split the data holds); DataError
    in one sentence for an unknown name."""
    if splits is None:
        return None
    names = [s.strip() for s in (splits.split(",") if isinstance(splits, str) else splits) if s.strip()]
    unknown = [s for s in names if s not in SPLITS]
    if unknown or not names:
        raise DataError(f"--splits takes a comma-separated list of {', '.join(SPLITS)}, not {','.join(unknown) or repr(splits)}")
    return tuple(s for s in SPLITS if s in names)


def split_of_name(name: str) -> str | None:
    """The split a file is named for ("refcoco+_val.jsonl" -> "refcoco+_val"), None for another name."""
    stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    return stem if stem in SPLITS else None


def target_box(value: Any, where: str, column: str = "bbox") -> tuple[float, float, float, float]:
    """A target box of four finite numbers with x2 >= x1 and y2 >= y1; DataError naming `column`."""
    if not is_box(value):
        raise DataError(f"{where}: `{column}` must be four finite numbers, got {str(value)[:60]}; fix the file")
    x1, y1, x2, y2 = (float(v) for v in value)
    if x2 < x1 or y2 < y1:
        raise DataError(
            f"{where}: `{column}` {[x1, y1, x2, y2]} is not [x1, y1, x2, y2] with x2 >= x1 and y2 >= y1; fix the file"
        )
    return x1, y1, x2, y2


def image_side(value: Any, where: str, column: str) -> float:
    """A positive finite image side (`width`, `height`)."""
    side = size(value, where, f"`{column}`", "fix the file")
    if side == 0:
        raise DataError(f"{where}: `{column}` is 0; image sides must be positive; fix the file")
    return side


def read_jsonl_split(path: Path, split: str, images: Path) -> list[RefCocoSample]:
    """One converted JSONL split: a sample per line, its image `images / image` (kept inside
    `images`: an absolute path must lie in it). The fields are those InternVL's and Qwen-VL's
    evaluate_grounding.py read: `image`, `sent`, `bbox` (pixel xyxy), `width`, `height`."""
    samples: list[RefCocoSample] = []
    for where, row in read_jsonl(path, "point --data at the converted RefCOCO files"):
        missing = [k for k in JSONL_FIELDS if k not in row]
        if missing:
            raise DataError(f"{where} lacks {', '.join(missing)}; a converted RefCOCO line has {', '.join(JSONL_FIELDS)}")
        name, sent = row["image"], row["sent"]
        if not isinstance(name, str) or not name.strip():
            raise DataError(f"{where}: `image` must name an image file; fix the file")
        if not isinstance(sent, str) or not sent.strip():
            raise DataError(f"{where}: `sent` must be the referring expression (a non-empty string); fix the file")
        image_path, regular = safe_file(images, name, where, absolute=True)
        if not regular:
            raise DataError(f"{where}: image {image_path} does not exist; pass --images, the folder its `image` paths start in")
        index = len(samples)
        samples.append(
            RefCocoSample(
                id=f"{split}/{index}",
                split=split,
                index=index,
                caption=sent,
                gt=target_box(row["bbox"], where),
                width=image_side(row["width"], where, "width"),
                height=image_side(row["height"], where, "height"),
                image=ImageRef(key=name, path=image_path),
                file_name=name,
            )
        )
    return samples
