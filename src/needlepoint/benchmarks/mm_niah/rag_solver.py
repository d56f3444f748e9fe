"""`--solver rag` for MM-NIAH: the authors' RAG baseline as a solver (docs/protocols/mm-niah.md, "The retrieval baseline").

Per sample: cut the row into the authors' pieces (rag.py), score them with an embedding model
(served by vLLM, or loaded here through transformers), keep the best within the token budget in
document order, and ask the model with the usual prompt over what was kept. Each embedding and
`/tokenize` request of a served model is on disk as soon as it is answered (embeddings in the
sample's call cache, solvers/calls.py; token counts in the run's `cache/token_counts.jsonl`,
shared by all samples, so a piece several documents hold is counted once a run), so a run killed
mid-document asks only for the rest; the scores and token
counts of a document and question are then cached in `<run>/cache/rag/` (and the call cache's
vectors dropped), so a resumed or retried run does not embed again. The record keeps, under `solver.rag`, what was kept and the rank of every
needle piece; the leaderboard names the system `<model>-RAG`, as the authors' leaderboard does.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from needlepoint.benchmarks.mm_niah.data import NiahSample
from needlepoint.benchmarks.mm_niah.rag import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_MIN_IMAGES,
    RagDocument,
    Selection,
    document,
)
from needlepoint.benchmarks.mm_niah.retrieve import EMBED_CALLS, CallCachedEmbedder, PieceScores, retrieve
from needlepoint.contract.base import Parsed
from needlepoint.core import numeric
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.files import json_text, write_atomic
from needlepoint.core.options import Option
from needlepoint.models.tokencount import COUNTS_FILE, CountStore
from needlepoint.solvers.base import SolveContext
from needlepoint.solvers.default import read_reply

if TYPE_CHECKING:
    from needlepoint.models.openai_compat import ClientSettings

__all__ = ["API_KEY_ENV", "CACHE_DIR", "RagSolver", "kept_ranges", "note_of"]

API_KEY_ENV = ("NEEDLEPOINT_EMBED_API_KEY", "OPENAI_API_KEY")
CACHE_DIR = Path("cache") / "rag"
SERVED, TRANSFORMERS = "served", "transformers"


def kept_ranges(kept: Sequence[int]) -> list[list[int]]:
    """Piece indices (ascending) as [first, last] runs: a record stays small for long documents."""
    runs: list[list[int]] = []
    for i in kept:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return runs


def note_of(doc: RagDocument, selection: Selection) -> dict[str, Any]:
    """What the record keeps of one retrieval (under `solver.rag`)."""
    return {
        "pieces": len(doc.pieces),
        "pieces_kept": len(selection.kept),
        "images": len(doc.images),
        "images_kept": selection.images,
        "question_images": len(doc.kept_images),
        "tokens_kept": selection.tokens,
        "max_tokens": selection.max_tokens,
        "min_images": selection.min_images,
        "kept": kept_ranges(selection.kept),
        "needles_kept": selection.needles_kept,
        "needles": [h.to_dict() for h in selection.needles],
    }


class _LocalEmbedder:
    """A model loaded in this process on first use (the run's start calls `check()` first, so a
    model that cannot load is one sentence before a run folder exists)."""

    def __init__(self, name: str, device: str) -> None:
        self.name = name
        self.device = device
        self._model: Any = None

    def _loaded(self) -> Any:
        if self._model is None:
            from needlepoint.models.local_embed import load_embedder

            self._model = load_embedder(self.name, self.device)
        return self._model

    async def check(self) -> None:
        self._loaded()

    async def aclose(self) -> None:
        """Keep the model: the run's start closes what it checked, and the run uses it again."""

    async def embed_texts(self, texts: Sequence[str]) -> Any:
        return await self._loaded().embed_texts(texts)

    async def embed_images(self, images: Sequence[ImageRef]) -> Any:
        return await self._loaded().embed_images(images)

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        result: list[int] = await self._loaded().count_tokens(texts)
        return result


class RagSolver:
    """Retrieve the best pieces of the document with an embedding model, then ask the model."""

    name = "rag"
    dropped_calls = EMBED_CALLS  # dropped once a document's scores are kept: in each sample's own file
    options = (
        Option(
            "--embed-model",
            "the embedding model: the name the embedding server serves, or a local folder / "
            "Hugging Face id (CLIP, SigLIP, or the authors' OpenGVLab/InternVL-14B-224px) with --embed-backend transformers",
            metavar="NAME_OR_PATH",
        ),
        Option(
            "--embed-url",
            "base URL of an OpenAI-compatible embedding server with /v1/embeddings and /tokenize "
            "(vLLM); key from $NEEDLEPOINT_EMBED_API_KEY or $OPENAI_API_KEY",
            metavar="URL",
        ),
        Option(
            "--embed-backend",
            "served (the default with --embed-url) or transformers (load --embed-model here)",
            choices=(SERVED, TRANSFORMERS),
        ),
        Option(
            "--embed-tokenizer",
            "the served embedding model's own tokenizer (its folder, loaded offline with transformers as vLLM loads it where "
            "transformers is installed, else its tokenizer.json; or the file; or an id in the local Hugging Face cache): "
            "token counts without a /tokenize request per piece, checked against the server's first",
            metavar="PATH_OR_ID",
        ),
        Option("--embed-device", "device of a locally loaded embedding model, e.g. cuda or cuda:1 (default cpu)"),
        Option("--rag-max-tokens", f"token budget of the kept context (default {DEFAULT_MAX_TOKENS})", type=int, metavar="N"),
        Option("--rag-min-images", f"least context images kept (default {DEFAULT_MIN_IMAGES})", type=int, metavar="N"),
    )

    def __init__(
        self,
        benchmark: Any,
        embed_model: str | None = None,
        embed_url: str | None = None,
        embed_backend: str | None = None,
        embed_device: str | None = None,
        embed_tokenizer: str | None = None,
        rag_max_tokens: int = DEFAULT_MAX_TOKENS,
        rag_min_images: int = DEFAULT_MIN_IMAGES,
        embed_batch_size: int = 64,
        embed_concurrency: int = 8,
        client: ClientSettings | None = None,
    ) -> None:
        if not embed_model:
            raise DataError(
                "--solver rag needs --embed-model: the embedding model's served name, or a local model with --embed-backend transformers"
            )
        backend = embed_backend or (SERVED if embed_url else None)
        if backend is None:
            raise DataError(
                "--solver rag needs --embed-url (a served embedding model) or --embed-backend transformers (a local one)"
            )
        if backend not in (SERVED, TRANSFORMERS):
            raise DataError(f"--embed-backend must be {SERVED} or {TRANSFORMERS}, not {backend!r}")
        if backend == SERVED and not embed_url:
            raise DataError("--embed-backend served needs --embed-url, the base URL of the embedding server")
        if backend == TRANSFORMERS and embed_url:
            raise DataError("--embed-url applies to a served embedding model; drop it, or drop --embed-backend transformers")
        if backend == TRANSFORMERS and embed_tokenizer:
            raise DataError("--embed-tokenizer applies to a served embedding model (a local one counts with its own); drop it")
        if backend == SERVED and embed_device:
            raise DataError("--embed-device applies to --embed-backend transformers; drop it")
        numeric.whole("--rag-max-tokens", rag_max_tokens, 1)  # 0 keeps no context: no request could be answered
        numeric.whole("--rag-min-images", rag_min_images, 0)
        self.benchmark = benchmark
        self.embed_model = embed_model
        self.backend = backend
        self.max_tokens = rag_max_tokens
        self.min_images = rag_min_images
        self.embedder: Any
        if backend == SERVED:
            from needlepoint.models.embeddings import ServedEmbedder
            from needlepoint.models.tokencount import load_tokenizer

            assert embed_url is not None
            key = next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), None)
            self.embedder = ServedEmbedder(
                embed_model,
                embed_url,
                api_key=key,
                retry=client.retry if client else None,
                batch_size=embed_batch_size,
                max_concurrency=embed_concurrency,
                tokenizer=load_tokenizer(embed_tokenizer),
            )
        else:
            self.embedder = _LocalEmbedder(embed_model, embed_device or "cpu")
        self._counts: CountStore | None = None  # the run's paid token counts (opened with its first sample)
        self._counts_dir: Path | None = None

    def identity(self) -> dict[str, Any]:
        return {
            "embed_model": self.embed_model,
            "embed_backend": self.backend,
            "max_tokens": self.max_tokens,
            "min_images": self.min_images,
        }

    def label(self, model: str) -> str:
        return f"{model}-RAG"

    def models(self) -> Mapping[str, Any]:
        return {"embedder": self.embedder}

    @staticmethod
    def cache_name(sample: NiahSample) -> str:
        """The file of a sample's scores under <run>/cache/rag/: named by the sample's fingerprint
        (its id, document and question text, images), as the run's identity fixes the embedding model."""
        return hashlib.sha256(sample.fingerprint().encode()).hexdigest()[:32] + ".json"

    def _cache_path(self, ctx: SolveContext, sample: NiahSample) -> Path | None:
        return ctx.run_dir / CACHE_DIR / self.cache_name(sample) if ctx.run_dir is not None else None

    @staticmethod
    def _read_cache(path: Path | None, doc: RagDocument) -> PieceScores | None:
        if path is None or not path.is_file():
            return None
        try:
            got = PieceScores.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a damaged cache file: embed again
        if len(got.scores) != len(doc.pieces) or len(got.token_counts) != len(doc.text_pieces):
            return None
        return got

    def count_store(self, run_dir: Path | None) -> CountStore:
        """The store of the run's paid token counts (`<run>/cache/token_counts.jsonl`, read once
        a run; in memory without a run folder), keyed by the embedding model's name."""
        if self._counts is None or self._counts_dir != run_dir:
            if self._counts is not None:
                self._counts.close()
            path = run_dir / COUNTS_FILE if run_dir is not None else None
            self._counts, self._counts_dir = CountStore(path, self.embed_model), run_dir
        return self._counts

    async def solve(self, sample: NiahSample, ctx: SolveContext) -> Parsed:
        doc = document(sample)
        path = self._cache_path(ctx, sample)
        scores = self._read_cache(path, doc)
        embedding = {
            "backend": self.backend,
            "model": self.embed_model,
            "texts": 1 + len(doc.text_pieces),
            "images": len(doc.images),
            "counted": sum(1 for p in doc.text_pieces if p),
            "cached": scores is not None,
        }
        if scores is None:
            embedder = (
                CallCachedEmbedder(self.embedder, ctx, self.count_store(ctx.run_dir)) if self.backend == SERVED else self.embedder
            )
            got = await ctx.tool(
                "embed",
                lambda: retrieve(sample, embedder, self.max_tokens, self.min_images, doc=doc),
                summary=lambda _: {**embedding, "reused_calls": ctx.reused_calls},
            )
            if path is not None:
                write_atomic(path, json_text(got.scores.to_dict()))
            if ctx.calls is not None:  # the scores stand for the vectors from now on
                ctx.calls.drop(lambda entry: entry.get("kind") in EMBED_CALLS)
        else:
            got = await retrieve(sample, self.embedder, self.max_tokens, self.min_images, cached=scores, doc=doc)
        selection, reduced = got.selection, got.sample
        conversation = self.benchmark.prompt(reduced)
        ctx.request(conversation)
        ctx.note(rag=note_of(doc, selection), embedding=embedding)
        reply = await ctx.complete(conversation)
        return read_reply(self.benchmark, sample, reply)
