"""Images: safe paths, encoding for requests (with a small cache), and side-by-side pair merging.

The one image encoder in needlepoint. An RGB JPEG that needs no resizing is sent as its own bytes
(a second JPEG generation would only add loss); anything else is converted to RGB and encoded as
JPEG at quality 95, as the benchmarks' authors send images.

What a record says of an image (`stored_facts`, `file_facts`) is taken from what the request
already read of it, and handed to the record through `NOTED`, so that a sample reads each image
once (issue 45: the record's description read and hashed every file a second time).

Decoding is bounded: images are decoded at reduced size where the format allows (`decode_rgb`),
the pixels decoded at once across threads are capped (`DECODE_BUDGET`), and a big file stays on
disk until its decoder reads it, so huge images cost a bounded amount of memory per process.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import io
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_from_bytes

import pybase64

from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

JPEG_QUALITY = 95
# More images than this make a document (MM-NIAH's): one that a record must describe itself (answered
# from the call cache) is described in one worker thread (solvers/sent.py); a request's, read on the
# loop unless storage proved slow (models/openai_compat.py, SLOW_READ_S). Fewer: one at a time.
ON_LOOP_IMAGES = 2


def stays_inside(relative: str) -> bool:
    """True for a relative path that cannot leave the folder it is joined to (POSIX or Windows
    spelling: no root, no drive, no `..`). On the text, not through pathlib: every image of a
    data file is checked at load (8,000 for 200 MM-NIAH documents), and pathlib's parsing was
    most of the load's time. A second character `:` counts as a drive whatever the first (as
    Python 3.12's pathlib reads `1:x`; 3.11's, only after a letter)."""
    text = str(relative)
    posix = text.replace("\\", "/")
    return bool(text.strip()) and not posix.startswith("/") and text[1:2] != ":" and ".." not in posix.split("/")


def _allowed(root: Path) -> tuple[str, ...]:
    """The real folders a data folder's files may resolve into: the folder itself (through any link
    to it), and, for a folder inside a Hugging Face hub cache snapshot (`.../snapshots/REV/...`),
    its repository's `blobs/`, where every file of a snapshot is a link to (the cache's own layout)."""
    real = [os.path.realpath(root)]
    parts = Path(os.path.abspath(root)).parts
    if "snapshots" in parts:
        repo = Path(*parts[: len(parts) - parts[::-1].index("snapshots") - 1])
        if (repo / "blobs").is_dir():
            real.append(os.path.realpath(repo / "blobs"))
    return tuple(real)


def _within(real: str, allowed: tuple[str, ...]) -> bool:
    return any(real == a or real.startswith(a.rstrip(os.sep) + os.sep) for a in allowed)


def lies_inside(root: Path, path: Path) -> bool:
    """True for a `path` (absolute, or relative to `root`) inside `root` once both are resolved:
    `..` collapsed and symbolic links followed, so that a root given through a link still matches
    while a link inside the folder that points outside it (`data/x.jpg -> /etc/passwd`) does not
    (a Hugging Face cache snapshot's links into its `blobs/` excepted: `_allowed`). The one rule of
    every reader of data-file paths: the benchmarks' loaders (`safe_path`), the human page."""
    try:
        return _within(os.path.realpath(Path(root).joinpath(path)), _allowed(Path(root)))
    except (OSError, RuntimeError, ValueError):
        return False


class _Links:
    """`lies_inside` for the many files of one images folder at the cost of one `lstat` a file:
    each folder a file sits in is resolved once, and a file itself only when it is a link."""

    def __init__(self) -> None:
        self._folders: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()

    def inside(self, root: Path, path: str) -> tuple[bool, bool]:
        """Whether the file `path` (`root` joined with a relative path, as text) lies inside
        `root`, and whether it is a regular file (followed through a link), from one `lstat`."""
        try:
            mode = os.lstat(path).st_mode
        except (OSError, ValueError):
            mode = 0  # not there (yet): its folder decides
        if stat.S_ISLNK(mode):
            return lies_inside(root, Path(path)), os.path.isfile(path)
        key = (os.fspath(root), os.path.dirname(path))
        with self._lock:
            known = self._folders.get(key)
        if known is None:
            known = lies_inside(root, Path(key[1]))
            with self._lock:
                if len(self._folders) > 65_536:
                    self._folders.clear()
                self._folders[key] = known
        return known, stat.S_ISREG(mode)


_LINKS = _Links()


def safe_path(root: Path, relative: str, where: str = "", absolute: bool = False) -> Path:
    """`root / relative`, refusing paths that leave `root`, lexically (`..`, a root, a drive) or
    through a symbolic link (`lies_inside`). An absolute path is refused too, unless `absolute`
    allows one that lies inside `root` (what a local download script writes) and holds no `..`:
    the system reads `link/..` as the link's target's parent, which a lexical `normpath` (the path
    returned) cannot know."""
    return safe_file(root, relative, where, absolute)[0]


def safe_file(root: Path, relative: str, where: str = "", absolute: bool = False) -> tuple[Path, bool]:
    """`safe_path`, and whether a regular file lies there: what a loader checks of each image,
    from the one `lstat` of the link check (a load checked 8,000 images twice for 200 MM-NIAH
    documents)."""
    text = str(relative)
    place = f" in {where}" if where else ""
    if absolute and text.strip() and Path(text).is_absolute():
        if ".." not in PurePosixPath(text).parts and lies_inside(root, Path(text)):
            return Path(os.path.normpath(text)), os.path.isfile(text)
        raise DataError(
            f"image path {relative!r}{place} lies outside the images folder {root}; "
            "give paths inside it (relative to it, or absolute) and fix the data file"
        )
    if not stays_inside(text):
        raise DataError(
            f"image path {relative!r}{place} must be relative to the images folder {root} and stay inside it; fix the data file"
        )
    joined = os.path.join(root, text.replace("\\", "/"))  # `root / text` as text: a Path made once, at the end
    inside, regular = _LINKS.inside(root, joined)
    if not inside:
        raise DataError(
            f"image path {relative!r}{place} is a link that leads out of the images folder {root} "
            f"(to {os.path.realpath(joined)}); copy the file into the folder, or give the folder that holds it as the "
            "images folder"
        )
    return Path(joined), regular


def _open(data: bytes | Path, key: str) -> PILImage:
    """Pillow's lazy open (header only) of stored bytes, or of a file read as it is decoded."""
    from PIL import Image

    try:
        im = Image.open(data if isinstance(data, Path) else io.BytesIO(data))
        im.size  # noqa: B018 - forces the header to be read
        return im
    except Exception as exc:  # Pillow raises many types for bad files
        raise DataError(f"image {key} cannot be read ({exc.__class__.__name__}: {exc}); replace or remove it") from None


def read_image(ref: ImageRef) -> bytes:
    """The image's bytes as stored; DataError when they cannot be read."""
    return read_image_status(ref)[0]


def read_image_status(ref: ImageRef) -> tuple[bytes, os.stat_result | None]:
    """`read_image`, and the status of the file read (None for bytes loaded otherwise)."""
    data, st = _read_stat(ref, None)
    assert data is not None  # no limit: never left on disk
    return data, st


INLINE_FILE_BYTES = 4 << 20  # image files up to this size are read whole at once (on the event loop)


def read_small_image(ref: ImageRef) -> bytes | None:
    """The bytes of an image file of at most INLINE_FILE_BYTES, else None: a bigger file is left
    on disk, to be read by its decoder under the pixel budget (`encode_jpeg`), so that many big
    files in flight never sit in memory together."""
    return _read_stored(ref, INLINE_FILE_BYTES)


def read_small_image_status(ref: ImageRef) -> tuple[bytes | None, os.stat_result | None]:
    """`read_small_image`, and the status of the file read (None for bytes loaded otherwise):
    what the record names the file by (`stored_facts`)."""
    return _read_stat(ref, INLINE_FILE_BYTES)


def _read_stored(ref: ImageRef, limit: int | None, head: int | None = None) -> bytes | None:
    """An image's stored bytes (None for a file over `limit`; only its first `head` bytes when
    given): `_read_stat` without the file's status."""
    return _read_stat(ref, limit, head)[0]


def _read_stat(ref: ImageRef, limit: int | None, head: int | None = None) -> tuple[bytes | None, os.stat_result | None]:
    """`_read_stored`, and the status of the file read (None for bytes loaded otherwise: a parquet
    row). A file is read in one open, its size and type taken from the open file; one that is not
    a regular file (a FIFO, a link to /dev/zero) is refused before it can block the open or be
    read without end."""
    if ref.loader is not None or ref.path is None:
        try:
            return ref.read_bytes(), None
        except OSError as exc:
            raise DataError(f"image {ref.key} cannot be read ({exc.strerror or exc}); check the images folder") from None
    try:
        fd = os.open(ref.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):  # as a file object says it
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            if not stat.S_ISREG(st.st_mode):
                raise DataError(f"image {ref.key} is not a regular file; replace it with the image file")
            if head is not None:  # a header: one read on the descriptor (a file object costs more than the read)
                return os.read(fd, head), st
            if limit is not None and st.st_size > limit:
                return None, st
            with open(fd, "rb", buffering=0, closefd=False) as fh:
                return fh.readall(), st
        finally:
            os.close(fd)
    except OSError as exc:
        raise DataError(f"image {ref.key} cannot be read ({exc.strerror or exc}); check the images folder") from None


_BARE_MARKERS = frozenset((0x01, *range(0xD0, 0xD8)))  # JPEG markers without a length


def jpeg_header(data: bytes) -> tuple[int, int, int] | None:
    """(width, height, components) from a baseline or progressive JPEG's frame header, read
    without Pillow; None when `data` is not a JPEG this parser understands (Pillow then decides).
    Pillow opens 3 components as RGB, 1 as L and 4 as CMYK."""
    if data[:2] != b"\xff\xd8":
        return None
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _BARE_MARKERS:
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if pos + 10 > end:
                return None
            height = int.from_bytes(data[pos + 5 : pos + 7], "big")
            width = int.from_bytes(data[pos + 7 : pos + 9], "big")
            return (width, height, data[pos + 9]) if width and height else None
        if marker == 0xDA or length < 2:  # scan data before any frame header: not understood
            return None
        pos += 2 + length
    return None


def _sent_as_is(head: tuple[int, int, int], ref: ImageRef) -> bool:
    """Whether a JPEG of this frame header (width, height, components) goes out as it is stored."""
    width, height, components = head
    return components == 3 and (ref.max_side is None or max(width, height) <= ref.max_side)


def passes_through(data: bytes, ref: ImageRef, reencode: bool = False, head: tuple[int, int, int] | None = None) -> bool:
    """True when the stored bytes can be sent as they are: an RGB JPEG within `ref.max_side`.
    Reads only the frame header (without Pillow for a JPEG), so it is cheap enough for the
    event loop; `head`: `jpeg_header(data)` when the caller has it already."""
    if reencode:
        return False
    head = head if head is not None else jpeg_header(data)
    if head is not None:
        return _sent_as_is(head, ref)
    im = _open(data, ref.key)
    too_big = ref.max_side is not None and max(im.size) > ref.max_side
    return im.format == "JPEG" and im.mode == "RGB" and not too_big


class PixelBudget:
    """A bound on the pixels being decoded at once across threads, so that a few huge images
    decoded in parallel cannot exhaust memory. An image over the whole budget waits until it can
    be decoded alone."""

    def __init__(self, pixels: int) -> None:
        self.pixels = pixels
        self._used = 0
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, pixels: int) -> Iterator[None]:
        """Wait until `pixels` more fit in the budget (or nothing else is held), then hold them."""
        with self._cond:
            self._cond.wait_for(lambda: self._used == 0 or self._used + pixels <= self.pixels)
            self._used += pixels
        try:
            yield
        finally:
            with self._cond:
                self._used -= pixels
                self._cond.notify_all()


DECODE_BUDGET = PixelBudget(12_000_000)
BAND_PIXELS = 1_000_000  # full-size pixels decoded at once from a big PNG (pngstrips)


def decode_rgb(data: bytes | Path, key: str, max_side: int | None = None, gap: float = 2.0) -> Any:
    """The image as an RGB Pillow image, shrunk (aspect kept) to `fitted_size(.., max_side)`.

    Decodes at reduced size where the format allows: a JPEG at 1/2, 1/4 or 1/8 scale (draft
    mode), a big non-interlaced PNG band by band (`pngstrips`); anything else whole. As in
    Pillow's `thumbnail`, the reduced decode stays at least `gap` times the target before the
    final resampling (1.0: decode straight to the target where possible, for report thumbnails).
    The pixels decoded at once count against `DECODE_BUDGET`. `data` may be a file's path: it is
    then read as it is decoded, never whole."""
    from PIL import Image

    from needlepoint.core.geometry import fitted_size
    from needlepoint.core.pngstrips import read_header

    im = _open(data, key)
    width, height = im.size
    target = fitted_size(width, height, max_side)
    try:
        if target != (width, height) and im.format == "PNG":
            with data.open("rb") if isinstance(data, Path) else io.BytesIO(data) as fh:
                header = read_header(fh)
            factor = int(min(width / target[0], height / target[1]) / gap)
            if header is not None and header.banded and factor >= 2 and width * height > 2 * BAND_PIXELS:
                from needlepoint.core.pngstrips import decode_reduced

                rows = max(factor, BAND_PIXELS // width // factor * factor)
                with DECODE_BUDGET.hold(rows * width + (width // factor) * (height // factor)):
                    try:
                        small = decode_reduced(im, header, factor, BAND_PIXELS)
                    finally:
                        im.close()
                    return small.resize(target, Image.Resampling.BICUBIC) if small.size != target else small
        if target != (width, height) and im.format == "JPEG":
            im.draft("RGB", (round(target[0] * gap), round(target[1] * gap)))
        with DECODE_BUDGET.hold(im.size[0] * im.size[1]):
            if im.mode == "RGB":
                im.load()  # decoded in place: no copy (convert would make one)
            else:
                im = im.convert("RGB")
            if im.size != target:
                im = im.resize(target, Image.Resampling.BICUBIC, reducing_gap=gap if gap > 1 else None)
            return im
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"image {key} cannot be decoded ({exc}); replace or remove it") from None


WHOLE_DECODE_PIXELS = 16_000_000  # an image that cannot be decoded reduced is decoded whole only up to this size


def _decodes_reduced(data: bytes | Path, fmt: str | None) -> bool:
    """Whether `decode_rgb` decodes this image at reduced size (a JPEG; a PNG it can band)."""
    from needlepoint.core.pngstrips import read_header

    if fmt == "JPEG":
        return True
    if fmt != "PNG":
        return False
    with data.open("rb") if isinstance(data, Path) else io.BytesIO(data) as fh:
        header = read_header(fh)
    return header is not None and header.banded


def check_decodes(data: bytes | Path, key: str, whole_limit: int = WHOLE_DECODE_PIXELS) -> tuple[int, int]:
    """The image's (width, height), once all of it has been decoded (at reduced size) to prove it
    readable: a truncated file, a file that is no image or a decompression bomb is a DataError
    naming `key`. Memory stays bounded: a JPEG is decoded at 1/8 scale, a big non-interlaced PNG
    band by band, and an image of another kind over `whole_limit` pixels is refused, not decoded."""
    im = _open(data, key)
    (width, height), fmt = im.size, im.format
    big = width * height > 2 * BAND_PIXELS
    if big and fmt != "JPEG":
        im.close()
        if width * height > whole_limit and not _decodes_reduced(data, fmt):
            raise DataError(
                f"image {key} is {width}x{height} pixels of {fmt}, too large to decode whole; convert it to JPEG or PNG, or shrink it"
            )
        decode_rgb(data, key, max_side=64, gap=1.0)  # a big PNG: band by band
        return width, height
    try:
        if fmt == "JPEG":
            im.draft(im.mode, (max(1, width // 8), max(1, height // 8)))
        with DECODE_BUDGET.hold(im.size[0] * im.size[1]):
            im.load()
    except Exception as exc:  # Pillow raises many types for bad files
        raise DataError(f"image {key} cannot be decoded ({exc}); replace or remove it") from None
    finally:
        im.close()
    return width, height


def transcode_jpeg(data: bytes | Path, ref: ImageRef, gap: float = 2.0) -> bytes:
    """Stored bytes (or a file) converted to RGB, shrunk to `ref.max_side`, and encoded as JPEG at
    quality 95 (`gap` as in `decode_rgb`: 1.0 decodes a big image at the smallest scale)."""
    im = decode_rgb(data, ref.key, ref.max_side, gap)
    out = io.BytesIO()
    try:
        im.save(out, format="JPEG", quality=JPEG_QUALITY)
    except Exception as exc:
        raise DataError(f"image {ref.key} cannot be encoded ({exc}); replace or remove it") from None
    return out.getvalue()


def encode_jpeg(ref: ImageRef, reencode: bool = False, data: bytes | None = None) -> bytes:
    """The JPEG bytes to send for an image (see the module docstring for the rule); `data`: its
    stored bytes when already read. A big file (see `read_small_image`) is read whole only if it
    is sent as it is; otherwise its decoder reads it."""
    if data is None:
        data = read_small_image(ref)
    if data is None:
        assert ref.path is not None
        with _open(ref.path, ref.key) as im:
            head = (im.format, im.mode, im.size)
        too_big = ref.max_side is not None and max(head[2]) > ref.max_side
        if head[0] == "JPEG" and head[1] == "RGB" and not too_big and not reencode:
            return read_image(ref)
        return transcode_jpeg(ref.path, ref)
    return data if passes_through(data, ref, reencode) else transcode_jpeg(data, ref)


ENTRY_BYTES = 200  # what keeping an entry costs besides its value (key, order, object headers)


class ImageCache:
    """What a request carries of an image sent more than once: its base64, or its file URL
    (--local-images; see `file_url`) (MM-NIAH option images, shared fillers), bounded in
    bytes. An image's base64 is kept only from its second use, so a data set that never repeats an
    image (Ref-Adv-s, MC-Bench) holds nothing here and memory stays flat; a file URL from its
    first (each entry counted with ENTRY_BYTES of keeping, so many URLs stay bounded too).
    `from_first`: base64 kept from its first use too, for a client that sends each image
    several times in a row (the agentic solver's localizer: one request per phrase, the phrases
    of a sample at once), so it is read and encoded once, not once per request; still bounded by
    `max_bytes`, oldest out first."""

    def __init__(self, max_bytes: int = 32 << 20, seen_keys: int = 65536, from_first: bool = False) -> None:
        self._items: OrderedDict[tuple[str, int | None], bytes] = OrderedDict()
        self._seen: OrderedDict[tuple[str, int | None], None] = OrderedDict()
        self._bytes = 0
        self._max = max_bytes
        self._max_seen = seen_keys
        self._lock = threading.Lock()
        self._from_first = from_first

    def clear(self) -> None:
        """Forget every cached image."""
        with self._lock:
            self._items.clear()
            self._seen.clear()
            self._bytes = 0

    def get(self, ref: ImageRef) -> bytes | None:
        """The cached base64 (or file URL) of `ref`, or None."""
        key = (ref.key, ref.max_side)
        with self._lock:
            b64 = self._items.get(key)
            if b64 is not None:
                self._items.move_to_end(key)
            return b64

    def put(self, ref: ImageRef, b64: bytes, first: bool = False) -> None:
        """Offer an image's base64 (or file URL); it is kept from the second offer of the same image
        on, or from this one with `first` (a file URL: a hundred bytes, not worth reading twice)."""
        key = (ref.key, ref.max_side)
        with self._lock:
            if key not in self._seen and not (self._from_first or first):
                self._seen[key] = None
                if len(self._seen) > self._max_seen:
                    self._seen.popitem(last=False)
                return
            if key in self._items or len(b64) > self._max // 8:
                return
            self._items[key] = b64
            self._bytes += len(b64) + ENTRY_BYTES
            while self._bytes > self._max:
                _, old = self._items.popitem(last=False)
                self._bytes -= len(old) + ENTRY_BYTES


def to_base64(data: bytes) -> bytes:
    """Base64 (ASCII bytes) of an image's bytes, by pybase64's SIMD encoder: byte for byte the
    standard library's, at a small fraction of its time (an 85 KB JPEG: about 4 us against 100),
    which was the largest single cost of a request."""
    return pybase64.b64encode(data)


def base64_jpeg(ref: ImageRef, reencode: bool = False, data: bytes | None = None) -> bytes:
    """Base64 (ASCII bytes) of the JPEG to send for an image, with no cache (see encode_jpeg)."""
    return to_base64(encode_jpeg(ref, reencode, data))


HEADER_BYTES = 64 << 10  # a JPEG's frame header lies within this much of its start (past EXIF and ICC data)
FIRST_HEADER_BYTES = 4 << 10  # read first: most JPEGs' frame header lies within it (without EXIF or ICC data)


def file_url(ref: ImageRef, reencode: bool = False) -> bytes | None:
    """The `file://` URL (ASCII bytes) of an image file that would be sent as it is stored (an RGB
    JPEG within `ref.max_side`, as `passes_through` decides from its frame header), for a server
    on this machine to read instead of its base64 (--local-images); None for anything else (a
    parquet row, an image to transcode, a frame header past HEADER_BYTES), which goes as base64.
    A server decodes the same bytes either way. FIRST_HEADER_BYTES read, and at most HEADER_BYTES
    when the frame header lies past them (the rest of a file of a few dozen KB is not copied)."""
    return file_url_facts(ref, reencode)[0]


def file_url_facts(ref: ImageRef, reencode: bool = False) -> tuple[bytes | None, dict[str, Any] | None]:
    """`file_url`, and what the record says of the file sent by it (`file_facts`, from the same
    read of its header); (None, None) where it goes as base64."""
    if reencode or ref.loader is not None or ref.path is None:
        return None, None
    first, st = _read_stat(ref, None, FIRST_HEADER_BYTES)
    head = jpeg_header(first or b"")
    if head is None and first is not None and len(first) == FIRST_HEADER_BYTES and first[:2] == b"\xff\xd8":
        head = jpeg_header(_read_stored(ref, None, HEADER_BYTES) or b"")  # a JPEG with a long preamble
    if head is None or st is None or not _sent_as_is(head, ref):
        return None, None
    return _file_uri(os.path.abspath(ref.path)), file_facts(ref, head, st)


def _file_uri(absolute: str) -> bytes:
    """`Path(absolute).as_uri()` as ASCII bytes; on POSIX without pathlib (a third of the time a
    document's file URLs took: 40 an MM-NIAH document)."""
    if os.name != "posix":
        return Path(absolute).as_uri().encode("ascii")
    return b"file://" + quote_from_bytes(os.fsencode(absolute)).encode("ascii")


# --- what a record says of an image -------------------------------------------------------------


def facts_key(ref: ImageRef, reencode: bool) -> tuple[Any, ...]:
    """What one description stands for: the image, its file, the size asked for, the re-encoding
    rule (the file as a string: a Path hashes in Python, a document's keys are looked up several
    times a sample)."""
    return (ref.key, None if ref.path is None else os.fspath(ref.path), ref.max_side, reencode)


def stored_facts(
    ref: ImageRef, data: bytes, sent: bytes, head: tuple[int, int, int] | None = None, st: os.stat_result | None = None
) -> dict[str, Any]:
    """An image as a record names it, from bytes already in hand (never read again): the width,
    height and length of the JPEG `sent` (`head`: its frame header when the caller has it), and
    what identifies the stored image. Read from a file (`st`: the status of the descriptor it was
    read from), the file's size and modification time (`file_facts`); loaded otherwise (a parquet
    row, a merged canvas), the sha256 of its bytes `data`. A digest of every file cost a fifth of
    an MM-NIAH run's rate as typed (40 images of 73 KB a document: 1.7 ms a sample; issue 45)."""
    head = head if head is not None else jpeg_header(sent)
    if head is None:
        width, height = decode_rgb(sent, ref.key).size
        head = (width, height, 3)
    if st is not None:
        return file_facts(ref, head, st, len(sent))
    return {
        "type": "image",
        "path": ref.key,
        "sha256": hashlib.sha256(data).hexdigest(),
        "width": int(head[0]),
        "height": int(head[1]),
        "bytes": len(sent),
    }


def file_facts(ref: ImageRef, head: tuple[int, int, int], st: os.stat_result, sent: int | None = None) -> dict[str, Any]:
    """An image file as a record names it: {type, path, width, height, bytes, file_bytes, mtime_ns}:
    the width and height of what was sent (`head`, its frame header), the bytes sent (`sent`; the
    file's when it went as it is stored, by its file URL under --local-images or as its base64),
    and the file's size and modification time from the open file's status, which identify the
    file without the client reading (and hashing) all of it."""
    return {
        "type": "image",
        "path": ref.key,
        "width": int(head[0]),
        "height": int(head[1]),
        "bytes": int(st.st_size if sent is None else sent),
        "file_bytes": int(st.st_size),
        "mtime_ns": int(st.st_mtime_ns),
    }


class NotedImages:
    """Descriptions of the images the requests of a run have read (`note`), for the records to take
    instead of reading each file again (solvers.sent); a document's images still being read in a
    worker thread are `expect`ed, so a record waits for that read rather than making its own. An
    image described once is not described again in the run (`knows`: its digest is not taken a
    second time when the image is sent again). Bounded (oldest out first); thread-safe."""

    def __init__(self, max_items: int = 100_000) -> None:
        self._items: OrderedDict[tuple[Any, ...], dict[str, Any] | asyncio.Future[Any]] = OrderedDict()
        self._max = max_items
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every description (a run starts: its files are read afresh)."""
        with self._lock:
            self._items.clear()

    def _keep(self, key: tuple[Any, ...], value: dict[str, Any] | asyncio.Future[Any]) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._max:
            self._items.popitem(last=False)

    def knows(self, key: tuple[Any, ...]) -> bool:
        """Whether the image `key` (facts_key) is described already in this run."""
        with self._lock:
            return isinstance(self._items.get(key), dict)

    def note(self, key: tuple[Any, ...], facts: dict[str, Any]) -> None:
        """Keep the description of the image `key` a request has just read."""
        with self._lock:
            self._keep(key, facts)

    def expect(self, keys: list[tuple[Any, ...]], reading: asyncio.Future[Any]) -> None:
        """The images `keys` are being read by `reading` (a future of the event loop that will look
        them up): a lookup waits for it where no description is kept yet."""
        with self._lock:
            for key in keys:
                if not isinstance(self._items.get(key), dict):
                    self._keep(key, reading)

    def lookup(self, keys: list[tuple[Any, ...]]) -> list[dict[str, Any] | asyncio.Future[Any] | None]:
        """Per key its description, the future of its read still under way, or None (nothing
        kept, or a read that ended without describing it); under one lock, on the event loop."""
        out: list[dict[str, Any] | asyncio.Future[Any] | None] = []
        with self._lock:
            for key in keys:
                got = self._items.get(key)
                if isinstance(got, asyncio.Future) and got.done():
                    del self._items[key]
                    got = None
                elif got is not None:
                    self._items.move_to_end(key)
                out.append(got)
        return out


NOTED = NotedImages()


def merge_pair(left: bytes, right: bytes, band: int = 20) -> tuple[bytes, int]:
    """Two images side by side on one white canvas, top-aligned, with a white band between.

    Returns the canvas as JPEG bytes and the x offset of the right image.
    """
    from PIL import Image

    a = _open(left, "left image").convert("RGB")
    b = _open(right, "right image").convert("RGB")
    canvas = Image.new("RGB", (a.width + band + b.width, max(a.height, b.height)), "white")
    canvas.paste(a, (0, 0))
    offset = a.width + band
    canvas.paste(b, (offset, 0))
    out = io.BytesIO()
    canvas.save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue(), offset
