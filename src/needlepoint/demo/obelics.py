"""A synthetic interleaved corpus in OBELICS's released format, for the tests and benchmarks of
`needlepoint build mm_niah`.

Documents are paragraphs of generated sentences (digits, quotes, apostrophes, commas, and now and
then the strings `</s>` and `<image>` that a builder must clean) and photos-like images of varied
sizes. Images are referenced as OBELICS does, by URL, and resolved through an img2dataset-style
folder (`00000/000000123.jpg` beside `000000123.json` holding the `url`); a few documents instead
use local paths or embedded bytes, and a few name a URL that was never downloaded.
"""

from __future__ import annotations

import base64
import io
import json
import random
from pathlib import Path
from typing import Any

from needlepoint.core.files import AtomicFile, write_atomic, write_parquet

SUBJECTS = (
    "The council",
    "A local farmer",
    "Our reporter",
    "The museum",
    "Several students",
    "The old bridge",
    "A small bakery",
    "The river authority",
    "Her grandmother",
    "The 1984 team",
    "Dr. Okafor's lab",
    "The night train",
)
VERBS = ("announced", "repaired", "described", "visited", "photographed", "measured", "rebuilt", "celebrated", "questioned")
OBJECTS = (
    "the harbour wall",
    "a new roof",
    "17 paintings",
    "the spring market",
    "its 250th anniversary",
    'the "blue" gate',
    "three stone arches",
    "the winter festival",
    "a 12-page report",
    "the village's well",
)
ENDINGS = (".", ".", ".", "!", "?", "...", '."')
# InternVL-1.5 tiles: 13, 1, 7, 4, 5, 5, 3, 1
SIZES = ((640, 480), (448, 448), (1024, 683), (300, 900), (1600, 400), (800, 800), (896, 448), (400, 380))


def sentence(rng: random.Random) -> str:
    extra = rng.choice(
        ("", "", f" on {rng.randint(1, 28)} May", ", as expected", " after it rained", f" for {rng.randint(2, 90)} minutes")
    )
    text = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{extra}{rng.choice(ENDINGS)}"
    if rng.random() < 0.01:
        text += rng.choice((" </s>", " <image>"))
    return text


def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(sentence(rng) for _ in range(sentences))


def image_bytes(rng: random.Random, size: tuple[int, int], fmt: str = "JPEG") -> bytes:
    """A photo-like image: a sky gradient, ground, and a few coloured blocks."""
    from PIL import Image, ImageDraw

    w, h = size
    im = Image.new("RGB", size, (rng.randint(90, 150), rng.randint(140, 200), rng.randint(200, 255)))
    d = ImageDraw.Draw(im)
    d.rectangle(
        (0, int(h * rng.uniform(0.5, 0.75)), w, h), fill=(rng.randint(40, 120), rng.randint(100, 160), rng.randint(30, 80))
    )
    for _ in range(rng.randint(2, 6)):
        x, y = rng.randint(0, w - 10), rng.randint(0, h - 10)
        d.rectangle(
            (x, y, x + rng.randint(10, max(11, w // 3)), y + rng.randint(10, max(11, h // 3))),
            fill=(rng.randint(0, 255), rng.randint(0, 255), rng.randint(0, 255)),
        )
    buf = io.BytesIO()
    im.save(buf, format=fmt, **({"quality": 85} if fmt == "JPEG" else {}))
    return buf.getvalue()


def write_corpus(
    root: Path,
    documents: int = 60,
    seed: int = 3,
    paragraphs: tuple[int, int] = (2, 8),
    image_pool: int = 12,
    missing_every: int = 9,
) -> dict[str, Any]:
    """Write `root/shards/` (a parquet and a JSONL shard), `root/img2dataset/` (images, sidecars)
    with `local/` (images named by a relative path); return what was written."""
    import pyarrow as pa

    rng = random.Random(seed)
    shards, downloads = root / "shards", root / "img2dataset"
    local = downloads / "local"
    for folder in (shards, downloads / "00000", local):
        folder.mkdir(parents=True, exist_ok=True)
    urls = []
    for i in range(image_pool):
        url = f"https://images.example.org/photo/{i}.jpg"
        key = f"{i:09d}"
        write_atomic(downloads / "00000" / f"{key}.jpg", image_bytes(rng, SIZES[i % len(SIZES)]))
        write_atomic(downloads / "00000" / f"{key}.json", json.dumps({"url": url, "key": key, "status": "success"}))
        urls.append(url)
    for i in range(3):
        write_atomic(local / f"pic{i}.png", image_bytes(rng, SIZES[(i + 2) % len(SIZES)], "PNG"))
    rows: list[dict[str, Any]] = []
    missing = 0
    for n in range(documents):
        texts: list[Any] = []
        images: list[Any] = []
        for p in range(rng.randint(*paragraphs)):
            if p and rng.random() < 0.35:
                texts.append(None)
                kind = rng.random()
                if kind < 0.8:
                    images.append(rng.choice(urls))
                elif kind < 0.9:
                    images.append(f"local/pic{rng.randrange(3)}.png")
                else:
                    images.append({"bytes": base64.b64encode(image_bytes(rng, (320, 240))).decode("ascii")})
            texts.append("\n".join(paragraph(rng, rng.randint(2, 7)) for _ in range(rng.randint(1, 2))))
            images.append(None)
        if missing_every and n % missing_every == missing_every - 1:
            texts.append(None)
            images.append(f"https://images.example.org/never-downloaded/{n}.jpg")
            missing += 1
        rows.append({"texts": texts, "images": images, "metadata": json.dumps({"document_url": f"https://news.example.org/{n}"})})
    half = len(rows) // 2
    # The parquet shard keeps OBELICS's string entries; embedded bytes travel in the JSONL shard.
    parquet_rows = [{**r, "images": [urls[0] if isinstance(x, dict) else x for x in r["images"]]} for r in rows[:half]]
    write_parquet(shards / "obelics-00000.parquet", pa.Table.from_pylist(parquet_rows), row_group_size=8)
    with AtomicFile(shards / "obelics-00001.jsonl") as fh:
        for r in rows[half:]:
            fh.write(json.dumps(r) + "\n")
    return {"shards": shards, "images": downloads, "local": local, "documents": documents, "missing": missing}
