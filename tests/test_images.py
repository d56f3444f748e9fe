"""Image decoding: the JPEG header read without Pillow, decoding at reduced size (JPEG draft, big
PNGs in bands) with the size the boxes are mapped back from, and parquet images read in slices."""

from __future__ import annotations

import io
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.core import images, pngstrips
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.geometry import fitted_size, to_absolute
from needlepoint.core.parquet import ParquetImage, ParquetTable


def _noise(width: int, height: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ramp = (np.arange(width)[None, :, None] * 255 // max(width - 1, 1)).astype(np.uint8)
    return (rng.integers(0, 60, (height, width, 3), dtype=np.uint8) + ramp // 2).astype(np.uint8)


def _encode(im: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("mode", "kw"),
    [("RGB", {}), ("RGB", {"progressive": True}), ("L", {}), ("CMYK", {}), ("RGB", {"subsampling": 0})],
)
def test_jpeg_header_agrees_with_pillow(mode: str, kw: dict[str, Any]) -> None:
    data = _encode(Image.fromarray(_noise(97, 61)).convert(mode), "JPEG", **kw)
    header = images.jpeg_header(data)
    assert header is not None
    width, height, components = header
    im = Image.open(io.BytesIO(data))
    assert (width, height) == im.size
    assert {"L": 1, "RGB": 3, "CMYK": 4}[im.mode] == components
    for side in (None, 97, 96, 50):
        ref = ImageRef("x", max_side=side)
        pillow_says = im.mode == "RGB" and (side is None or max(im.size) <= side)
        assert images.passes_through(data, ref) is pillow_says
        assert images.passes_through(data, ref, reencode=True) is False


def test_non_jpeg_and_broken_headers_go_to_pillow() -> None:
    png = _encode(Image.new("RGB", (8, 8)), "PNG")
    assert images.jpeg_header(png) is None
    assert images.passes_through(png, ImageRef("p")) is False
    assert images.jpeg_header(b"\xff\xd8\xff") is None
    with pytest.raises(DataError, match="cannot be read"):
        images.passes_through(b"\xff\xd8\xffgarbage", ImageRef("g"))


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA", "P", "1", "I;16"])
def test_png_bands_decode_exactly_as_pillow_whole(mode: str) -> None:
    """Band by band (bands far smaller than the image), the reduced image equals Pillow's
    decode of the whole file followed by `reduce`, pixel for pixel."""
    base = Image.fromarray(_noise(301, 257, seed=1))
    im = base.quantize(16) if mode == "P" else base.convert("L").convert("I;16") if mode == "I;16" else base.convert(mode)
    data = _encode(im, "PNG")
    source = Image.open(io.BytesIO(data))
    header = pngstrips.read_header(io.BytesIO(data))
    assert header is not None and header.banded
    for factor in (1, 3, 4):
        got = pngstrips.decode_reduced(source, header, factor, band_pixels=301 * 7)
        want = Image.open(io.BytesIO(data)).convert("RGB")
        want = want.reduce(factor) if factor > 1 else want
        assert got.size == want.size
        assert np.array_equal(np.asarray(got), np.asarray(want))


def test_interlaced_png_is_not_banded() -> None:
    import zlib

    data = bytearray(_encode(Image.new("RGB", (40, 30)), "PNG"))
    data[28] = 1  # IHDR's interlace method: Adam7 (Pillow writes none; the header is all we read)
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    header = pngstrips.read_header(io.BytesIO(bytes(data)))
    assert header is not None and header.interlace == 1 and not header.banded
    assert pngstrips.read_header(io.BytesIO(b"GIF89a" + bytes(40))) is None


def test_big_png_is_decoded_in_bands_to_the_size_boxes_map_back_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PNG over the band budget is decoded band by band; the image sent has fitted_size's size,
    its content matches a whole decode, and a pixel box on it maps back onto the original."""
    width, height, side = 1500, 1100, 200
    arr = np.full((height, width, 3), 255, np.uint8)
    arr[220:440, 300:600] = (255, 0, 0)  # a red block at x 300-600, y 220-440
    data = _encode(Image.fromarray(arr), "PNG")
    monkeypatch.setattr(images, "BAND_PIXELS", 100_000)  # the file is 16 bands' worth
    calls: list[int] = []
    real = pngstrips.decode_reduced

    def decode_reduced(*a: Any, **k: Any) -> Any:
        calls.append(a[2])
        return real(*a, **k)

    monkeypatch.setattr(pngstrips, "decode_reduced", decode_reduced)
    holds: list[int] = []
    real_hold = images.DECODE_BUDGET.hold

    def hold(n: int) -> AbstractContextManager[None]:
        holds.append(n)
        return real_hold(n)

    monkeypatch.setattr(images.DECODE_BUDGET, "hold", hold)

    sent = Image.open(io.BytesIO(images.transcode_jpeg(data, ImageRef("big", max_side=side))))
    assert calls and calls[0] >= 2  # reduced by an integer factor while decoding
    assert holds and max(holds) < width * height // 4  # never the whole image at once
    assert sent.format == "JPEG" and sent.size == fitted_size(width, height, side)
    px = np.asarray(sent.convert("RGB")).astype(int)
    ys, xs = np.nonzero((px[..., 0] > 200) & (px[..., 1] < 80))
    box_on_sent = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
    back = to_absolute(box_on_sent, "abs_xyxy", width, height, seen=sent.size)
    assert back == pytest.approx((300, 220, 600, 440), abs=width / sent.size[0] * 1.5)


def test_jpeg_is_decoded_at_reduced_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _encode(Image.fromarray(_noise(1600, 1200)), "JPEG", quality=90)
    decoded: list[int] = []  # the pixels each decode held
    real_hold = images.DECODE_BUDGET.hold

    def hold(n: int) -> AbstractContextManager[None]:
        decoded.append(n)
        return real_hold(n)

    monkeypatch.setattr(images.DECODE_BUDGET, "hold", hold)
    im = images.decode_rgb(data, "j", 200)
    assert im.size == fitted_size(1600, 1200, 200) and im.mode == "RGB"
    assert decoded == [400 * 300]  # draft mode: 1/4 scale, still twice the target
    assert images.decode_rgb(data, "j", 200, gap=1.0).size == (200, 150)
    assert decoded[-1] == 200 * 150  # 1/8 scale: the target itself


def test_pixel_budget_holds_big_images_one_at_a_time() -> None:
    import threading
    import time

    budget = images.PixelBudget(100)
    inside: list[int] = []
    seen: list[tuple[int, int]] = []  # (pixels entering, pixels held with it)
    lock = threading.Lock()

    def work(n: int) -> None:
        with budget.hold(n):
            with lock:
                inside.append(n)
                seen.append((n, sum(inside)))
            time.sleep(0.02)
            with lock:
                inside.remove(n)

    threads = [threading.Thread(target=work, args=(n,)) for n in (60, 60, 30, 150, 10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 5
    for n, held in seen:
        assert held == n if n > 100 else held <= 100  # over the budget only alone


# --- parquet slices ------------------------------------------------------------------------------


def _release(tmp_path: Path, rows: int, group: int) -> tuple[Path, list[bytes]]:
    blobs = [bytes([i % 251]) * (50 + i) + i.to_bytes(4, "big") for i in range(rows)]
    table = pa.Table.from_pylist(
        [
            {
                "image": {"bytes": b, "path": f"{i}.jpg"},
                "normal_caption": f"c{i}",
                "solution": [0.0, 0.0, 1.0, 1.0],
                "width": 10,
                "height": 10,
            }
            for i, b in enumerate(blobs)
        ]
    )
    path = tmp_path / "data" / "train-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path, row_group_size=group)
    return path, blobs


def test_parquet_slices_return_the_stored_bytes_in_any_order(tmp_path: Path) -> None:
    path, blobs = _release(tmp_path, 300, 113)  # groups of 113: slices cross no group boundary
    table = ParquetTable(path, slice_rows=16, cached_slices=3)
    order = list(range(300)) + list(range(299, -1, -7)) + [5, 250, 6, 120, 113, 112]
    for row in order:
        assert table.image_bytes(row) == blobs[row]
    # `cached` never reads: a row far from what was read is not there; a row just read is.
    table.image_bytes(40)
    assert table.cached(40) == blobs[40]
    assert table.cached(290) is None
    loader = ParquetImage(table, 41)
    assert loader.cached() == blobs[41] and loader() == blobs[41]


def test_parquet_release_loads_through_slices(tmp_path: Path) -> None:
    path, blobs = _release(tmp_path, 70, 1000)
    samples = RefAdv(box_format="abs_xyxy").load(path.parent.parent)
    assert [s.image.read_bytes() for s in samples] == blobs
    assert isinstance(samples[0].image.loader, ParquetImage)


def test_only_regular_image_files_are_read_whole(tmp_path: Path) -> None:
    """An image path that is a FIFO, a link to /dev/zero or a folder is refused in one sentence by
    every reader (it would block the open, read without end or fail later: the request's `sent`
    description reads too, in a thread a run would wait for at exit); a file is read in one open,
    and a file over the inline limit is left on disk for its decoder."""
    import os

    from needlepoint.core.errors import DataError

    fifo = tmp_path / "fifo.jpg"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.jpg"
    zero.symlink_to("/dev/zero")
    folder = tmp_path / "folder.jpg"
    folder.mkdir()
    for path in (fifo, zero):
        for read in (images.read_small_image, images.read_image):  # every reader of image files
            with pytest.raises(DataError, match=f"image {path.name} is not a regular file"):
                read(ImageRef(path.name, path))
    with pytest.raises(DataError, match=r"image folder.jpg cannot be read \(Is a directory\)"):
        images.read_small_image(ImageRef("folder.jpg", folder))
    with pytest.raises(DataError, match="image gone.jpg cannot be read"):
        images.read_small_image(ImageRef("gone.jpg", tmp_path / "gone.jpg"))
    small = tmp_path / "small.jpg"
    small.write_bytes(b"\xff\xd8" + bytes(range(256)) * 40)
    assert images.read_small_image(ImageRef("small.jpg", small)) == small.read_bytes()
    big = tmp_path / "big.jpg"
    with big.open("wb") as fh:
        fh.truncate(images.INLINE_FILE_BYTES + 1)
    assert images.read_small_image(ImageRef("big.jpg", big)) is None
    assert len(images.read_image(ImageRef("big.jpg", big))) == images.INLINE_FILE_BYTES + 1
