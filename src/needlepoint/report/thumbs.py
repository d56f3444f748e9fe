"""Report thumbnails: small JPEGs of the samples' images at the size the page shows them; the page
draws the boxes.

Cheap by construction, because a report of thousands of samples must not cost more than the run:

- a thumbnail shows the image alone (the page lays the boxes over it as SVG), so it depends on the
  image only: rescoring, another prediction or a rewritten report reuse it;
- it is as big as the page shows it: at most 320 px a side on a card of a few images, 128 on a
  card of many (`side_of`: an MM-NIAH document's 20-60 images are shown at 96 px), and at most
  THUMB_BYTES (10 KB; the JPEG quality steps down until it fits);
- an image is decoded at reduced size (`images.decode_rgb`: JPEG draft mode, big PNGs in bands);
- a thumbnail's file name is a hash of the image's key and the side it is drawn at, followed by
  the image's own pixel size (what the boxes refer to), so an existing one (a resumed run, a
  rewritten report, a draft) is reused after one directory listing;
- thumbnails are drawn on every core: in worker processes when there are many (a thread would
  wait for the interpreter lock), on threads for a few; while a run answers, forked processes
  draw them at the lowest priority (`report.drafts`);
- one file per image only where the page needs one: at a run's end (`link_missing`), an image
  not drafted by then that is a file of its own (an MM-NIAH or MC-Bench image, a browser format,
  at most LINK_MAX_BYTES) is shown from that file by a relative link rather than decoded, since
  decoding costs about a millisecond an image however small the thumbnail and the run's end must
  not wait on it (docs/performance.md); images without a file of their own (a parquet release)
  are drawn, for at most `end_budget` (about 0.6 ms a sample): what is left then is drawn when
  the same command runs again (`report.html`). A report written otherwise (a merge, a human run)
  draws every thumbnail.
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from needlepoint.contract.base import ReportImage, ReportItem

THUMB_MAX = 320  # a card of a few images shows each at most 320 px wide
THUMB_MANY = 128  # a card of more than MANY images shows each at most 96 px (the sent view 120 px)
MANY = 4  # the page's script lays out more images than this as a grid of small ones
THUMB_BYTES = 10_000  # the most a thumbnail file holds
QUALITIES = (60, 45, 30)  # JPEG qualities tried in turn until the thumbnail fits THUMB_BYTES
THUMB_VERSION = "4"
LINK_MAX_BYTES = 1 << 20  # an image file up to this size may be shown from its own file at a run's end
LINK_SUFFIXES = frozenset((".jpg", ".jpeg", ".png", ".gif", ".webp"))  # what every browser shows
DRAWING_NICENESS = 10  # how much lower the drawing processes run than the run (os.nice)
GT_COLOUR = "#1fbf4a"
PRED_COLOUR = "#e0218a"
GROUP_COLOURS = ("#22c55e", "#2f6fed", "#f59e0b", "#ef4444", "#a855f7", "#06b6d4", "#ec4899")
PROCESS_MIN_IMAGES = 64  # from this many images on, draw in processes (their start costs about 0.2 s)
UNKNOWN_SIZE = (0, 0)  # a linked image without boxes: its size is not read (the page needs none)
END_BUDGET_MS = 0.6  # a run's end draws what the drafts left for at most this long a sample...
END_BUDGET_MIN_S = 1.0  # ...or this long, whichever is more; the rest waits for the command's next run
_NAME = re.compile(r"^([0-9a-f]{20})-(\d+)x(\d+)\.jpg$")

Size = tuple[int, int]


def end_budget(samples: int) -> float:
    """How long a run's end may draw the thumbnails its drafts left (END_BUDGET_MS a sample, at
    least END_BUDGET_MIN_S), so that the report never costs the run more than about a
    millisecond a sample after its last answer."""
    return max(END_BUDGET_MIN_S, END_BUDGET_MS * samples / 1000)


def grouped(items: Sequence[ReportItem]) -> bool:
    """Whether boxes are coloured by group (some box is in a group other than 1) rather than by kind."""
    return any(b.group != 1 for it in items for im in it.images for b in im.boxes)


def side_of(item: ReportItem) -> int:
    """The side an item's thumbnails are drawn at: THUMB_MAX on a card of a few images, THUMB_MANY
    on a card of many (the page shows those small)."""
    return THUMB_MAX if len(item.images) <= MANY else THUMB_MANY


def thumb_key(image: ReportImage, side: int = THUMB_MAX) -> str:
    """A hash of what a thumbnail shows: the image (by its key), the side it is drawn at, the drawing code."""
    key = f"{THUMB_VERSION}\0{side}\0{image.image.key}"
    return hashlib.sha1(key.encode()).hexdigest()[:20]


def file_name(key: str, size: Size) -> str:
    """The thumbnail's file name: its key and the image's own size, so that listing the folder gives both."""
    return f"{key}-{size[0]}x{size[1]}.jpg"


def relative_url(target: str | Path, start: str | Path) -> str:
    """A relative URL from folder `start` to `target` (percent-encoded). The URL of `target`'s
    folder is kept (`_folder_url`): a report links thousands of images from a few folders; a name
    of URL-safe characters only (most are) is used as it is."""
    folder, name = os.path.split(os.fspath(target))
    base = _folder_url(folder or os.curdir, os.fspath(start))
    name = name if _URL_SAFE.fullmatch(name) else quote(name)
    return f"{base}/{name}" if base else name


_URL_SAFE = re.compile(r"[A-Za-z0-9_.~-]+")  # what `quote` leaves as it is in a name


@lru_cache(maxsize=4096)
def _folder_url(folder: str, start: str) -> str:
    rel = os.path.relpath(folder, start)  # both made absolute here, once a folder (not once an image)
    return "" if rel == "." else "/".join(quote(part) for part in Path(rel).parts)


def box_colour(kind: str, group: int, is_grouped: bool) -> str:
    """The colour of a box: by group when the report is grouped, else ground truth or prediction."""
    if is_grouped:
        return GROUP_COLOURS[(max(int(group), 1) - 1) % len(GROUP_COLOURS)]
    return GT_COLOUR if kind == "gt" else PRED_COLOUR


def make_thumbnail(data: bytes | Path, key: str, side: int = THUMB_MAX) -> tuple[bytes, Size]:
    """A JPEG of `data` (stored bytes, or a big file read as it is decoded) at most `side` px a
    side and THUMB_BYTES long, and the size of the image itself (the size its boxes refer to).
    `key` names the image in error messages."""
    from PIL import Image

    from needlepoint.core.images import decode_rgb, jpeg_header

    head = jpeg_header(data) if not isinstance(data, Path) else None
    if head is not None:
        size = (head[0], head[1])
    else:
        with Image.open(data if isinstance(data, Path) else io.BytesIO(data)) as probe:
            size = probe.size
    im = decode_rgb(data, key, side, gap=1.0)
    while True:
        for quality in QUALITIES:
            buf = io.BytesIO()
            im.save(buf, format="JPEG", quality=quality)
            if buf.tell() <= THUMB_BYTES:
                return buf.getvalue(), size
        if max(im.size) <= 16:  # no image this small holds more
            return buf.getvalue(), size
        im = im.resize((max(1, im.size[0] * 3 // 4), max(1, im.size[1] * 3 // 4)), Image.Resampling.BICUBIC)


def image_source(ref: Any) -> bytes | Path | None:
    """What a thumbnail of the image `ref` (an ImageRef) is made from: a small image's bytes, a big
    file's path (read as it is decoded); None when it cannot be read (the page says so)."""
    from needlepoint.core.images import read_small_image

    try:
        return read_small_image(ref) or ref.path
    except Exception:
        return None


def linkable(ref: Any) -> Path | None:
    """The image's own file when the page may show it as it is (a file of its own, not a parquet
    row, in a browser format, at most LINK_MAX_BYTES), else None."""
    path = getattr(ref, "path", None)
    if getattr(ref, "loader", None) is not None or path is None:
        return None
    name = os.fspath(path)
    if os.path.splitext(name)[1].lower() not in LINK_SUFFIXES:
        return None
    try:
        return path if os.stat(name).st_size <= LINK_MAX_BYTES else None
    except OSError:
        return None


def file_size(path: Path) -> Size | None:
    """An image file's pixel size from its header (one small read for a JPEG), None when unreadable."""
    from PIL import Image

    from needlepoint.core.images import jpeg_header

    try:
        with open(path, "rb") as fh:
            head = jpeg_header(fh.read(64 << 10))
            if head is not None:
                return (head[0], head[1])
            fh.seek(0)
            with Image.open(fh) as probe:
                return (int(probe.size[0]), int(probe.size[1]))
    except Exception:
        return None


def link_to(image: ReportImage, page: str) -> tuple[str, Size] | None:
    """How a page in folder `page` shows `image` from its own file (`linkable`): the file's URL
    relative to the page and the image's size (read from its header only when it has boxes to
    lay over it: UNKNOWN_SIZE otherwise); None when it cannot."""
    path = linkable(image.image)
    size = None if path is None else file_size(path) if image.boxes else UNKNOWN_SIZE
    return None if path is None or size is None else (relative_url(path, page), size)


def draw(folder: Path, key: str, ref: Any, side: int = THUMB_MAX) -> Size | None:
    """Make and write the thumbnail `key` of the image `ref` here, at most `side` px; the image's
    size, None when it cannot be read."""
    data = image_source(ref)
    return None if data is None else _draw_job(str(folder), key, data, str(ref.key), side)


def existing(folder: Path) -> dict[str, Size]:
    """The thumbnails a folder holds: key -> the image's size, from one listing of its file names."""
    found: dict[str, Size] = {}
    if folder.is_dir():
        for entry in os.scandir(folder):
            m = _NAME.match(entry.name)
            if m:
                found.setdefault(m.group(1), (int(m.group(2)), int(m.group(3))))
    return found


def _draw_job(folder: str, key: str, data: bytes | Path, image_key: str, side: int) -> Size | None:
    """Make and write one thumbnail (in a worker thread or process); the image's size, None when
    the image cannot be read (the page says so)."""
    from needlepoint.core.files import write_atomic

    try:
        jpeg, size = make_thumbnail(data, image_key, side)
        write_atomic(Path(folder) / file_name(key, size), jpeg)
    except Exception:  # an unreadable image must not cost the report
        return None
    return size


class DrawingProcesses(Executor):
    """Worker processes that draw thumbnails (`_draw_job`), each fed by a thread of this process.

    Plain child processes (`python -c "...serve()"`) that speak length-prefixed pickles over
    their stdin and stdout, not multiprocessing: spawning that way would import the caller's
    main script again in every worker. A worker gets no Ctrl-C (the run stops the pool) and ends when its stdin closes (also when the run is
    killed). A worker that cannot start or dies leaves its thread to draw in this process."""

    def __init__(self, workers: int) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._feed, name="thumbs-feed", daemon=True) for _ in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue `_draw_job(*args)` (the only job these workers run)."""
        if fn is not _draw_job or kwargs:
            raise ValueError("drawing processes run _draw_job only")
        future: Future[Any] = Future()
        self._jobs.put((future, args))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            while True:
                try:
                    item = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)
        if wait:
            for t in self._threads:
                t.join()

    def _feed(self) -> None:
        import pickle
        import subprocess
        import sys

        proc: subprocess.Popen[bytes] | None = None
        try:
            import needlepoint

            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(Path(needlepoint.__file__).parents[1]), env.get("PYTHONPATH")) if p
            )
            code = "from needlepoint.report.thumbs import serve_drawing; serve_drawing()"
            proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        except Exception:  # no worker: this thread draws itself
            proc = None
        try:
            while (item := self._jobs.get()) is not None:
                future, args = item
                if not future.set_running_or_notify_cancel():
                    continue
                result: Any = None
                if proc is not None:
                    try:
                        assert proc.stdin is not None and proc.stdout is not None
                        _send(proc.stdin, pickle.dumps(args, protocol=pickle.HIGHEST_PROTOCOL))
                        result = pickle.loads(_receive(proc.stdout))
                    except Exception:  # the worker died: draw here from now on
                        proc.kill()
                        proc = None
                if proc is None:
                    result = _draw_job(*args)
                future.set_result(result)
        finally:
            if proc is not None:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait()


def _send(stream: Any, payload: bytes) -> None:
    stream.write(len(payload).to_bytes(8, "big") + payload)
    stream.flush()


def _receive(stream: Any) -> bytes:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("the drawing process ended")
    size = int.from_bytes(head, "big")
    payload = stream.read(size)
    if len(payload) < size:
        raise EOFError("the drawing process ended")
    return bytes(payload)


def lower_priority() -> None:
    """Run this process at DRAWING_NICENESS: drafting must never slow the answering (the run's
    client and a server on the same machine come first; `report.drafts` where the idle class is
    missing). The drawing processes of `Thumbnails` run at the command's own priority: the
    command's end waits on them."""
    try:
        os.nice(DRAWING_NICENESS)
    except (AttributeError, OSError):  # no nice() on this platform
        pass


def serve_drawing() -> None:
    """A drawing process (`DrawingProcesses`): `_draw_job` for each job read from stdin, its
    result written to stdout, until stdin closes."""
    import pickle
    import signal
    import sys

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # at the run's priority: what they draw is what the run's end waits on
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            args = pickle.loads(_receive(source))
        except EOFError:
            return
        _send(sink, pickle.dumps(_draw_job(*args), protocol=pickle.HIGHEST_PROTOCOL))


def _size(future: Future[Size | None]) -> Size | None:
    if future.cancelled() or future.exception() is not None:
        return None
    return future.result()


def all_cores() -> int:
    """The processes that draw thumbnails: one a core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


class Thumbnails:
    """The thumbnails folder of one report: those that exist, and the drawing of missing ones on
    workers (threads, or processes for many images: drawing then never waits for the
    interpreter lock). `finish` returns every wanted image's size, drawing what is missing.
    `link_missing` (a run's end, which must not wait on decoding): `finish` shows an image that
    is a file of its own from that file (`linkable`, `links`) rather than draw it, and with
    `budget_s` stops drawing after that long (`undrawn`); a report written otherwise (a merge, a
    human run, the compare page) draws them all."""

    def __init__(
        self,
        folder: Path,
        workers: int | None = None,
        processes: bool = False,
        link_missing: bool = False,
        budget_s: float | None = None,
    ) -> None:
        self.folder = Path(folder)
        self._page = os.fspath(self.folder.parent)  # the page's folder, which links are relative to
        self.links: dict[str, str] = {}  # key -> the image file's URL relative to the page (link_missing)
        self.undrawn: set[str] = set()  # keys left for a later report: the drawing ran past `budget_s`
        self._budget_s = budget_s
        self._done: dict[str, Size] = {}
        self._listed: dict[str, Size] | None = None
        self._workers = workers or all_cores()
        self._processes = processes
        self._link_missing = link_missing
        self._pool: Executor | None = None

    def _executor(self) -> Executor:
        """The pool (started on first use)."""
        if self._pool is None:
            if self._processes:
                self._pool = DrawingProcesses(self._workers)
            else:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="thumbs")
        return self._pool

    def _links(self, key: str, image: ReportImage) -> bool:
        """Show `image` from its own file (`link_missing` and `link_to`); whether it is."""
        found = link_to(image, self._page) if self._link_missing else None
        if found is None:
            return False
        self.links[key], self._done[key] = found
        return True

    def _submit(self, key: str, image: ReportImage, side: int) -> Future[Size | None] | None:
        """Start making the thumbnail `key` of `image` (read here) on the workers; None when it is
        linked instead (`link_missing`) or cannot be read."""
        if self._links(key, image):
            return None
        ref = image.image
        data = image_source(ref)
        if data is None:
            return None
        return self._executor().submit(_draw_job, str(self.folder), key, data, str(ref.key), side)

    def listed(self) -> dict[str, Size]:
        """The thumbnails the folder held before this report drew any (an earlier page's, the
        drafts of `report.drafts`): key -> the image's size, from one listing."""
        if self._listed is None:
            self._listed = existing(self.folder)
            self._done.update(self._listed)
        return self._listed

    def finish(self, items: Sequence[ReportItem], keep: Collection[str] = ()) -> dict[str, Size | None]:
        """Every thumbnail the items show, made if missing: key -> the image's size (None:
        unreadable, or in `undrawn`; UNKNOWN_SIZE: linked, without boxes). The folder is listed
        first (`listed`); what is missing is read in item order (parquet is read forward), a
        bounded number of images at a time. With `budget_s` (a run's end), drawing stops once
        that much time has passed: what is left is `undrawn` (linking goes on: it costs a file's
        status). Thumbnails neither an item nor `keep` (the keys of rows made before, see
        `report.rows`) shows any more are removed."""
        wanted: dict[str, tuple[ReportImage, int]] = {}
        for it in items:
            side = side_of(it)
            for im in it.images:
                wanted.setdefault(thumb_key(im, side), (im, side))
        self.listed()
        missing = [k for k in wanted if k not in self._done]
        if len(missing) >= PROCESS_MIN_IMAGES and self._budget_s is None:  # a budget is too short for their start
            self._processes = True
        deadline = None if self._budget_s is None else time.monotonic() + self._budget_s
        window = 4 * self._workers
        jobs: dict[str, Future[Size | None]] = {}
        running: set[Future[Size | None]] = set()
        for key in missing:
            if len(running) >= window:
                running = wait(running, return_when=FIRST_COMPLETED).not_done
            if deadline is not None and time.monotonic() > deadline and not self._links(key, wanted[key][0]):
                self.undrawn.add(key)
                continue
            if (future := self._submit(key, *wanted[key])) is not None:
                jobs[key] = future
                running.add(future)
        wait(jobs.values())
        for key, future in jobs.items():
            if (size := _size(future)) is not None:
                self._done[key] = size
        self.close(cancel=True, wait=False)  # every job has ended; a worker process's exit is not waited for
        sizes: dict[str, Size | None] = {k: self._done.get(k) for k in wanted}
        shown = {file_name(k, s) for k, s in sizes.items() if s is not None and k not in self.links}
        shown.update(file_name(k, self._done[k]) for k in keep if k in self._done and k not in self.links)
        if self.folder.is_dir():
            for entry in os.scandir(self.folder):
                if (entry.name.endswith(".jpg") or ".jpg.tmp" in entry.name) and entry.name not in shown:  # .tmp: a killed write
                    os.unlink(entry.path)
        return sizes

    def close(self, cancel: bool = False, wait: bool = True) -> None:
        """Stop the workers, after the drawing under way (and what is queued, unless `cancel`);
        `wait=False` when nothing is under way: the workers then end on their own."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=cancel)
