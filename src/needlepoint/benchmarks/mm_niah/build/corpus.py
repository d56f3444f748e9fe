"""Reading an interleaved corpus in OBELICS's released format, once, one document at a time.

A document is a row with `texts` and `images`, two lists of equal length holding, at each position,
a text (and None in `images`) or an image (and None in `texts`). Shards are parquet files or JSONL.
An image entry is a URL (resolved through a url -> file map; never fetched), a path inside the
images folder (relative to it, or absolute), or embedded bytes (`{"bytes": ...}`, raw or base64).

Documents with an image that cannot be found, that lies outside the images folder, or that does not
decode (a truncated file, invalid base64, a file that is no image, a decompression bomb) are
skipped and counted. Every image is decoded once here, at reduced size, to prove it whole; one of
more than MAX_PIXELS pixels is stored reduced to that size (JPEG, decoded at the smallest scale
that suffices), so that no later step decodes a huge image.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.geometry import fitted_size
from needlepoint.core.images import check_decodes, safe_path, transcode_jpeg
from needlepoint.core.jsonl import read_jsonl

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
BATCH_ROWS = 64
MAX_PIXELS = 4_000_000  # a corpus image above this is stored reduced (keeps the build's memory low)
EXAMPLES = 10  # skipped documents named in the manifest, with the reason


@dataclass(frozen=True)
class CorpusImage:
    """A readable corpus image: its bytes' digest and file suffix (its output name), its size."""

    data: bytes
    digest: str
    suffix: str
    width: int
    height: int


@dataclass
class Paragraph:
    """One line of the haystack: sentences (stripped, single-spaced), in order."""

    sentences: list[str]


Item = Paragraph | CorpusImage


@dataclass
class CorpusStats:
    """What reading the corpus met, for the manifest."""

    documents_read: int = 0
    documents_skipped_missing_image: int = 0
    documents_skipped_unreadable_image: int = 0
    documents_skipped_image_outside_folder: int = 0
    documents_empty: int = 0
    images_reduced: int = 0
    skipped_examples: list[str] = field(default_factory=list)  # the first EXAMPLES skips: where, why
    files: list[dict[str, Any]] = field(default_factory=list)

    def skip(self, kind: str, reason: str) -> None:
        """Count a skipped document under `documents_skipped_{kind}` and keep the first reasons."""
        name = f"documents_skipped_{kind}"
        setattr(self, name, getattr(self, name) + 1)
        if len(self.skipped_examples) < EXAMPLES:
            self.skipped_examples.append(reason)


class BadImage(Exception):
    """An image entry a document cannot use: `kind` is the count it goes to (unreadable_image,
    image_outside_folder), the message says where and why."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in blocks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def clean_text(text: str) -> list[Paragraph]:
    """Paragraphs of a corpus text: lines split at line breaks, then at sentence ends; whitespace
    runs become one space; `</s>` (dropped by the eval) and `<image>` (the placeholder) are removed."""
    text = text.replace("</s>", " ").replace("<image>", " ")
    paragraphs = []
    for line in text.splitlines():
        sentences = [" ".join(s.split()) for s in SENTENCE_END.split(line)]
        sentences = [s for s in sentences if s]
        if sentences:
            paragraphs.append(Paragraph(sentences))
    return paragraphs


class ImageResolver:
    """Corpus image entries to bytes: a url -> file map, paths inside the images folder, embedded bytes."""

    def __init__(self, images: Path | None) -> None:
        self.root: Path | None = None
        self.urls: dict[str, Path] = {}
        self.source: dict[str, Any] = {"images": str(images) if images else None}
        if images is None:
            return
        if images.is_dir():
            self.root = images
            self._read_img2dataset(images)
        elif images.is_file():
            self.root = images.parent
            self._read_map_file(images)
            self.source["map_sha256"] = file_sha256(images)
        else:
            raise DataError(
                f"--images {images} does not exist; give the img2dataset output folder, a url-to-file map, or the images folder"
            )
        self.source["urls_mapped"] = len(self.urls)

    def _read_img2dataset(self, folder: Path) -> None:
        """img2dataset's output: per shard, `{key}.json` beside `{key}.jpg` with the source `url`
        and `status`; or its per-shard parquet (url, key, status)."""
        shards = sorted(folder.glob("*.parquet"))
        if shards:
            import pyarrow.parquet as pq

            for shard in shards:
                table = pq.read_table(shard)
                names = table.column_names
                if "url" not in names or "key" not in names:
                    continue
                status = table.column("status").to_pylist() if "status" in names else [None] * table.num_rows
                for row, (url, key, st) in enumerate(
                    zip(table.column("url").to_pylist(), table.column("key").to_pylist(), status)
                ):
                    if url and key and st in (None, "success"):
                        self.urls.setdefault(url, safe_path(folder / shard.stem, str(key), f"{shard} row {row} (`key`)"))
            return
        for sidecar in sorted(folder.rglob("*.json")):
            try:
                info = json.loads(sidecar.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(info, dict) and info.get("url") and info.get("status", "success") == "success":
                self.urls.setdefault(str(info["url"]), sidecar.with_suffix(""))

    def _read_map_file(self, path: Path) -> None:
        """A map file: a JSON object {url: path}, or JSONL rows with `url` and `path` (or `file`),
        or tab-separated `url<TAB>path` lines; paths relative to the map's folder."""

        def add(url: Any, rel: Any, where: str) -> None:
            if not isinstance(url, str) or not isinstance(rel, str):
                raise DataError(f"{where} must give a url and a path as strings; fix the map file")
            self.urls.setdefault(url, safe_path(path.parent, rel, where, absolute=True))

        if path.suffix == ".json":
            try:
                mapping = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                raise DataError(f"{path} is not valid JSON; a map file is a JSON object of url -> path") from None
            if not isinstance(mapping, dict):
                raise DataError(f"{path} must hold a JSON object of url -> path")
            for url, rel in mapping.items():
                add(url, rel, f"{path} entry {url!r}")
        elif path.suffix == ".jsonl":
            for where, row in read_jsonl(path):
                add(row.get("url"), row.get("path", row.get("file")), where)
        else:
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                raise DataError(f"{path} is not UTF-8 text; save the image map as UTF-8") from None
            for lineno, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    url, _, rel = line.partition("\t")
                    add(url.strip(), rel.strip(), f"{path} line {lineno}")

    def _existing(self, stem_or_file: Path) -> Path | None:
        if stem_or_file.is_file():
            return stem_or_file
        for suffix in IMAGE_SUFFIXES:
            candidate = stem_or_file.with_name(stem_or_file.name + suffix)
            if candidate.is_file():
                return candidate
        return None

    def read(self, entry: Any, where: str) -> tuple[bytes, str] | None:
        """(bytes, suffix) of an image entry, or None when it cannot be found here; BadImage for
        invalid base64 or a path that leaves the images folder."""
        if isinstance(entry, dict):
            data = entry.get("bytes")
            if isinstance(data, str):
                try:
                    decoded = base64.b64decode(data)
                except (binascii.Error, ValueError):
                    decoded = b""
                if data.strip() and not decoded:
                    raise BadImage("unreadable_image", f"{where}: an embedded image is not valid base64")
                data = decoded
            if data:
                return bytes(data), ""
            entry = entry.get("path") or entry.get("url")
        if isinstance(entry, (bytes, bytearray)):
            return bytes(entry), ""
        if not isinstance(entry, str) or not entry:
            return None
        if "://" in entry:
            target = self.urls.get(entry)
        elif self.root is not None:
            try:
                target = safe_path(self.root, entry, where, absolute=True)
            except DataError as exc:
                raise BadImage("image_outside_folder", str(exc)) from None
        else:
            return None
        found = self._existing(target) if target is not None else None
        if found is None:
            return None
        try:
            return found.read_bytes(), found.suffix.lower()
        except OSError as exc:
            raise BadImage("unreadable_image", f"{where}: image file {found} cannot be read ({exc.strerror or exc})") from None


CHECKED_KEPT = 200_000  # images remembered as decoding (by digest), so that one met again is not decoded again


def _image(data: bytes, suffix: str, where: str, stats: CorpusStats, checked: dict[str, tuple[int, int, str]]) -> CorpusImage:
    """The corpus image, once decoded whole (at reduced size) without error; stored reduced when
    it has more than MAX_PIXELS pixels. BadImage when it does not decode. `checked` remembers
    the images that decoded at their own size, by digest."""
    from PIL import Image

    digest = hashlib.sha1(data).hexdigest()[:20]
    known = checked.get(digest)
    if known is not None:
        width, height, fmt = known
        return CorpusImage(data, digest, _suffix(fmt, suffix), width, height)
    try:
        width, height = check_decodes(data, f"at {where}")
        with Image.open(io.BytesIO(data)) as im:
            fmt = (im.format or "").lower()
        if width * height > MAX_PIXELS:
            side = max(1, int(max(width, height) * math.sqrt(MAX_PIXELS / (width * height))))
            data = transcode_jpeg(data, ImageRef(key=f"at {where}", max_side=side), gap=1.0)
            width, height = fitted_size(width, height, side)
            stats.images_reduced += 1
            return CorpusImage(data, hashlib.sha1(data).hexdigest()[:20], ".jpg", width, height)
    except DataError as exc:
        raise BadImage("unreadable_image", str(exc)) from None
    if len(checked) < CHECKED_KEPT:
        checked[digest] = (width, height, fmt)
    return CorpusImage(data, digest, _suffix(fmt, suffix), width, height)


def _suffix(fmt: str, suffix: str) -> str:
    return {"jpeg": ".jpg", "png": ".png", "webp": ".webp", "gif": ".gif", "bmp": ".bmp"}.get(fmt, suffix or ".img")


def _rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
            present = [c for c in ("texts", "images") if c in pf.schema_arrow.names]
            if len(present) < 2:
                raise DataError(f"{path} has no `texts` and `images` columns; is it an OBELICS shard?")
            index = 0
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=present):
                for row in batch.to_pylist():
                    yield f"{path} row {index}", row
                    index += 1
        except DataError:
            raise
        except Exception as exc:  # pyarrow raises many types for damaged files
            raise DataError(f"{path} cannot be read as parquet ({exc}); check the shard") from None
    else:
        yield from read_jsonl(path, "check --corpus")


def corpus_files(paths: list[Path]) -> list[Path]:
    """The shard files named (folders give their .parquet/.jsonl files, in name order)."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.suffix in (".parquet", ".jsonl") and q.is_file())
            if not found:
                raise DataError(f"--corpus folder {p} holds no .parquet or .jsonl shards")
            files += found
        elif p.is_file():
            if p.suffix not in (".parquet", ".jsonl"):
                raise DataError(f"--corpus {p} is neither .parquet nor .jsonl; give OBELICS shards")
            files.append(p)
        else:
            raise DataError(f"--corpus {p} does not exist; give OBELICS shard files or folders")
    return files


def documents(files: list[Path], resolver: ImageResolver, stats: CorpusStats) -> Iterator[list[Item]]:
    """Each usable document's items in order (paragraphs and images), shard by shard, once."""
    checked: dict[str, tuple[int, int, str]] = {}
    for path in files:
        for where, row in _rows(path):
            texts, images = row.get("texts"), row.get("images")
            if not isinstance(texts, list) or not isinstance(images, list) or len(texts) != len(images):
                raise DataError(f"{where} needs `texts` and `images` lists of equal length (OBELICS format); fix the shard")
            stats.documents_read += 1
            items: list[Item] = []
            usable = True
            for text, entry in zip(texts, images):
                if text is not None:
                    items += clean_text(str(text))
                elif entry is not None:
                    try:
                        got = resolver.read(entry, where)
                        if got is None:
                            stats.skip("missing_image", f"{where}: image {str(entry)[:200]!r} was not found")
                            usable = False
                            break
                        items.append(_image(*got, where, stats, checked))
                    except BadImage as exc:
                        stats.skip(exc.kind, str(exc))
                        usable = False
                        break
            if not usable:
                continue
            if not items:
                stats.documents_empty += 1
                continue
            yield items
