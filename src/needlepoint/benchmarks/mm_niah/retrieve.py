"""The embedding half of MM-NIAH's RAG baseline: one document's piece scores and token counts
from any Embedder (served or local), then the authors' selection (rag.py).

Kept apart from rag.py so that the selection rules stay pure and synchronous; this module only
awaits the embedder it is given and knows nothing about HTTP. `CallCachedEmbedder` puts each of a
served embedder's requests (a batch of texts, an image) through the sample's call cache
(solvers/calls.py), and its token counts through the run's store of paid counts
(tokencount.CountStore), so a resumed run asks only for what never got an answer, and a piece that
several documents share is counted once a run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pybase64

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
from needlepoint.core.aio import gather_all
from needlepoint.core.conversation import ImageRef
from needlepoint.solvers.calls import key_of

if TYPE_CHECKING:
    from needlepoint.models.embeddings import Embedder
    from needlepoint.models.tokencount import CountStore
    from needlepoint.solvers.base import SolveContext

__all__ = ["EMBED_CALLS", "CallCachedEmbedder", "PieceScores", "Retrieved", "retrieve", "score_document"]

EMBED_CALLS = ("embed_texts", "embed_image", "tokenize")
"""The kinds of call-cache entries an embedder's requests leave (dropped once the scores are cached)."""


def _matrix_json(m: Any) -> dict[str, Any]:
    """Rows of float32 as the cache keeps them: exact, and a third of the size of JSON numbers."""
    a = np.ascontiguousarray(m, dtype="<f4")
    return {"shape": list(a.shape), "f32": pybase64.b64encode(a.tobytes()).decode("ascii")}


def _matrix(data: Any) -> np.ndarray:
    shape = tuple(int(n) for n in data["shape"])
    return np.frombuffer(pybase64.b64decode(data["f32"]), dtype="<f4").reshape(shape).astype(np.float32)


def _counts(data: Any) -> list[int]:
    if not isinstance(data, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in data):
        raise ValueError("not token counts")
    return list(data)


class CallCachedEmbedder:
    """A served embedder whose requests go through the sample's call cache, one entry per request
    as the embedder sends it: a batch of at most `batch_size` distinct texts, one image, one text's
    token count (or, given the run's `counts` store, each text's count once a run). What comes back
    is what the embedder returns (rows L2-normalised, counts)."""

    def __init__(self, embedder: Any, ctx: SolveContext, counts: CountStore | None = None) -> None:
        self.embedder = embedder
        self.ctx = ctx
        self.counts = counts
        self.name = str(embedder.name)
        self.batch_size = max(1, int(getattr(embedder, "batch_size", 64)))

    async def check(self) -> None:
        await self.embedder.check()

    async def aclose(self) -> None:
        """The embedder stays open: the solver owns it."""

    async def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        unique = list(dict.fromkeys(texts))
        if not unique:
            return np.zeros((0, 0), dtype=np.float32)
        batches = [unique[i : i + self.batch_size] for i in range(0, len(unique), self.batch_size)]

        def one(batch: list[str]) -> Awaitable[np.ndarray]:
            key = key_of("embed_texts", self.name, batch)
            return self.ctx.answered("embed_texts", key, lambda: self.embedder.embed_texts(batch), _matrix_json, _matrix)

        got = await gather_all([one(b) for b in batches])
        row = {t: r for batch, rows in zip(batches, got) for t, r in zip(batch, rows)}
        return np.stack([row[t] for t in texts]).astype(np.float32, copy=False)

    async def embed_images(self, images: Sequence[ImageRef]) -> np.ndarray:
        unique = list(dict.fromkeys(images))
        if not unique:
            return np.zeros((0, 0), dtype=np.float32)

        def one(ref: ImageRef) -> Awaitable[np.ndarray]:
            key = key_of("embed_image", self.name, ref.key, ref.max_side)
            return self.ctx.answered("embed_image", key, lambda: self.embedder.embed_images([ref]), _matrix_json, _matrix)

        got = dict(zip(unique, await gather_all([one(r) for r in unique])))
        return np.stack([got[r][0] for r in images]).astype(np.float32, copy=False)

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Counts known without a request (ServedEmbedder.known_counts: counted before, or by the
        model's tokenizer loaded here) cost nothing; the rest are paid calls, kept in the run's
        store when there is one (else in the sample's call cache)."""
        known = self.embedder.known_counts(texts) if hasattr(self.embedder, "known_counts") else {"": 0}
        unique = [t for t in dict.fromkeys(texts) if t not in known]
        if self.counts is not None:
            if unique:
                known.update(await self.counts.counts(unique, self._ask))
            return [known[t] for t in texts]

        def one(text: str) -> Awaitable[list[int]]:
            key = key_of("tokenize", self.name, text)
            return self.ctx.answered("tokenize", key, lambda: self.embedder.count_tokens([text]), list, _counts)

        known.update((t, got[0]) for t, got in zip(unique, await gather_all([one(t) for t in unique])))
        return [known[t] for t in texts]

    async def _ask(self, text: str) -> int:
        """One text's count from the server (a paid request)."""
        (n,) = await self.embedder.count_tokens([text])
        return int(n)


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
