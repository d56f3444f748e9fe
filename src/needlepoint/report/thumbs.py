"""Report thumbnails: small JPEGs of the samples' images with their boxes drawn in, drawn once.

Cheap by construction, because a report of thousands of samples must not outlast the run:

- an image is decoded at reduced size (`images.decode_rgb`: JPEG draft mode, big PNGs in bands);
- a thumbnail's file name is a hash of everything drawn on it, followed by its pixel size, so an
  existing one (a resumed run, a rewritten report) is reused after one directory listing;
- thumbnails are drawn on worker threads (Pillow releases the GIL while it decodes, resamples and
  encodes), and `Drafter` starts drawing them while the run is still answering, so little is left
  to draw once the last answer has arrived.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.base import ReportImage, ReportItem

THUMB_MAX = 320  # the cards show images at most 320 px wide
THUMB_QUALITY = 82
THUMB_VERSION = "2"
GT_COLOUR = "#1fbf4a"
PRED_COLOUR = "#e0218a"
GROUP_COLOURS = ("#22c55e", "#2f6fed", "#f59e0b", "#ef4444", "#a855f7", "#06b6d4", "#ec4899")
_SKIPPED = "skipped"  # a draft whose bytes were no longer in memory
_NAME = re.compile(r"^([0-9a-f]{20})-(\d+)x(\d+)\.jpg$")

Size = tuple[int, int]


def grouped(items: Sequence[ReportItem]) -> bool:
    """Whether boxes are coloured by group (some box is in a group other than 1) rather than by kind."""
    return any(b.group != 1 for it in items for im in it.images for b in im.boxes)


def thumb_key(image: ReportImage, is_grouped: bool) -> str:
    """A hash of what a thumbnail shows: the image, its boxes, the colouring and the drawing code."""
    boxes = [[round(float(v), 2) for v in b.box] + [b.kind, b.group] for b in image.boxes]
    key = json.dumps([THUMB_VERSION, THUMB_MAX, is_grouped, str(image.image.key), boxes])
    return hashlib.sha1(key.encode()).hexdigest()[:20]


def file_name(key: str, size: Size) -> str:
    """The thumbnail's file name: its key and its size, so that listing the folder gives both."""
    return f"{key}-{size[0]}x{size[1]}.jpg"


def box_colour(kind: str, group: int, is_grouped: bool) -> str:
    """The colour of a box: by group when the report is grouped, else ground truth or prediction."""
    if is_grouped:
        return GROUP_COLOURS[(max(int(group), 1) - 1) % len(GROUP_COLOURS)]
    return GT_COLOUR if kind == "gt" else PRED_COLOUR


def _dashed_rect(draw: Any, box: Sequence[float], colour: str, width: int, dash: int = 9, gap: int = 6) -> None:
    x1, y1, x2, y2 = box
    for a, b, fixed, horizontal in ((x1, x2, y1, True), (x1, x2, y2, True), (y1, y2, x1, False), (y1, y2, x2, False)):
        pos = a
        while pos < b:
            end = min(pos + dash, b)
            line = [(pos, fixed), (end, fixed)] if horizontal else [(fixed, pos), (fixed, end)]
            draw.line(line, fill=colour, width=width)
            pos = end + gap


def render_thumbnail(data: bytes | Path, image: ReportImage, is_grouped: bool) -> tuple[bytes, Size]:
    """A JPEG of `data` (stored bytes, or a big file read as it is decoded) at most THUMB_MAX px a
    side with the image's boxes drawn in, and its size. Ground truth is drawn solid, predictions
    dashed on top."""
    from PIL import Image, ImageDraw

    from needlepoint.images import decode_rgb

    with Image.open(data if isinstance(data, Path) else io.BytesIO(data)) as probe:
        width, height = probe.size
    im = decode_rgb(data, str(image.image.key), THUMB_MAX, gap=1.0)
    sx, sy = im.width / max(width, 1), im.height / max(height, 1)
    draw = ImageDraw.Draw(im)
    line = max(2, round(max(im.size) / 160))
    for b in sorted(image.boxes, key=lambda b: b.kind != "gt"):
        x1, x2 = sorted((float(b.box[0]) * sx, float(b.box[2]) * sx))
        y1, y2 = sorted((float(b.box[1]) * sy, float(b.box[3]) * sy))
        colour = box_colour(b.kind, b.group, is_grouped)
        if b.kind == "gt":
            draw.rectangle((x1, y1, x2, y2), outline=colour, width=line)
        else:
            _dashed_rect(draw, (x1, y1, x2, y2), colour, line)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=THUMB_QUALITY)
    return buf.getvalue(), im.size


def _all_cores() -> int:
    return max(1, min(8, os.cpu_count() or 1))


class Thumbnails:
    """The thumbnails folder of one report: those that exist, and the drawing of missing ones on
    worker threads. `submit` starts drawing; `finish` returns every wanted thumbnail's size."""

    def __init__(self, folder: Path, workers: int | None = None) -> None:
        self.folder = Path(folder)
        self._done: dict[str, Size] = {}
        if self.folder.is_dir():
            for entry in os.scandir(self.folder):
                m = _NAME.match(entry.name)
                if m:
                    self._done[m.group(1)] = (int(m.group(2)), int(m.group(3)))
        self._pending: dict[str, Future[Size | None | str]] = {}
        self._lock = threading.Lock()
        self._workers = workers or _all_cores()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, image: ReportImage, is_grouped: bool, draft: bool = False) -> str:
        """Start drawing the thumbnail of `image` unless it exists or is under way; its key.
        A draft never makes a loader read: one with a `cached()` method (parquet rows) is asked
        for bytes already in memory, and a draft whose bytes are gone is left to `finish`."""
        key = thumb_key(image, is_grouped)
        with self._lock:
            if key not in self._done and key not in self._pending:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="thumbs")
                self._pending[key] = self._pool.submit(self._draw, key, image, is_grouped, draft)
        return key

    def _draw(self, key: str, image: ReportImage, is_grouped: bool, draft: bool) -> Size | None | str:
        from needlepoint.images import read_small_image
        from needlepoint.store import write_atomic

        try:
            ref = image.image
            peek = getattr(ref.loader, "cached", None) if draft else None
            data: bytes | Path | None = peek() if peek is not None else read_small_image(ref) or ref.path
            if data is None:
                return _SKIPPED
            jpeg, size = render_thumbnail(data, image, is_grouped)
            write_atomic(self.folder / file_name(key, size), jpeg)
        except Exception:  # noqa: BLE001 - an unreadable image must not cost the report; the page says so
            return None
        with self._lock:
            self._done[key] = size
        return size

    def finish(self, items: Sequence[ReportItem], is_grouped: bool) -> dict[str, Size | None]:
        """Every thumbnail the items show, drawn if missing: key -> size (None: unreadable image).
        Drafts under way end first; the rest is drawn in item order (parquet is read forward).
        Thumbnails no item shows any more are removed."""
        wanted: dict[str, ReportImage] = {}
        for it in items:
            for im in it.images:
                wanted.setdefault(thumb_key(im, is_grouped), im)
        with self._lock:
            drafts = list(self._pending.values())
        for future in drafts:
            future.result()
        self.close()
        self._workers = _all_cores()  # drafts leave a core to the run; now the report is all there is
        sizes: dict[str, Size | None] = {}
        for image in wanted.values():
            self.submit(image, is_grouped)
        with self._lock:
            jobs = dict(self._pending)
        for key in wanted:
            job = jobs.get(key)
            result = job.result() if job is not None else self._done.get(key)
            sizes[key] = result if isinstance(result, tuple) else None
        self.close(cancel=True)
        keep = {file_name(k, s) for k, s in sizes.items() if s is not None}
        if self.folder.is_dir():
            for entry in os.scandir(self.folder):
                if entry.name.endswith(".jpg") and entry.name not in keep:
                    os.unlink(entry.path)
        return sizes

    def close(self, cancel: bool = False) -> None:
        """Wait for the drawing under way (and for what is queued, unless `cancel`); stop the workers."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=cancel)
        with self._lock:
            self._pending.clear()


class Drafter:
    """Draws a run's thumbnails while it answers: `add` is called with each stored record (see
    `runner.RunOptions.on_record`); every few records the benchmark's report items for them are
    built and their images submitted. The report then finds them drawn (`Thumbnails.finish`)."""

    def __init__(
        self, folder: Path, items_of: Callable[[list[Any], list[dict[str, Any]]], list[ReportItem]], batch: int = 16
    ) -> None:
        self.thumbnails = Thumbnails(folder, workers=max(1, _all_cores() - 1))  # a core stays with the run
        self._items_of = items_of
        self._batch = batch
        self._samples: list[Any] = []
        self._records: list[dict[str, Any]] = []
        self.grouped = False

    def add(self, sample: Any, record: dict[str, Any]) -> None:
        """Queue one finished sample; every `batch` samples, start drawing their thumbnails."""
        self._samples.append(sample)
        self._records.append(record)
        if len(self._samples) >= self._batch:
            self.flush()

    def flush(self) -> None:
        """Start drawing the thumbnails of the queued samples."""
        samples, records = self._samples, self._records
        self._samples, self._records = [], []
        if not samples:
            return
        try:
            items = self._items_of(samples, records)
            self.grouped = self.grouped or grouped(items)
            for it in items:
                for im in it.images:
                    self.thumbnails.submit(im, self.grouped, draft=True)
        except Exception:  # noqa: BLE001 - drafts are an optimisation: the report draws what is missing
            pass
