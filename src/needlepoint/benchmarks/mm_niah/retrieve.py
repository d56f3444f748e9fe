"""The embedding half of MM-NIAH's RAG baseline: one document's piece scores and token counts
from any Embedder (served or local), then the authors' selection (rag.py).

Kept apart from rag.py so that the selection rules stay pure and synchronous; this module only
awaits the embedder it is given and knows nothing about HTTP.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from needlepoint.benchmarks.mm_niah.data import NiahSample
from needlepoint.benchmarks.mm_niah.rag import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_MIN_IMAGES,
    RagDocument,
    RagSample,
    Selection,
    document,
    reduced_sample,
    select,
)

if TYPE_CHECKING:
    from needlepoint.models.embeddings import Embedder

__all__ = ["PieceScores", "Retrieved", "retrieve", "score_document"]


@dataclass(frozen=True)
class PieceScores:
    """A document's scores (one per piece, document order) and text token counts (one per text
    piece, without special tokens): all that retrieval needs, JSON-ready for a cache."""

    scores: list[float]
    token_counts: list[int]

    def to_dict(self) -> dict[str, Any]:
        return {"scores": self.scores, "token_counts": self.token_counts}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PieceScores:
        return cls([float(s) for s in data["scores"]], [int(c) for c in data["token_counts"]])


async def score_document(doc: RagDocument, embedder: Embedder) -> PieceScores:
    """Embed the question and every text piece (prefixed) and image, and count the text pieces'
    tokens, all at once; a piece's score is its cosine with the question."""
    texts, images, counts = await asyncio.gather(
        embedder.embed_texts([doc.query, *doc.embed_texts]),
        embedder.embed_images(list(doc.images)),
        embedder.count_tokens(doc.text_pieces),
    )
    question = np.asarray(texts[0], dtype=np.float64)
    text_scores = np.asarray(texts[1:], dtype=np.float64) @ question if len(texts) > 1 else np.zeros(0)
    image_scores = np.asarray(images, dtype=np.float64) @ question if len(doc.images) else np.zeros(0)
    return PieceScores(doc.piece_scores(text_scores.tolist(), image_scores.tolist()), list(counts))


@dataclass(frozen=True)
class Retrieved:
    """One sample after retrieval: its pieces, scores, what was kept, and the reduced sample whose
    prompt (`MmNiah.prompt`) is what the model is asked."""

    doc: RagDocument
    scores: PieceScores
    selection: Selection
    sample: RagSample


async def retrieve(
    sample: NiahSample,
    embedder: Embedder,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    min_images: int = DEFAULT_MIN_IMAGES,
    cached: PieceScores | None = None,
    doc: RagDocument | None = None,
) -> Retrieved:
    """The RAG step for one sample; `cached` scores (from an earlier run) skip the embedder; `doc`
    is the sample's `document` where the caller has it already."""
    doc = doc if doc is not None else document(sample)
    scores = cached if cached is not None else await score_document(doc, embedder)
    selection = select(doc, scores.scores, scores.token_counts, max_tokens, min_images)
    return Retrieved(doc, scores, selection, reduced_sample(sample, doc, selection))
