"""Images: safe paths, encoding for requests (with a small cache), and side-by-side pair merging.

The one image encoder in needlepoint. An RGB JPEG that needs no resizing is sent as its own bytes
(a second JPEG generation would only add loss); anything else is converted to RGB and encoded as
JPEG at quality 95, as the benchmarks' authors send images.
"""

from __future__ import annotations

import base64
import io
import threading
from collections import OrderedDict
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from needlepoint.conversation import ImageRef
from needlepoint.errors import DataError

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

JPEG_QUALITY = 95


def stays_inside(relative: str) -> bool:
    """True for a relative path that cannot leave the folder it is joined to (POSIX or Windows
    spelling: no root, no drive, no `..`)."""
    text = str(relative)
    posix = PurePosixPath(text.replace("\\", "/"))
    return bool(text.strip()) and not posix.is_absolute() and not PureWindowsPath(text).drive and ".." not in posix.parts


def safe_path(root: Path, relative: str, where: str = "") -> Path:
    """`root / relative`, refusing absolute paths and paths that leave `root`."""
    if not stays_inside(relative):
        raise DataError(
            f"image path {relative!r}{' in ' + where if where else ''} must be relative to the images "
            f"folder {root} and stay inside it; fix the data file"
        )
    return root / PurePosixPath(str(relative).replace("\\", "/"))


def _open(data: bytes, key: str) -> PILImage:
    from PIL import Image

    try:
        im = Image.open(io.BytesIO(data))
        im.size  # noqa: B018 - forces the header to be read
        return im
    except Exception as exc:  # Pillow raises many types for bad files
        raise DataError(f"image {key} cannot be read ({exc.__class__.__name__}: {exc}); replace or remove it") from None


def read_image(ref: ImageRef) -> bytes:
    """The image's bytes as stored; DataError when they cannot be read."""
    try:
        return ref.read_bytes()
    except OSError as exc:
        raise DataError(f"image {ref.key} cannot be read ({exc.strerror or exc}); check the images folder") from None


def passes_through(data: bytes, ref: ImageRef, reencode: bool = False) -> bool:
    """True when the stored bytes can be sent as they are: an RGB JPEG within `ref.max_side`.
    Reads only the header, so it is cheap enough for the event loop."""
    im = _open(data, ref.key)
    too_big = ref.max_side is not None and max(im.size) > ref.max_side
    return im.format == "JPEG" and im.mode == "RGB" and not too_big and not reencode


def transcode_jpeg(data: bytes, ref: ImageRef) -> bytes:
    """Stored bytes converted to RGB, shrunk to `ref.max_side`, and encoded as JPEG at quality 95."""
    im = _open(data, ref.key)
    try:
        im = im.convert("RGB")
        if ref.max_side is not None and max(im.size) > ref.max_side:
            im.thumbnail((ref.max_side, ref.max_side))
        out = io.BytesIO()
        im.save(out, format="JPEG", quality=JPEG_QUALITY)
    except Exception as exc:
        raise DataError(f"image {ref.key} cannot be decoded ({exc}); replace or remove it") from None
    return out.getvalue()


def encode_jpeg(ref: ImageRef, reencode: bool = False) -> bytes:
    """The JPEG bytes to send for an image (see the module docstring for the rule)."""
    data = read_image(ref)
    return data if passes_through(data, ref, reencode) else transcode_jpeg(data, ref)


class ImageCache:
    """Base64 of images sent more than once (MM-NIAH option images, shared fillers), bounded in
    bytes. An image is kept only from its second use, so a data set that never repeats an image
    (Ref-Adv-s, MC-Bench) holds nothing here and memory stays flat."""

    def __init__(self, max_bytes: int = 32 << 20, seen_keys: int = 65536) -> None:
        self._items: OrderedDict[tuple[str, int | None], bytes] = OrderedDict()
        self._seen: OrderedDict[tuple[str, int | None], None] = OrderedDict()
        self._bytes = 0
        self._max = max_bytes
        self._max_seen = seen_keys
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every cached image."""
        with self._lock:
            self._items.clear()
            self._seen.clear()
            self._bytes = 0

    def get(self, ref: ImageRef) -> bytes | None:
        """The cached base64 of `ref`, or None."""
        key = (ref.key, ref.max_side)
        with self._lock:
            b64 = self._items.get(key)
            if b64 is not None:
                self._items.move_to_end(key)
            return b64

    def put(self, ref: ImageRef, b64: bytes) -> None:
        """Offer an image's base64; it is kept from the second offer of the same image on."""
        key = (ref.key, ref.max_side)
        with self._lock:
            if key not in self._seen:
                self._seen[key] = None
                if len(self._seen) > self._max_seen:
                    self._seen.popitem(last=False)
                return
            if key in self._items or len(b64) > self._max // 8:
                return
            self._items[key] = b64
            self._bytes += len(b64)
            while self._bytes > self._max:
                _, old = self._items.popitem(last=False)
                self._bytes -= len(old)


def base64_jpeg(ref: ImageRef, reencode: bool = False) -> bytes:
    """Base64 (ASCII bytes) of the JPEG to send for an image, with no cache."""
    return base64.b64encode(encode_jpeg(ref, reencode))


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
