"""Token counts as MM-NIAH defines them: text in `cl100k_base` tokens, an image as 256 tokens per
tile of InternVL-1.5's dynamic tiling.

The `cl100k_base` ranks ship with needlepoint (data/cl100k_base.tiktoken.gz, MIT, see
data/LICENSE-tiktoken.txt), checked against tiktoken's own hash and loaded into `tiktoken.Encoding`,
so counting never touches the network.

Text tokens of a context are counted the way a model receives it: the context is cut at each
`<image>` placeholder and every text segment is encoded on its own (`text_tokens`).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from functools import lru_cache
from importlib import resources
from typing import Any

from needlepoint.core import marks
from needlepoint.core.errors import DataError

PLACEHOLDER = "<image>"
ENCODING = "cl100k_base"
RANKS_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# tiktoken's cl100k_base pre-tokenisation pattern and special tokens (tiktoken_ext.openai_public).
PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}

TILE = 448
TOKENS_PER_TILE = 256
MAX_TILES = 12
TILING_RULE = (
    "InternVL-1.5 dynamic tiling: 448-px tiles in the grid (i, j), 1 <= i*j <= max_tiles, whose aspect ratio is "
    "closest to the image's (ties go to the larger grid when the image area exceeds half of the grid's pixel area), "
    "plus one thumbnail tile when the grid has more than one tile; 256 tokens per tile"
)


@lru_cache(maxsize=1)
def encoding() -> Any:
    """The `cl100k_base` tiktoken encoding, from the ranks file shipped with needlepoint."""
    try:
        import tiktoken
    except ImportError:
        raise DataError("building MM-NIAH needs tiktoken; install the build extra with `pip install -e '.[build]'`") from None
    raw = gzip.decompress(resources.files(__package__).joinpath("data/cl100k_base.tiktoken.gz").read_bytes())
    if hashlib.sha256(raw).hexdigest() != RANKS_SHA256:
        raise DataError("the bundled cl100k_base ranks file is damaged; reinstall needlepoint")
    ranks = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(name=ENCODING, pat_str=PATTERN, mergeable_ranks=ranks, special_tokens=SPECIAL)


def count(text: str) -> int:
    """cl100k_base tokens of `text` (special-token spellings are counted as plain text)."""
    return len(encoding().encode_ordinary(text)) if text else 0


def count_many(texts: list[str]) -> list[int]:
    """`count` of each text, encoded in one batch."""
    if not texts:
        return []
    return [len(t) for t in encoding().encode_ordinary_batch(texts, num_threads=1)]


def text_tokens(context: str) -> int:
    """Text tokens of a context: each segment between `<image>` placeholders encoded on its own."""
    return sum(count(segment) for segment in marks.split(context, PLACEHOLDER))


def tile_grid(width: int, height: int, max_tiles: int = MAX_TILES) -> tuple[int, int]:
    """InternVL-1.5's grid (columns, rows) for an image: the closest aspect ratio among grids of
    1..max_tiles tiles, the larger grid winning a tie when the image has the pixels to fill it."""
    if width <= 0 or height <= 0:
        raise DataError(f"an image of {width}x{height} pixels cannot be tiled; check the corpus image")
    grids = sorted(
        {(i, j) for n in range(1, max_tiles + 1) for i in range(1, n + 1) for j in range(1, n + 1) if 1 <= i * j <= max_tiles},
        key=lambda g: g[0] * g[1],
    )
    aspect = width / height
    best, best_diff = (1, 1), float("inf")
    for cols, rows in grids:
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and width * height > 0.5 * TILE * TILE * cols * rows:
            best = (cols, rows)
    return best


def image_tiles(width: int, height: int, max_tiles: int = MAX_TILES) -> int:
    """Tiles an image becomes: the grid, plus a thumbnail when the grid has more than one tile."""
    cols, rows = tile_grid(width, height, max_tiles)
    return cols * rows + (1 if cols * rows > 1 else 0)


def image_tokens(width: int, height: int, max_tiles: int = MAX_TILES) -> int:
    """Tokens an image counts for: 256 per tile."""
    return TOKENS_PER_TILE * image_tiles(width, height, max_tiles)
