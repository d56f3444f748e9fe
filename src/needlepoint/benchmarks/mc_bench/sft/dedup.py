"""Decontamination against the MC-Bench release: file content hash (SHA-256) and two perceptual
hashes, so that a re-encoded or resized copy of a benchmark image is caught too.

dHash: the image in grey, resized to 9x8, one bit per horizontal neighbour pair (left brighter
than right). pHash: grey 32x32, 2-D DCT-II, the 8x8 lowest frequencies against their median
(DC term left out of the median). An image is a near copy of a benchmark image when both hashes
are within DHASH_MAX / PHASH_MAX bits of that image's (requiring both keeps chance collisions
between unrelated images, rare for either hash alone, rarer still). Crops are not caught.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from needlepoint.core.errors import DataError

DHASH_MAX = 10
PHASH_MAX = 10
_N = 32
_DCT = np.sqrt(2.0 / _N) * np.cos(np.pi * (2 * np.arange(_N)[None, :] + 1) * np.arange(_N)[:, None] / (2 * _N))
_DCT[0] /= np.sqrt(2.0)


@dataclass(frozen=True)
class ImageHash:
    """Content and perceptual hashes of one image file."""

    sha256: str
    dhash: int
    phash: int


def _bits(flags: np.ndarray) -> int:
    return int.from_bytes(np.packbits(flags.reshape(-1).astype(np.uint8)).tobytes(), "big")


def perceptual(data: bytes) -> tuple[int, int]:
    """(dHash, pHash) of an encoded image, 64 bits each."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im.draft("L", (64, 64))  # JPEG: decode at reduced scale, much faster
        grey = im.convert("L")
    small = np.asarray(grey.resize((9, 8), Image.Resampling.LANCZOS), dtype=np.float64)
    dhash = _bits(small[:, :-1] > small[:, 1:])
    pix = np.asarray(grey.resize((_N, _N), Image.Resampling.LANCZOS), dtype=np.float64)
    low = (_DCT @ pix @ _DCT.T)[:8, :8].reshape(-1)
    phash = _bits(low > np.median(low[1:]))
    return dhash, phash


def hash_image(path: Path) -> ImageHash:
    """Content and perceptual hashes; DataError when the file cannot be read as an image."""
    try:
        data = path.read_bytes()
        d, p = perceptual(data)
    except OSError as exc:
        raise DataError(f"image {path} cannot be read ({exc.strerror or exc}); check the images folder") from None
    except Exception as exc:  # Pillow raises many types for bad files
        raise DataError(f"image {path} cannot be decoded ({exc.__class__.__name__}); replace or remove it") from None
    return ImageHash(hashlib.sha256(data).hexdigest(), d, p)


def hash_all(paths: Sequence[Path], workers: int | None = None) -> Iterable[ImageHash]:
    """Hashes of many files, in order (threads: hashing and decoding release the GIL)."""
    with ThreadPoolExecutor(max_workers=workers or min(8, (os.cpu_count() or 1) * 2)) as pool:
        yield from pool.map(hash_image, paths)


def hash_or_reason(path: Path) -> ImageHash | str:
    """`hash_image`, or why the file cannot be hashed (it does not decode, or it is an image too
    big to decode whole that is no JPEG), for a candidate image that is then skipped."""
    from needlepoint.core.images import WHOLE_DECODE_PIXELS, check_decodes

    try:
        from PIL import Image

        with Image.open(path) as im:
            big = im.size[0] * im.size[1] > WHOLE_DECODE_PIXELS and im.format != "JPEG"
        if big:
            check_decodes(path, str(path))  # decodes it reduced, or says why not
            return f"image {path} is too big to hash for decontamination; shrink it"
        return hash_image(path)
    except DataError as exc:
        return str(exc)
    except Exception as exc:  # Pillow raises many types for bad files
        return f"image {path} cannot be read ({exc.__class__.__name__}: {exc}); replace or remove it"


def hash_candidates(paths: Sequence[Path], workers: int | None = None) -> Iterable[ImageHash | str]:
    """`hash_or_reason` of many files, in order."""
    with ThreadPoolExecutor(max_workers=workers or min(8, (os.cpu_count() or 1) * 2)) as pool:
        yield from pool.map(hash_or_reason, paths)


def hamming(values: np.ndarray, h: int) -> np.ndarray:
    """Bit distance between `h` and each 64-bit value."""
    distance: np.ndarray = np.bitwise_count(values ^ np.uint64(h))
    return distance


class Reference:
    """The hashes of the benchmark's images, for membership tests."""

    def __init__(self, hashes: Sequence[ImageHash]) -> None:
        self.size = len(hashes)
        self.sha = {h.sha256 for h in hashes}
        self.dhash = np.array([h.dhash for h in hashes], np.uint64)
        self.phash = np.array([h.phash for h in hashes], np.uint64)

    def match(self, h: ImageHash) -> str | None:
        """ "content" for an identical file, "perceptual" for a near copy, else None."""
        if h.sha256 in self.sha:
            return "content"
        if self.size and bool(((hamming(self.dhash, h.dhash) <= DHASH_MAX) & (hamming(self.phash, h.phash) <= PHASH_MAX)).any()):
            return "perceptual"
        return None


def mc_bench_reference(folder: Path) -> tuple[Reference, Path]:
    """The hashes of every image of an MC-Bench release folder (annotation file + images folder),
    and the annotation file read."""
    from needlepoint.benchmarks.mc_bench.benchmark import IMAGES_DIR, annotation_path
    from needlepoint.benchmarks.mc_bench.groundtruth import load_groundtruth
    from needlepoint.core.images import safe_path

    if not folder.is_dir():
        raise DataError(
            f"--exclude {folder} is not a folder; give the MC-Bench release folder (annotation file and {IMAGES_DIR}/)"
        )
    ann = annotation_path(folder)
    gt = load_groundtruth(ann)
    root = folder / IMAGES_DIR
    paths = [safe_path(root, im.file_name, str(ann)) for im in gt.images]
    missing = next((p for p in paths if not p.is_file()), None)
    if missing is not None:
        raise DataError(
            f"--exclude: {missing} is missing; decontamination needs every MC-Bench image (download the images into {root})"
        )
    return Reference(list(hash_all(paths))), ann
