"""Image files the hostile-input tests need: PNGs written byte by byte; an image held in memory;
a pixel's colour."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from PIL import Image

from needlepoint.core.conversation import ImageRef

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(width: int, height: int, idat: bytes) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims width x height pixels and holds a few bytes of data (a bomb's header)."""
    return _png(width, height, zlib.compress(b"\0" * 64))


def big_png(path: Path, side: int) -> None:
    """A real side x side RGB PNG (stripes), written row by row without holding the image."""
    row = b"\0" + bytes((x // 50 % 2) * 200 for x in range(side * 3))
    comp = zlib.compressobj(9)
    body = b"".join(comp.compress(row) for _ in range(side)) + comp.flush()
    path.write_bytes(_png(side, side, body))


def in_memory(key: str, data: bytes) -> ImageRef:
    """An image whose loader returns `data` (as a parquet row's does)."""
    return ImageRef(key, loader=lambda: data)


def rgb_at(im: Image.Image, xy: tuple[int, int]) -> tuple[int, ...]:
    """The colour of the pixel at `xy` of a colour image (Pillow's tuple of its bands)."""
    pixel = im.getpixel(xy)
    assert isinstance(pixel, tuple), (im.mode, pixel)
    return pixel
