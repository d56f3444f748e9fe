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
from pathlib import Path, PurePosixPath

from needlepoint.conversation import ImageRef
from needlepoint.errors import DataError

JPEG_QUALITY = 95


def safe_path(root: Path, relative: str, where: str = "") -> Path:
    """`root / relative`, refusing absolute paths and paths that leave `root`."""
    rel = PurePosixPath(str(relative).replace("\\", "/"))
    if rel.is_absolute() or ".." in rel.parts or not str(relative).strip():
        raise DataError(
            f"image path {relative!r}{' in ' + where if where else ''} must be relative to the images "
            f"folder {root} and stay inside it; fix the data file"
        )
    return root / rel


def _open(data: bytes, key: str):
    from PIL import Image

    try:
        im = Image.open(io.BytesIO(data))
        im.size  # noqa: B018 - forces the header to be read
        return im
    except Exception as exc:  # Pillow raises many types for bad files
        raise DataError(f"image {key} cannot be read ({exc.__class__.__name__}: {exc}); replace or remove it") from None


def encode_jpeg(ref: ImageRef, reencode: bool = False) -> bytes:
    """The JPEG bytes to send for an image (see the module docstring for the rule)."""
    try:
        data = ref.read_bytes()
    except OSError as exc:
        raise DataError(f"image {ref.key} cannot be read ({exc.strerror or exc}); check the images folder") from None
    im = _open(data, ref.key)
    too_big = ref.max_side is not None and max(im.size) > ref.max_side
    if im.format == "JPEG" and im.mode == "RGB" and not too_big and not reencode:
        return data
    try:
        im = im.convert("RGB")
        if too_big:
            im.thumbnail((ref.max_side, ref.max_side))
        out = io.BytesIO()
        im.save(out, format="JPEG", quality=JPEG_QUALITY)
    except Exception as exc:
        raise DataError(f"image {ref.key} cannot be decoded ({exc}); replace or remove it") from None
    return out.getvalue()


class DataUrlCache:
    """Base64 data URLs of recently sent images, bounded in bytes (images shared by samples)."""

    def __init__(self, max_bytes: int = 64 << 20, reencode: bool = False) -> None:
        self._items: OrderedDict[tuple[str, int | None], str] = OrderedDict()
        self._bytes = 0
        self._max = max_bytes
        self._lock = threading.Lock()
        self.reencode = reencode

    def clear(self) -> None:
        """Forget every cached image."""
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def get(self, ref: ImageRef) -> str:
        """The data URL for `ref`, encoding it on a miss."""
        key = (ref.key, ref.max_side)
        with self._lock:
            url = self._items.get(key)
            if url is not None:
                self._items.move_to_end(key)
                return url
        url = "data:image/jpeg;base64," + base64.b64encode(encode_jpeg(ref, self.reencode)).decode("ascii")
        if len(url) <= self._max // 8:
            with self._lock:
                self._items[key] = url
                self._bytes += len(url)
                while self._bytes > self._max:
                    _, old = self._items.popitem(last=False)
                    self._bytes -= len(old)
        return url


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
