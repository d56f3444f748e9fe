"""Ref-Adv-s data: the Hugging Face parquet release or a JSONL with an images folder, as samples.

Every column has one rule: boxes four finite numbers (JSON text accepted), sides positive, the
distractor count the protocol's rule, the flags booleans in any of the release's spellings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlepoint.contract.base import DataError
from needlepoint.core.conversation import ImageRef
from needlepoint.core.geometry import Box
from needlepoint.core.jsonl import parse, read_jsonl
from needlepoint.core.numeric import boolean, finite, is_box, size
from needlepoint.core.text import writable

REQUIRED = ("normal_caption", "solution", "width", "height")


def distractor_count(value: Any, where: str = "distractor count") -> int:
    """The protocol's rule: int as is (negatives 0), list length, JSON string, else digit runs. A number
    that is not finite or beyond float range is refused (DataError naming `where`)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return max(int(finite(value, where, "the distractor count", "fix the file")), 0)
    if isinstance(value, (list, tuple)):
        return len(value)
    if isinstance(value, str):
        if not value.strip():
            return 0
        try:
            parsed = json.loads(value)
        except ValueError:
            return len(re.findall(r"\d+", value))
        if isinstance(parsed, list):
            return len(parsed)
        if isinstance(parsed, (int, float)) and not isinstance(parsed, bool):
            return max(int(finite(parsed, where, "the distractor count", "fix the file")), 0)
        return len(re.findall(r"\d+", value))
    return 0


@dataclass
class RefAdvSample:
    """One Ref-Adv-s case."""

    id: str
    row_idx: int
    caption: str
    gt: Box
    width: float
    height: float
    distractors: int
    image: ImageRef
    file_name: str = ""
    image_source: str = ""
    human_authored: bool = False
    use_negation: bool = False

    def fingerprint(self) -> str:
        return f"{self.id}|{self.caption}|{list(self.gt)}|{self.width}x{self.height}|{self.file_name}|{self.distractors}"


def read_box(value: Any, where: str, column: str = "solution") -> Box:
    """A box column as xyxy floats; the release stores some boxes as JSON text. DataError names `column`."""
    got = value
    if isinstance(value, str):  # the release stores some boxes as JSON text
        try:
            value = parse(value.encode("utf-8", "replace"), where, "fix the file")
        except DataError:
            value = None
    if not is_box(value):
        raise DataError(
            f"{where}: `{column}` must be a box [x1, y1, x2, y2] of four finite numbers, got {_got(got)}; fix the file"
        )
    x1, y1, x2, y2 = (float(v) for v in value)
    return x1, y1, x2, y2


def _got(value: Any) -> str:
    """A refused value as a message shows it: its type, and the value shortened."""
    text = writable(repr(value))
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"the string {text}" if isinstance(value, str) else text


def _dimension(value: Any, where: str, column: str) -> float:
    """A positive finite image side; a numeric string ("640") counts, as the release stores some."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    side = size(value, where, f"`{column}`", "fix the data file")
    if side == 0:
        raise DataError(f"{where}: `{column}` is 0; image sides must be positive; fix the data file")
    return side


def _sample(row: dict[str, Any], idx: int, image: ImageRef, where: str) -> RefAdvSample:
    width, height = (_dimension(row[k], where, k) for k in ("width", "height"))
    return RefAdvSample(
        id=str(idx),
        row_idx=idx,
        caption=str(row["normal_caption"]),
        gt=read_box(row["solution"], where),
        width=width,
        height=height,
        distractors=distractor_count(row.get("distractors"), where),
        image=image,
        file_name=str(row.get("file_name") or ""),
        image_source=str(row.get("image_source") or ""),
        human_authored=boolean(row.get("human_authored"), where, "`human_authored`"),  # as `score` reads it
        use_negation=boolean(row.get("use_negation"), where, "`use_negation`"),
    )


def _check_columns(columns: Sequence[str], where: str, needed: Sequence[str]) -> None:
    missing = [c for c in needed if c not in columns]
    if missing:
        raise DataError(f"{where} lacks the column(s) {', '.join(missing)}; point --data at the Ref-Adv-s release")


def load_parquet(root: Path, files: list[Path]) -> list[RefAdvSample]:
    """Samples from the parquet release; images stay in the files until requested. Image keys
    name the file relative to `root`, so shards of the same name in two folders stay apart."""
    from needlepoint.core.parquet import ParquetImage, ParquetTable

    samples: list[RefAdvSample] = []
    wanted = [*REQUIRED, "file_name", "distractors", "image_source", "human_authored", "use_negation"]
    for path in files:
        table = ParquetTable(path)
        _check_columns(table.columns, str(path), [*REQUIRED, "image"])
        table.check_image_column("point --data at the Ref-Adv-s release")
        for local, row in enumerate(table.rows(wanted)):
            idx = len(samples)
            image = ImageRef(key=f"{path.relative_to(root).as_posix()}#{local}", loader=ParquetImage(table, local))
            samples.append(_sample(row, idx, image, f"{path} row {local}"))
    return samples


def load_jsonl(path: Path, images_dir: Path | None) -> list[RefAdvSample]:
    """Samples from a JSONL with the release's fields; `image` (or `file_name`) names the file."""
    from needlepoint.core.images import safe_file

    images_root = images_dir or path.parent / "images"
    if not images_root.is_dir():
        raise DataError(f"images folder {images_root} does not exist; pass --images DIR")
    samples: list[RefAdvSample] = []
    for where, row in read_jsonl(path, "check --data"):
        _check_columns(list(row), where, REQUIRED)
        name = row.get("image") if isinstance(row.get("image"), str) else row.get("file_name")
        if not name:
            raise DataError(f"{where} names no image (`image` or `file_name`); fix the data file")
        image_path, regular = safe_file(images_root, name, where)
        if not regular:
            raise DataError(f"{where}: image {image_path} does not exist; check --images")
        samples.append(_sample(row, len(samples), ImageRef(key=name, path=image_path), where))
    return samples


def load_samples(data: Path, images_dir: Path | None) -> list[RefAdvSample]:
    """Samples from --data: a parquet file, a JSONL file (images in `images_dir`), or a folder of
    parquet shards (or of one JSONL with an images folder)."""
    if data.is_file() and data.suffix == ".jsonl":
        samples = load_jsonl(data, images_dir)
    elif data.is_file() and data.suffix == ".parquet":
        samples = load_parquet(data.parent, [data])
    elif data.is_dir():
        from needlepoint.core.parquet import parquet_files

        files = parquet_files(data)
        jsonl = sorted(data.glob("*.jsonl"))
        if files:
            samples = load_parquet(data, files)
        elif len(jsonl) > 1:
            names = ", ".join(p.name for p in jsonl[:4]) + (f" and {len(jsonl) - 4} more" if len(jsonl) > 4 else "")
            raise DataError(f"{data} holds {len(jsonl)} JSONL files ({names}); point --data at the one that is the release")
        elif jsonl:
            samples = load_jsonl(jsonl[0], images_dir or data / "images")
        else:
            raise DataError(f"{data} holds no parquet files and no JSONL; point --data at the Ref-Adv-s release")
    elif data.exists():
        raise DataError(
            f"--data {data} is neither a parquet file, a JSONL file nor a folder of them; point --data at the Ref-Adv-s release"
        )
    else:
        raise DataError(f"--data {data} does not exist; download the Ref-Adv-s release and point --data at it")
    return samples
