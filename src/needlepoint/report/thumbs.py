"""Report thumbnails: small JPEGs of the samples' images, made once; the page draws the boxes.

Cheap by construction, because a report of thousands of samples must not outlast the run:

- a thumbnail shows the image alone (the page lays the boxes over it as SVG), so it depends on the
  image only: rescoring, another prediction or a rewritten report reuse it;
- an image is decoded at reduced size (`images.decode_rgb`: JPEG draft mode, big PNGs in bands);
- a thumbnail's file name is a hash of the image's key followed by the image's own pixel size (what
  the boxes refer to), so an existing one (a resumed run, a rewritten report, a draft) is reused
  after one directory listing;
- thumbnails are drawn on every core: in worker processes when there are many (a thread would
  wait for the interpreter lock), on threads for a few; while a run answers, forked processes
  draw them at a lower priority (`report.drafts`), and what they could not draw before the last
  answer is, for a small JPEG, its own bytes (`COPY_MAX_BYTES`, `copy_missing`): decoding a JPEG
  costs over a millisecond however small the thumbnail, and the run's end must not wait on it
  (docs/performance.md).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import queue
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from needlepoint.contract.base import ReportImage, ReportItem

THUMB_MAX = 320  # the cards show images at most 320 px wide
THUMB_QUALITY = 82
THUMB_VERSION = "3"
COPY_MAX_BYTES = 256 * 1024  # a JPEG up to this size (and COPY_MAX_SIDE) may stand as its own thumbnail
COPY_MAX_SIDE = 1024
DRAWING_NICENESS = 10  # how much lower the drawing processes run than the run (os.nice)
GT_COLOUR = "#1fbf4a"
PRED_COLOUR = "#e0218a"
GROUP_COLOURS = ("#22c55e", "#2f6fed", "#f59e0b", "#ef4444", "#a855f7", "#06b6d4", "#ec4899")
PROCESS_MIN_IMAGES = 64  # from this many images on, draw in processes (their start costs about 0.2 s)
_NAME = re.compile(r"^([0-9a-f]{20})-(\d+)x(\d+)\.jpg$")

Size = tuple[int, int]


def grouped(items: Sequence[ReportItem]) -> bool:
    """Whether boxes are coloured by group (some box is in a group other than 1) rather than by kind."""
    return any(b.group != 1 for it in items for im in it.images for b in im.boxes)


def thumb_key(image: ReportImage) -> str:
    """A hash of what a thumbnail shows: the image (by its key) and the drawing code."""
    key = json.dumps([THUMB_VERSION, THUMB_MAX, str(image.image.key)])
    return hashlib.sha1(key.encode()).hexdigest()[:20]


def file_name(key: str, size: Size) -> str:
    """The thumbnail's file name: its key and the image's own size, so that listing the folder gives both."""
    return f"{key}-{size[0]}x{size[1]}.jpg"


def box_colour(kind: str, group: int, is_grouped: bool) -> str:
    """The colour of a box: by group when the report is grouped, else ground truth or prediction."""
    if is_grouped:
        return GROUP_COLOURS[(max(int(group), 1) - 1) % len(GROUP_COLOURS)]
    return GT_COLOUR if kind == "gt" else PRED_COLOUR


def make_thumbnail(data: bytes | Path, key: str, copy: bool = False) -> tuple[bytes, Size]:
    """A JPEG of `data` (stored bytes, or a big file read as it is decoded) at most THUMB_MAX px a
    side, and the size of the image itself (the size its boxes refer to). With `copy`, a small RGB
    or grey JPEG (COPY_MAX_BYTES, COPY_MAX_SIDE) is its own thumbnail: no pixel is decoded. `key`
    names the image in error messages."""
    from PIL import Image

    from needlepoint.core.images import decode_rgb, jpeg_header

    if copy and isinstance(data, bytes) and (size := copyable(data)) is not None:
        return data, size
    head = jpeg_header(data) if not isinstance(data, Path) else None
    if head is not None:
        size = (head[0], head[1])
    else:
        with Image.open(data if isinstance(data, Path) else io.BytesIO(data)) as probe:
            size = probe.size
    im = decode_rgb(data, key, THUMB_MAX, gap=1.0)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=THUMB_QUALITY)
    return buf.getvalue(), size


def copyable(data: bytes) -> Size | None:
    """The size of an image that may stand as its own thumbnail (a small RGB or grey JPEG, read
    from its header alone), else None."""
    from needlepoint.core.images import jpeg_header

    if len(data) > COPY_MAX_BYTES:
        return None
    head = jpeg_header(data)
    return (head[0], head[1]) if head is not None and head[2] in (1, 3) and max(head[:2]) <= COPY_MAX_SIDE else None


def image_source(ref: Any) -> bytes | Path | None:
    """What a thumbnail of the image `ref` (an ImageRef) is made from: a small image's bytes, a big
    file's path (read as it is decoded); None when it cannot be read (the page says so)."""
    from needlepoint.core.images import read_small_image

    try:
        return read_small_image(ref) or ref.path
    except Exception:
        return None


def draw(folder: Path, key: str, ref: Any, copy: bool = False) -> Size | None:
    """Make and write the thumbnail `key` of the image `ref` here (`copy`: see `make_thumbnail`);
    the image's size, None when it cannot be read."""
    data = image_source(ref)
    return None if data is None else _draw_job(str(folder), key, data, str(ref.key), copy)


def existing(folder: Path) -> dict[str, Size]:
    """The thumbnails a folder holds: key -> the image's size, from one listing of its file names."""
    found: dict[str, Size] = {}
    if folder.is_dir():
        for entry in os.scandir(folder):
            m = _NAME.match(entry.name)
            if m:
                found.setdefault(m.group(1), (int(m.group(2)), int(m.group(3))))
    return found


def _draw_job(folder: str, key: str, data: bytes | Path, image_key: str, copy: bool) -> Size | None:
    """Make and write one thumbnail (in a worker thread or process); the image's size, None when
    the image cannot be read (the page says so)."""
    from needlepoint.core.files import write_atomic

    try:
        jpeg, size = make_thumbnail(data, image_key, copy)
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
    """Run this process at DRAWING_NICENESS: drawing must never slow the answering (the run's
    client and a server on the same machine come first)."""
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

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lower_priority()
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
    `copy_missing`: `finish` copies a small JPEG rather than draw it (a run's end, which must not
    wait on decoding); a report written on its own draws them all."""

    def __init__(self, folder: Path, workers: int | None = None, processes: bool = False, copy_missing: bool = False) -> None:
        self.folder = Path(folder)
        self._done: dict[str, Size] = {}
        self._workers = workers or all_cores()
        self._processes = processes
        self._copy_missing = copy_missing
        self._pool: Executor | None = None

    def _executor(self) -> Executor:
        """The pool (started on first use)."""
        if self._pool is None:
            if self._processes:
                self._pool = DrawingProcesses(self._workers)
            else:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="thumbs")
        return self._pool

    def _submit(self, key: str, ref: Any) -> Future[Size | None] | None:
        """Start making the thumbnail `key` of the image `ref` (read here) on the workers; None when
        it was made here (a small JPEG copied, with `copy_missing`) or cannot be read."""
        data = image_source(ref)
        if data is None:
            return None
        args = (str(self.folder), key, data, str(ref.key), self._copy_missing)
        if self._copy_missing and isinstance(data, bytes) and copyable(data) is not None:  # no decoding: written here
            if (size := _draw_job(*args)) is not None:
                self._done[key] = size
            return None
        return self._executor().submit(_draw_job, *args)

    def finish(self, items: Sequence[ReportItem]) -> dict[str, Size | None]:
        """Every thumbnail the items show, made if missing: key -> the image's size (None: unreadable).
        The folder is listed first (an earlier page's thumbnails, the drafts of `report.drafts`);
        what is missing is read in item order (parquet is read forward), a bounded number of
        images at a time. Thumbnails no item shows any more are removed."""
        wanted: dict[str, ReportImage] = {}
        for it in items:
            for im in it.images:
                wanted.setdefault(thumb_key(im), im)
        self._done.update(existing(self.folder))
        missing = [k for k in wanted if k not in self._done]
        if len(missing) >= PROCESS_MIN_IMAGES:
            self._processes = True
        window = 4 * self._workers
        jobs: dict[str, Future[Size | None]] = {}
        running: set[Future[Size | None]] = set()
        for key in missing:
            if len(running) >= window:
                running = wait(running, return_when=FIRST_COMPLETED).not_done
            if (future := self._submit(key, wanted[key].image)) is not None:
                jobs[key] = future
                running.add(future)
        wait(jobs.values())
        for key, future in jobs.items():
            if (size := _size(future)) is not None:
                self._done[key] = size
        self.close(cancel=True, wait=False)  # every job has ended; a worker process's exit is not waited for
        sizes: dict[str, Size | None] = {k: self._done.get(k) for k in wanted}
        keep = {file_name(k, s) for k, s in sizes.items() if s is not None}
        if self.folder.is_dir():
            for entry in os.scandir(self.folder):
                if (entry.name.endswith(".jpg") or ".jpg.tmp" in entry.name) and entry.name not in keep:  # .tmp: a killed write
                    os.unlink(entry.path)
        return sizes

    def close(self, cancel: bool = False, wait: bool = True) -> None:
        """Stop the workers, after the drawing under way (and what is queued, unless `cancel`);
        `wait=False` when nothing is under way: the workers then end on their own."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=cancel)
