"""MM-NIAH's RAG baseline, the retrieval half: the authors' `prepare_rag.py` rule for rule
(docs/protocols/mm-niah.md, "The retrieval baseline"), without the embedding model.

Pure and synchronous. The flow a solver follows:

    doc = document(sample)                              # pieces, images, needles of one row
    scores, counts = ...                                # embed doc.query, doc.embed_texts, doc.images;
                                                        # count tokens of doc.text_pieces (retrieve.py)
    sel = select(doc, scores, counts)                   # what the authors keep, and the needles' ranks
    reduced = reduced_sample(sample, doc, sel)          # MmNiah().prompt(reduced) is the request

The rules kept on purpose, quirks included: `</s>` is dropped from the context; the question's own
images (the last k of `images_list` for k placeholders in the question) and the option images are
set aside and always kept; the context is split at `<image>` and each non-empty text part at
sentence ends, `re.split(r'(?<=[.!?])', part)`, so a part ending in punctuation yields an
empty-string piece that is scored and can be kept like any other (it costs one token); pieces are
visited by score, highest first, in `numpy.argsort(scores)[::-1]` order, and the budget is
checked before a piece is added, so the last piece kept may overshoot it; an image costs 256
tokens, a text piece its own tokens plus one (the authors count with BOS and EOS, minus one).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from needlepoint.benchmarks.mm_niah.data import PLACEHOLDER, NiahSample, full_text, haystack, image_pieces, placeholders
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MIN_IMAGES",
    "IMAGE_TOKENS",
    "PREFIX",
    "NeedleHit",
    "NeedleSpan",
    "RagDocument",
    "RagSample",
    "Selection",
    "document",
    "document_from_row",
    "reduced_sample",
    "select",
    "split_pieces",
    "text_cost",
]

PREFIX = "summarize:"
"""Put before the question and every text piece before they are embedded."""
IMAGE_TOKENS = 256
DEFAULT_MAX_TOKENS = 8192
DEFAULT_MIN_IMAGES = 0
_SENTENCE_END = re.compile(r"(?<=[.!?])")


def split_pieces(context: str) -> list[str]:
    """The authors' pieces of a context: sentences (empty strings included) and `<image>` marks.
    Joined, they give the context back exactly."""
    pieces: list[str] = []
    for part in image_pieces(context):
        if part:
            pieces.extend(_SENTENCE_END.split(part))
        pieces.append(PLACEHOLDER)
    pieces.pop()
    return pieces


def text_cost(count: int) -> int:
    """Tokens a text piece costs: its own tokens (no special tokens) plus one."""
    return count + 1


@dataclass(frozen=True)
class NeedleSpan:
    """Where one entry of `meta.needles` sits among the pieces (empty when it cannot be found)."""

    index: int
    kind: str  # "text" (found in the context), "image" (a context image's file name), "unknown"
    pieces: tuple[int, ...]


@dataclass(frozen=True)
class RagDocument:
    """One row cut into the authors' pieces. `images[j]` is the j-th `<image>` piece; `kept_images`
    (question and option images) are always sent; `row` is the row without its context."""

    question: str
    pieces: tuple[str, ...]
    images: tuple[ImageRef, ...]
    kept_images: tuple[ImageRef, ...]
    question_image_names: tuple[str, ...]
    needles: tuple[NeedleSpan, ...]
    row: dict[str, Any]

    def is_image(self, i: int) -> bool:
        """True when piece i is an `<image>` piece."""
        return self.pieces[i] == PLACEHOLDER

    @property
    def query(self) -> str:
        """The text embedded for the question (the row's question as written, prefixed)."""
        return PREFIX + self.question

    @property
    def text_pieces(self) -> list[str]:
        """The text pieces in document order (what token counts are asked for)."""
        return [p for p in self.pieces if p != PLACEHOLDER]

    @property
    def embed_texts(self) -> list[str]:
        """The text pieces as embedded: prefixed, in document order."""
        return [PREFIX + p for p in self.text_pieces]

    def piece_scores(self, text_scores: Sequence[float], image_scores: Sequence[float]) -> list[float]:
        """One score per piece, in document order, from the scores of the text pieces and of the
        images (each in document order)."""
        if len(text_scores) != len(self.text_pieces) or len(image_scores) != len(self.images):
            raise ValueError(
                f"{len(text_scores)} text and {len(image_scores)} image scores for "
                f"{len(self.text_pieces)} text pieces and {len(self.images)} images"
            )
        texts, images = iter(text_scores), iter(image_scores)
        return [float(next(images) if p == PLACEHOLDER else next(texts)) for p in self.pieces]


def _locate_needles(needles: Any, context: str, pieces: Sequence[str], image_names: Sequence[str]) -> tuple[NeedleSpan, ...]:
    """Text needles by their first occurrence in the context (every non-empty piece overlapping
    it); image needles by a context image of the same file name; anything else is not found."""
    if not isinstance(needles, list):
        return ()
    starts = []
    at = 0
    for p in pieces:
        starts.append(at)
        at += len(p)
    image_at = [i for i, p in enumerate(pieces) if p == PLACEHOLDER]
    out = []
    for n, needle in enumerate(needles):
        if isinstance(needle, str) and needle and needle in context:
            s = context.index(needle)
            e = s + len(needle)
            hit = tuple(i for i, p in enumerate(pieces) if p != PLACEHOLDER and p and starts[i] < e and starts[i] + len(p) > s)
            out.append(NeedleSpan(n, "text", hit))
        elif isinstance(needle, str) and needle in image_names:
            hit = tuple(image_at[j] for j, name in enumerate(image_names) if name == needle)
            out.append(NeedleSpan(n, "image", hit))
        else:
            out.append(NeedleSpan(n, "unknown", ()))
    return tuple(out)


def document_from_row(row: dict[str, Any], images: Sequence[ImageRef]) -> RagDocument:
    """The pieces of a raw MM-NIAH row; `images` are the refs of its prompt images in placeholder
    order (context, question, options), as the loader makes them."""
    context = haystack(row)
    question = str(row["question"])
    n_context = placeholders(context)
    names = list(row.get("images_list") or [])
    n_question = placeholders(question)
    if n_context + n_question != len(names):
        raise DataError(
            f"row {row.get('id')!r}: {n_context} + {n_question} <image> placeholders in context and question "
            f"but {len(names)} entries in images_list; fix the data file"
        )
    if len(images) < len(names):
        raise ValueError(f"{len(images)} image refs for the {len(names)} images of row {row.get('id')!r}")
    pieces = split_pieces(context)
    needles = _locate_needles((row.get("meta") or {}).get("needles"), context, pieces, names[:n_context])
    return RagDocument(
        question=question,
        pieces=tuple(pieces),
        images=tuple(images[:n_context]),
        kept_images=tuple(images[n_context:]),
        question_image_names=tuple(names[n_context:]),
        needles=needles,
        row={k: v for k, v in row.items() if k != "context"},
    )


def document(sample: NiahSample) -> RagDocument:
    """The pieces of a loaded sample's row, re-read from its file (DataError if it changed)."""
    row = sample.row()
    return document_from_row(row, sample.images)


@dataclass(frozen=True)
class NeedleHit:
    """A needle of `meta.needles` after retrieval: its pieces, their ranks (1 = the best score),
    and whether all of them were kept. `found` is False when the needle cannot be located
    (image needles pasted into an image, counts): then there are no pieces and `kept` is None."""

    index: int
    kind: str
    found: bool
    pieces: tuple[int, ...]
    ranks: tuple[int, ...]
    kept: bool | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy, for the run record."""
        return {
            "index": self.index,
            "kind": self.kind,
            "found": self.found,
            "pieces": list(self.pieces),
            "ranks": list(self.ranks),
            "kept": self.kept,
        }


@dataclass(frozen=True)
class Selection:
    """What retrieval kept: piece indices in document order, the kept token count (the budget
    count: text pieces plus one each, 256 per image), the context images kept, the needles."""

    kept: tuple[int, ...]
    tokens: int
    images: int
    needles: tuple[NeedleHit, ...]
    max_tokens: int
    min_images: int

    @property
    def needles_kept(self) -> bool | None:
        """True when every located needle survived, False when one was dropped, None when no
        needle could be located."""
        found = [h.kept for h in self.needles if h.found]
        return all(found) if found else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary, for the run record."""
        return {
            "pieces_kept": len(self.kept),
            "tokens": self.tokens,
            "images": self.images,
            "max_tokens": self.max_tokens,
            "min_images": self.min_images,
            "needles_kept": self.needles_kept,
            "needles": [h.to_dict() for h in self.needles],
        }


def select(
    doc: RagDocument,
    scores: Sequence[float],
    token_counts: Sequence[int],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    min_images: int = DEFAULT_MIN_IMAGES,
) -> Selection:
    """The authors' selection loop. `scores` has one entry per piece (document order, see
    `RagDocument.piece_scores`); `token_counts` one per text piece (document order), counted
    without special tokens."""
    n = len(doc.pieces)
    if len(scores) != n:
        raise ValueError(f"{len(scores)} scores for {n} pieces")
    if len(token_counts) != n - len(doc.images):
        raise ValueError(f"{len(token_counts)} token counts for {n - len(doc.images)} text pieces")
    counts = iter(token_counts)
    costs = [IMAGE_TOKENS if p == PLACEHOLDER else text_cost(int(next(counts))) for p in doc.pieces]
    # The authors' order: numpy's default argsort of the scores as float64, reversed.
    order = np.argsort(np.asarray(scores, dtype=np.float64))[::-1].tolist()
    keep = [False] * n
    tokens = images = 0
    for i in order:
        if tokens >= max_tokens and images >= min_images:
            break
        image = doc.is_image(i)
        if tokens >= max_tokens and not image:
            continue
        keep[i] = True
        tokens += costs[i]
        images += image
    rank = [0] * n
    for r, i in enumerate(order, start=1):
        rank[i] = r
    hits = tuple(
        NeedleHit(
            index=s.index,
            kind=s.kind,
            found=bool(s.pieces),
            pieces=s.pieces,
            ranks=tuple(rank[i] for i in s.pieces),
            kept=all(keep[i] for i in s.pieces) if s.pieces else None,
        )
        for s in doc.needles
    )
    kept = tuple(i for i in range(n) if keep[i])
    return Selection(kept=kept, tokens=tokens, images=images, needles=hits, max_tokens=max_tokens, min_images=min_images)


@dataclass
class RagSample(NiahSample):
    """A sample whose prompt text is the retrieved context (held, not re-read); id, answer,
    context length and fingerprint stay those of the original row, so scoring is unchanged."""

    prompt_text: str = ""

    def text(self) -> str:
        return self.prompt_text


def reduced_sample(sample: NiahSample, doc: RagDocument, selection: Selection) -> RagSample:
    """The sample as the authors' rewritten row: the kept pieces joined in document order, the kept
    images in order followed by the question's images; the prompt is then built by the usual
    `full_text` and `MmNiah.prompt`."""
    context = "".join(doc.pieces[i] for i in selection.kept)
    image_of_piece = {i: j for j, i in enumerate(k for k, p in enumerate(doc.pieces) if p == PLACEHOLDER)}
    kept_images = [doc.images[image_of_piece[i]] for i in selection.kept if i in image_of_piece]
    row = {**doc.row, "context": context, "images_list": [im.key for im in kept_images] + list(doc.question_image_names)}
    text, names = full_text(row)
    images = kept_images + list(doc.kept_images)
    if len(names) != len(images) or placeholders(text) != len(images):
        raise DataError(
            f"{sample.id}: the retrieved prompt has {placeholders(text)} <image> placeholders for {len(images)} images"
        )
    values = {f.name: getattr(sample, f.name) for f in fields(NiahSample)}
    values["images"] = images
    return RagSample(**values, prompt_text=text)
