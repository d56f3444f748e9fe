"""The Hugging Face parquet layout: `lmms-lab/RefCOCO`, `lmms-lab/RefCOCOplus`, `lmms-lab/RefCOCOg`.

Each set's card declares the columns `question_id`, `image`, `question`, `answer` (a list of
strings: the object's referring expressions), `segmentation`, `bbox` (float32), `iscrowd`,
`file_name`, with splits in `data/{split}-NNNNN-of-NNNNN.parquet` (RefCOCO: val, test, testA,
testB; RefCOCO+: val, testA, testB; RefCOCOg: val, test). A row is one object: lmms-eval's
`utils_rec.py` reads `bbox` as COCO's (x, y, width, height) and makes one sample per string of
`answer`; so do we, in the pixels of the image the row holds. The image size is read from the
image itself (the rows carry none). RefCOCO's `test` split is none of the eight and is not read.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.refcoco.data import SPLITS, RefCocoSample, target_box
from needlepoint.contract import DataError, ImageRef, is_box

__all__ = ["DATASETS", "parquet_splits", "read_parquet_split"]

DATASETS = {"refcocoplus": "refcoco+", "refcoco+": "refcoco+", "refcocog": "refcocog", "refcoco": "refcoco"}
"""A set's folder name (lower case; `lmms-lab/RefCOCOplus` -> RefCOCOplus) -> the splits' prefix."""


def _dataset(folder: Path) -> str | None:
    """The set a folder holds, by its name (RefCOCO, RefCOCOplus, RefCOCOg, also as the end of a
    Hugging Face cache name such as datasets--lmms-lab--RefCOCOg), else None."""
    name = folder.name.lower()
    return next((prefix for suffix, prefix in DATASETS.items() if name.endswith(suffix)), None)


def parquet_splits(data: Path) -> dict[str, list[Path]]:
    """The parquet files of each split under `data`: `data` itself named as a set, or folders in
    it named so (one level down)."""
    folders = [data] if _dataset(data) else [p for p in sorted(data.iterdir()) if p.is_dir() and _dataset(p)]
    found: dict[str, list[Path]] = {}
    for folder in folders:
        prefix = _dataset(folder)
        for path in sorted(folder.rglob("*.parquet")):
            split = f"{prefix}_{path.name.split('-')[0]}"
            if split in SPLITS and path.is_file():
                found.setdefault(split, []).append(path)
    return found


def _image_size(data: bytes, where: str) -> tuple[int, int]:
    """An encoded image's (width, height) from its header."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height = im.size
    except Exception as exc:  # Pillow raises many types for bad files
        raise DataError(f"{where}: the image cannot be read ({exc.__class__.__name__}); re-download the set") from None
    return int(width), int(height)


def _answers(value: Any, where: str) -> list[str]:
    """The row's referring expressions (`answer`: a list of strings; one string is one expression)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(a, str) and a.strip() for a in items):
        raise DataError(f"{where}: `answer` must be the object's referring expressions, a list of strings; re-download the set")
    return items


def read_parquet_split(data: Path, files: list[Path], split: str) -> list[RefCocoSample]:
    """One split's samples: one per expression of each row, in row order."""
    from needlepoint.core.parquet import ParquetImage, ParquetTable

    samples: list[RefCocoSample] = []
    for path in files:
        table = ParquetTable(path)
        missing = [c for c in ("answer", "bbox", "image") if c not in table.columns]
        if missing:
            raise DataError(f"{path} lacks the column(s) {', '.join(missing)}; point --data at the lmms-lab RefCOCO sets")
        key = path.relative_to(data).as_posix() if path.is_relative_to(data) else path.name
        for local, row in enumerate(table.rows(["answer", "bbox", "file_name"])):
            where = f"{path} row {local}"
            box = row["bbox"]
            if not is_box(box):
                raise DataError(f"{where}: `bbox` must be four finite numbers (x, y, width, height); re-download the set")
            x, y, w, h = (float(v) for v in box)
            gt = target_box([x, y, x + w, y + h], where)
            width, height = _image_size(table.image_bytes(local), where)
            image = ImageRef(key=f"{key}#{local}", loader=ParquetImage(table, local))
            for sent in _answers(row["answer"], where):
                index = len(samples)
                samples.append(
                    RefCocoSample(
                        id=f"{split}/{index}",
                        split=split,
                        index=index,
                        caption=sent,
                        gt=gt,
                        width=float(width),
                        height=float(height),
                        image=image,
                        file_name=str(row.get("file_name") or ""),
                    )
                )
    return samples
