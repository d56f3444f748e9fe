"""Decoding a large PNG a band of rows at a time, shrinking each band as it comes.

Pillow decodes a PNG whole: a 144-megapixel image is 576 MB of pixels before it can be shrunk.
A non-interlaced PNG is one zlib stream of filtered rows, and a row's filters refer only to the
row above it, so the rows can be taken in bands: each band is inflated here, handed to Pillow's
own PNG row decoder (the `zip` codec) behind the previous band's last row, then reduced by an
integer factor and pasted into a small canvas. Only one band of full-size pixels exists at once.
Interlaced PNGs and 16-bit colour PNGs are not handled (the caller decodes them whole).
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator
from typing import IO, Any

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
# The mode that holds a row's bytes unchanged, by bytes per pixel as the PNG filters count them.
_CARRIERS = {1: ("L", 1), 2: ("I;16", 2), 3: ("RGB", 3), 4: ("RGBA", 4)}


class PngHeader:
    """What the IHDR chunk says, and how a row is laid out."""

    def __init__(self, width: int, height: int, bit_depth: int, colour_type: int, interlace: int) -> None:
        self.width, self.height = width, height
        self.bit_depth, self.colour_type, self.interlace = bit_depth, colour_type, interlace
        bits = _CHANNELS.get(colour_type, 0) * bit_depth
        self.row_bytes = (width * bits + 7) // 8
        self.filter_bpp = max(1, bits // 8)

    @property
    def banded(self) -> bool:
        """Whether this file can be decoded band by band here."""
        return self.interlace == 0 and self.colour_type in _CHANNELS and self.filter_bpp in _CARRIERS


def read_header(fh: IO[bytes]) -> PngHeader | None:
    """The IHDR of a PNG file object (positioned at its start), or None if it is not a PNG."""
    head = fh.read(33)
    if len(head) < 33 or head[:8] != SIGNATURE or head[12:16] != b"IHDR":
        return None
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", head[16:29])
    return PngHeader(width, height, depth, colour, interlace)


def _idat(fh: IO[bytes]) -> Iterator[bytes]:
    """The payloads of the IDAT chunks, in order (the file object is after the IHDR chunk)."""
    while True:
        head = fh.read(8)
        if len(head) < 8:
            return
        length, kind = struct.unpack(">I4s", head)
        if kind == b"IDAT":
            yield fh.read(length)
            fh.seek(4, io.SEEK_CUR)
        elif kind == b"IEND":
            return
        else:
            fh.seek(length + 4, io.SEEK_CUR)


def _filtered_rows(fh: IO[bytes], header: PngHeader, rows_per_band: int) -> Iterator[bytes]:
    """The inflated (still filtered) rows, `rows_per_band` at a time (fewer at the end)."""
    stride = header.row_bytes + 1
    want = stride * rows_per_band
    inflate = zlib.decompressobj()
    buf = bytearray()
    left = header.height * stride
    for chunk in _idat(fh):
        data = chunk
        while data and left > 0:
            buf += inflate.decompress(data, max(want - len(buf), 1))
            data = inflate.unconsumed_tail
            while len(buf) >= min(want, left):
                take = min(want, left)
                yield bytes(buf[:take])
                del buf[:take]
                left -= take
                if left <= 0:
                    return
    if left > 0:
        buf += inflate.flush()
        if len(buf) < left:
            raise ValueError("the PNG's image data ends early")
        while left > 0:
            take = min(want, left)
            yield bytes(buf[:take])
            del buf[:take]
            left -= take


def decode_reduced(source: Any, header: PngHeader, factor: int, band_pixels: int = 2_000_000) -> Any:
    """The PNG in `source` (an opened Pillow image of it, whose file object is read again) as an
    RGB image reduced by the integer `factor` (Pillow's `Image.reduce` box average, band by band).
    """
    from PIL import Image

    fh = source.fp
    fh.seek(33)
    carrier_mode, carrier_bpp = _CARRIERS[header.filter_bpp]
    carrier_width = header.row_bytes // carrier_bpp
    rawmode = source.tile[0][3] if isinstance(source.tile[0][3], str) else source.tile[0][3][0]
    rows = max(factor, (band_pixels // max(header.width, 1)) // factor * factor)
    out = Image.new("RGB", (-(-header.width // factor), -(-header.height // factor)))
    previous = bytes(header.row_bytes)  # the row above the first: zeros, as the PNG filters assume
    y = 0
    for filtered in _filtered_rows(fh, header, rows):
        n = len(filtered) // (header.row_bytes + 1)
        # The previous band's last row, unfiltered (filter type 0), then this band's rows as stored.
        stream = zlib.compress(b"\x00" + previous + filtered, 0)
        carrier = Image.frombytes(carrier_mode, (carrier_width, n + 1), stream, "zip", carrier_mode)
        raw = carrier.tobytes("raw", carrier_mode)
        del carrier, stream
        previous = raw[-header.row_bytes :]
        band = Image.frombytes(source.mode, (header.width, n), raw[header.row_bytes :], "raw", rawmode)
        del raw
        if source.mode == "P" and source.palette is not None:
            band.putpalette(source.palette.tobytes(), source.palette.mode)
        if "transparency" in source.info:
            band.info["transparency"] = source.info["transparency"]
        band = band.convert("RGB")
        out.paste(band.reduce(factor) if factor > 1 else band, (0, y // factor))
        y += n
    if y != header.height:
        raise ValueError(f"the PNG holds {y} rows, not {header.height}")
    return out
