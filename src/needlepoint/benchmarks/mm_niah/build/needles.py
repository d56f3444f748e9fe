"""Needles: text statements from bundled templates with random values, and cartoon icons.

Text needles follow the paper's kinds: retrieval (one statement with a made-up word, asked openly),
counting ("the little penguin counted N needles" at several depths; the answer lists the Ns in
order), reasoning (three statements whose combination answers the question). Values are drawn from
the sample's own random generator, and retrieval words are invented syllable strings, so an answer
cannot be found in the haystack by accident. Cartoons are simple outlined icons drawn here from a
seed, or taken from `--needle-images`.
"""

from __future__ import annotations

import io
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlepoint.core.errors import DataError

# --- text needles -------------------------------------------------------------------------------

_RETRIEVAL_FRAMES = (
    ("The secret password of {thing} is {value}.", "What is the secret password of {thing}?"),
    ("The code name chosen for {thing} is {value}.", "What is the code name chosen for {thing}?"),
    ("The word engraved on {thing} is {value}.", "What word is engraved on {thing}?"),
    ("The nickname the locals gave {thing} is {value}.", "What nickname did the locals give {thing}?"),
    ("The magic word that opens {thing} is {value}.", "What is the magic word that opens {thing}?"),
    ("The name painted on {thing} is {value}.", "What name is painted on {thing}?"),
    ("The label written under {thing} reads {value}.", "What does the label written under {thing} read?"),
    ("The old sailors always called {thing} {value}.", "What did the old sailors always call {thing}?"),
)
_RETRIEVAL_THINGS = ("the blue lighthouse", "the hidden garden", "the copper kettle", "the northern bridge", "the silent clock")
RETRIEVAL = tuple((s.replace("{thing}", t), q.replace("{thing}", t)) for s, q in _RETRIEVAL_FRAMES for t in _RETRIEVAL_THINGS)

COUNTING = (
    ("little penguin", "needles"),
    ("old tortoise", "pebbles"),
    ("young fox", "acorns"),
    ("grey heron", "fish"),
    ("tiny mouse", "seeds"),
    ("brown bear", "honeycombs"),
    ("clever crow", "coins"),
    ("sleepy owl", "stars"),
    ("busy beaver", "logs"),
    ("curious otter", "shells"),
    ("patient snail", "leaves"),
    ("small rabbit", "carrots"),
)

_NAMES = ("Mira", "Tobin", "Asha", "Lukas", "Noor", "Pavel", "Ines", "Kofi", "Greta", "Ravi", "Sana", "Elio")
_OBJECTS = ("lanterns", "marbles", "kites", "violins", "teacups", "maps", "candles", "compasses", "drums", "scarves")
_PLACES = ("attic", "cellar", "greenhouse", "stable", "library", "boathouse", "workshop", "chapel", "kitchen", "tower")
_CONTAINERS = ("red chest", "oak drawer", "tin box", "linen bag", "glass jar", "straw basket")

REASONING_FAMILIES = ("sum", "difference", "product", "location", "ages", "years")
REASONING = tuple((family, obj) for family in REASONING_FAMILIES for obj in _OBJECTS)  # 60 distinct templates


def invented_word(rng: random.Random) -> str:
    """A pronounceable made-up word of three or four syllables (never an English word)."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    return "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.choice((3, 4)))) + rng.choice("nrlks")


@dataclass
class TextNeedles:
    """Statements (in document order), the question, the answer."""

    statements: list[str]
    question: str
    answer: Any


def retrieval_needle(rng: random.Random) -> TextNeedles:
    statement, question = rng.choice(RETRIEVAL)
    value = invented_word(rng)
    return TextNeedles([statement.replace("{value}", value)], question, value)


def counting_needles(rng: random.Random, k: int) -> TextNeedles:
    creature, thing = rng.choice(COUNTING)
    counts = [rng.randint(1, 9) for _ in range(k)]
    statements = [f"The {creature} counted {n} {thing}." for n in counts]
    question = (
        f"Throughout the document there are statements about how many {thing} the {creature} counted. "
        f"List the counts in the order they appear, as a JSON list of integers."
    )
    return TextNeedles(statements, question, counts)


def reasoning_needles(rng: random.Random) -> TextNeedles:
    family, obj = rng.choice(REASONING)
    a, b, c = rng.sample(_NAMES, 3)
    x, y = rng.randint(2, 9), rng.randint(2, 9)
    if family == "sum":
        s = [f"{a} owns {x} {obj}.", f"{b} owns {y} more {obj} than {a}.", f"{c} owns no {obj} at all."]
        return TextNeedles(s, f"How many {obj} does {b} own?", str(x + y))
    if family == "difference":
        s = [f"{a} owns {x + y} {obj}.", f"{b} owns {y} fewer {obj} than {a}.", f"{c} owns as many {obj} as {b}."]
        return TextNeedles(s, f"How many {obj} does {c} own?", str(x))
    if family == "product":
        s = [
            f"{a} packed the {obj} into {x} crates.",
            f"Each of {a}'s crates holds {y} {obj}.",
            f"{b} checked every crate of {obj}.",
        ]
        return TextNeedles(s, f"How many {obj} did {a} pack in all?", str(x * y))
    if family == "location":
        p = rng.choice(_PLACES)
        box = rng.choice(_CONTAINERS)
        s = [f"{a} hid the {obj} in the {box}.", f"The {box} was carried to the {p}.", f"{b} never opened the {box}."]
        return TextNeedles(s, f"In which room are the {obj} that {a} hid?", p)
    if family == "ages":
        s = [
            f"{a} collected {obj} for {x} years.",
            f"{b} collected {obj} {y} years longer than {a}.",
            f"{c} started collecting {obj} after {b}.",
        ]
        return TextNeedles(s, f"For how many years did {b} collect {obj}?", str(x + y))
    start = rng.randint(1900, 1990)
    s = [
        f"{a} bought the first {obj} in {start}.",
        f"{b} bought more {obj} {x} years after {a}.",
        f"{c} sold the {obj} {y} years after {b} bought them.",
    ]
    return TextNeedles(s, f"In which year did {c} sell the {obj}?", str(start + x + y))


# --- cartoons -------------------------------------------------------------------------------------

CARTOON_KINDS = ("star", "heart", "smiley", "fish", "sun", "house", "tree", "balloon")
_PALETTE = (
    (230, 57, 70),
    (255, 183, 3),
    (42, 157, 143),
    (69, 123, 157),
    (155, 93, 229),
    (241, 91, 181),
    (0, 187, 249),
    (128, 185, 24),
)


def _star(cx: float, cy: float, r: float, points: int = 5) -> list[tuple[float, float]]:
    pts = []
    for i in range(points * 2):
        rad = r if i % 2 == 0 else r * 0.45
        ang = -math.pi / 2 + i * math.pi / points
        pts.append((cx + rad * math.cos(ang), cy + rad * math.sin(ang)))
    return pts


def draw_cartoon(kind: str, colour: tuple[int, int, int], size: int = 256) -> Any:
    """A cartoon-like icon (thick outline, flat colour, transparent background) as an RGBA image."""
    from PIL import Image, ImageDraw

    im = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    d = ImageDraw.Draw(im)
    s, ink, w = size, (20, 20, 20, 255), max(3, size // 28)
    fill = (*colour, 255)
    if kind == "star":
        d.polygon(_star(s / 2, s / 2, s * 0.46), fill=fill, outline=ink, width=w)
    elif kind == "heart":
        d.ellipse((s * 0.08, s * 0.15, s * 0.52, s * 0.6), fill=fill, outline=ink, width=w)
        d.ellipse((s * 0.48, s * 0.15, s * 0.92, s * 0.6), fill=fill, outline=ink, width=w)
        d.polygon([(s * 0.1, s * 0.45), (s * 0.9, s * 0.45), (s * 0.5, s * 0.92)], fill=fill, outline=ink, width=w)
    elif kind == "smiley":
        d.ellipse((s * 0.05, s * 0.05, s * 0.95, s * 0.95), fill=fill, outline=ink, width=w)
        d.ellipse((s * 0.3, s * 0.3, s * 0.4, s * 0.42), fill=ink)
        d.ellipse((s * 0.6, s * 0.3, s * 0.7, s * 0.42), fill=ink)
        d.arc((s * 0.25, s * 0.35, s * 0.75, s * 0.75), 20, 160, fill=ink, width=w)
    elif kind == "fish":
        d.ellipse((s * 0.05, s * 0.25, s * 0.7, s * 0.75), fill=fill, outline=ink, width=w)
        d.polygon([(s * 0.65, s * 0.5), (s * 0.95, s * 0.25), (s * 0.95, s * 0.75)], fill=fill, outline=ink, width=w)
        d.ellipse((s * 0.18, s * 0.4, s * 0.27, s * 0.49), fill=ink)
    elif kind == "sun":
        for i in range(12):
            ang = i * math.pi / 6
            d.line((s / 2, s / 2, s / 2 + s * 0.47 * math.cos(ang), s / 2 + s * 0.47 * math.sin(ang)), fill=ink, width=w)
        d.ellipse((s * 0.22, s * 0.22, s * 0.78, s * 0.78), fill=fill, outline=ink, width=w)
    elif kind == "house":
        d.rectangle((s * 0.2, s * 0.45, s * 0.8, s * 0.92), fill=fill, outline=ink, width=w)
        d.polygon([(s * 0.08, s * 0.48), (s * 0.5, s * 0.08), (s * 0.92, s * 0.48)], fill=fill, outline=ink, width=w)
        d.rectangle((s * 0.42, s * 0.65, s * 0.58, s * 0.92), fill=ink)
    elif kind == "tree":
        d.rectangle((s * 0.42, s * 0.6, s * 0.58, s * 0.95), fill=(120, 72, 40, 255), outline=ink, width=w)
        d.ellipse((s * 0.12, s * 0.05, s * 0.88, s * 0.7), fill=fill, outline=ink, width=w)
    else:  # balloon
        d.line((s * 0.5, s * 0.7, s * 0.45, s * 0.97), fill=ink, width=w)
        d.ellipse((s * 0.2, s * 0.05, s * 0.8, s * 0.75), fill=fill, outline=ink, width=w)
    return im


@dataclass(frozen=True)
class Cartoon:
    """A needle image: its name (for options and manifests) and its RGBA picture."""

    name: str
    image: Any


class CartoonSource:
    """Cartoons to paste: from `--needle-images` files (in name order) or drawn (kind x colour)."""

    def __init__(self, folder: Path | None) -> None:
        self.files: list[Path] = []
        if folder is not None:
            if not folder.is_dir():
                raise DataError(f"--needle-images {folder} is not a folder; give a folder of cartoon images")
            self.files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".webp"))
            if len(self.files) < 4:
                raise DataError(
                    f"--needle-images {folder} holds {len(self.files)} images; give at least 4 (a needle and 3 distractors)"
                )
            from needlepoint.core.images import check_decodes

            for path in self.files:
                check_decodes(path, f"{path} of --needle-images")

    def names(self) -> list[str]:
        if self.files:
            return [p.name for p in self.files]
        return [f"{kind}-{i}" for kind in CARTOON_KINDS for i in range(len(_PALETTE))]

    def get(self, name: str) -> Cartoon:
        if self.files:
            from PIL import Image

            path = next(p for p in self.files if p.name == name)
            with Image.open(path) as im:
                return Cartoon(name, im.convert("RGBA"))
        kind, _, i = name.rpartition("-")
        return Cartoon(name, draw_cartoon(kind, _PALETTE[int(i)]))

    def pick(self, rng: random.Random, n: int, distinct_kinds: bool = True) -> list[Cartoon]:
        """n cartoons; drawn ones differ in kind, so options never look alike."""
        names = self.names()
        if self.files or not distinct_kinds:
            return [self.get(x) for x in rng.sample(names, n)]
        kinds = rng.sample(CARTOON_KINDS, n)
        return [self.get(f"{k}-{rng.randrange(len(_PALETTE))}") for k in kinds]


def paste(base: Any, cartoons: list[Any], rng: random.Random) -> Any:
    """`base` (RGB) with each cartoon pasted at a random position and scale (12-30% of the shorter
    side), not overlapping the ones pasted before where the image has room."""
    out = base.convert("RGB")
    placed: list[tuple[int, int, int, int]] = []
    short = min(out.size)
    for cartoon in cartoons:
        side = max(12, int(short * rng.uniform(0.12, 0.3)))
        icon = cartoon.resize((side, side))
        for _ in range(30):
            x = rng.randint(0, max(0, out.width - side))
            y = rng.randint(0, max(0, out.height - side))
            box = (x, y, x + side, y + side)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                break
        placed.append(box)
        out.paste(icon, (x, y), icon)
    return out


def jpeg_bytes(image: Any) -> bytes:
    """An RGB image as JPEG at quality 95 (deterministic for the same pixels)."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def png_bytes(image: Any, background: tuple[int, int, int] = (255, 255, 255)) -> bytes:
    """An RGBA icon on a plain background, as PNG (an answer option)."""
    from PIL import Image

    canvas = Image.new("RGB", image.size, background)
    canvas.paste(image, (0, 0), image)
    buf = io.BytesIO()
    canvas.save(buf, format="PNG")
    return buf.getvalue()
