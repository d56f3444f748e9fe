"""The RAG baseline's hand-made set: an MM-NIAH val split whose every piece's score with the
question is known by hand, and the simulated embedding server that scores it so.

The server is SimulatedServer with keyword vectors: a text's vector is set by the one keyword it
contains, an image's by its dominant colour (unnormalised on purpose: the client normalises);
`/tokenize` counts whitespace-separated words.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar, overload

from PIL import Image

from helpers.images import rgb_at
from needlepoint.models.simulated import SimulatedServer

EMBED_MODEL = "test/keyword-embedder"


def _scored(s: float) -> list[float]:
    """A unit vector whose cosine with the question's vector [1, 0, 0] is s."""
    return [s, math.sqrt(1 - s * s), 0.0]


# Every piece's score with a question that mentions the penguin, by keyword or image colour.
TEXT_VECTORS = {
    "penguin": _scored(1.0),
    "alpha": _scored(0.8),
    "beta": _scored(0.6),
    "gamma": _scored(0.3),
    "weather": _scored(0.1),
}
IMAGE_VECTORS = {"red": _scored(0.7), "green": _scored(0.5), "blue": _scored(0.2)}
OTHER = [0.0, 0.0, 1.0]  # no keyword: score 0 (the empty pieces, embedded as "summarize:")
COLOURS = {"red": (220, 20, 20), "green": (20, 200, 20), "blue": (20, 20, 220)}

# Pieces of DOC (by the authors' split), their scores with the question, and their token costs:
#   0 "Filler about weather."                 0.1   3 words + 1 = 4
#   1 " The penguin sings loudly at dawn."    1.0   6 + 1 = 7      (the needle)
#   2 ""                                      0.0   0 + 1 = 1
#   3 <image> red.png                         0.7   256
#   4 "Alpha notes follow here."              0.8   4 + 1 = 5
#   5 " Beta remarks end!"                    0.6   3 + 1 = 4
#   6 ""                                      0.0   1
#   7 <image> blue.png                        0.2   256
#   8 "Gamma closes."                         0.3   2 + 1 = 3
#   9 ""                                      0.0   1
# Visit order by score: 1, 4, 3, 5, 8, 7, 0, then the three empty pieces (tied).
DOC = (
    "Filler about weather. The penguin sings loudly at dawn.<image>Alpha notes follow here. Beta remarks end!<image>Gamma closes."
)
NEEDLE = "The penguin sings loudly at dawn."
QUESTION = "What does the penguin do at dawn?"
FULL_COST = 4 + 7 + 1 + 256 + 5 + 4 + 1 + 256 + 3 + 1


def text_vector(text: str) -> list[float]:
    """A text's vector: that of the one keyword it carries (OTHER without one), times 3."""
    low = text.lower()
    hits = [v for k, v in TEXT_VECTORS.items() if k in low]
    assert len(hits) <= 1, f"a test text should carry one keyword at most: {text!r}"
    return [3.0 * x for x in (hits[0] if hits else OTHER)]


def image_vector(data: bytes) -> list[float]:
    """An image's vector: that of its dominant colour (red, green or blue), times 3."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    mean = list(rgb_at(im.resize((1, 1), Image.Resampling.BOX), (0, 0)))
    return [3.0 * x for x in IMAGE_VECTORS[("red", "green", "blue")[mean.index(max(mean))]]]


S = TypeVar("S", bound=SimulatedServer)


@overload
def embedding_server(**kwargs: Any) -> SimulatedServer: ...
@overload
def embedding_server(cls: type[S], **kwargs: Any) -> S: ...
def embedding_server(cls: type[SimulatedServer] = SimulatedServer, **kwargs: Any) -> SimulatedServer:
    """The simulated server (or a subclass) embedding with the keyword vectors as EMBED_MODEL,
    keeping every request (SimulatedServer keywords override); start it with `with`."""
    settings: dict[str, Any] = {
        "embed_models": (EMBED_MODEL,),
        "text_vector": text_vector,
        "image_vector": image_vector,
        "keep_requests": True,
    }
    return cls(**{**settings, **kwargs})


def niah_row(
    rid: int, context: str, question: str, images: list[str], answer: Any, needles: list[Any], **meta: Any
) -> dict[str, Any]:
    """An MM-NIAH annotation row as the release writes it (`meta` overrides its meta fields)."""
    return {
        "id": rid,
        "images_list": images,
        "context": context,
        "question": question,
        "answer": answer,
        "meta": {
            "placed_depth": 0.5,
            "context_length": 1500,
            "context_length_text": 1000,
            "context_length_image": 500,
            "num_images": len(images),
            "needles": needles,
            "choices": None,
            "choices_image_path": None,
            **meta,
        },
    }


def write_rag_release(folder: Path, needles: Sequence[Any] = (NEEDLE, "Gamma closes.", 3), image_row: bool = True) -> Path:
    """A val split in `folder`: DOC as retrieval-text row 7 (with `needles`) and, with `image_row`,
    a reasoning-image row 9 whose question holds an image and whose options are images."""
    (folder / "annotations").mkdir(parents=True)
    (folder / "images").mkdir()
    for name, rgb in COLOURS.items():
        Image.new("RGB", (48, 40), rgb).save(folder / "images" / f"{name}.png")
    text_row = niah_row(7, DOC + "</s>", QUESTION, ["red.png", "blue.png"], "sings", list(needles))
    (folder / "annotations" / "retrieval-text.jsonl").write_text(json.dumps(text_row) + "\n", encoding="utf-8")
    if image_row:
        row = niah_row(
            9,
            "Alpha notes.<image>Weather report.",
            "Look at <image> and find the penguin. Which option matches?",
            ["red.png", "green.png"],
            0,
            [],
            choices_image_path=["blue.png", "red.png"],
        )
        (folder / "annotations" / "reasoning-image.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    return folder
