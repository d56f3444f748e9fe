"""MM-NIAH's RAG baseline, the retrieval half: hand-made rows in the release layout, loaded by the
real loader, embedded by a real HTTP embedding server on 127.0.0.1, selected by the authors'
rules (docs/protocols/mm-niah.md, "The retrieval baseline"), and turned into the prompt the model would get.

The server (the simulated one, with tests/helpers/rag.py's keyword vectors) embeds
deterministically: a text's vector is set by the keyword it contains, an image's by its dominant
colour, so every piece's cosine with the question is known by hand; `/tokenize` counts
whitespace-separated words. Expected selections are worked out below from the
rules, piece by piece.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from helpers.rag import DOC, EMBED_MODEL, FULL_COST, NEEDLE, QUESTION, embedding_server, write_rag_release

from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.data import OPEN_SENTENCE, OPTION_SENTENCE
from needlepoint.benchmarks.mm_niah.rag import (
    IMAGE_TOKENS,
    PREFIX,
    document,
    reduced_sample,
    select,
    split_pieces,
)
from needlepoint.benchmarks.mm_niah.retrieve import PieceScores, retrieve, score_document
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError, RequestError
from needlepoint.core.status import BACKEND_ERROR, CONTEXT_TOO_LONG, REQUEST_REJECTED
from needlepoint.models.embeddings import ServedEmbedder, tokenize_url
from needlepoint.models.openai_compat import RetryPolicy
from needlepoint.models.simulated import SimulatedServer


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """A val split with one retrieval-text row (DOC) and one reasoning-image row whose question
    holds an image and whose options are images."""
    return write_rag_release(tmp_path / "mm_niah_val", needles=[NEEDLE, "Gamma closes.", 3, "red.png", "gone.png"])


def load(release: Path, task: str) -> Any:
    (sample,) = MmNiah(tasks=[task]).load(release)
    return sample


def embedder(server: SimulatedServer, **kwargs: Any) -> ServedEmbedder:
    return ServedEmbedder(EMBED_MODEL, server.url, retry=RetryPolicy(max_retries=2, base_s=0.01, cap_s=0.02), **kwargs)


async def _retrieve(sample: Any, server: SimulatedServer, max_tokens: int = 8192, min_images: int = 0, **kwargs: Any) -> Any:
    emb = embedder(server, **kwargs)
    try:
        await emb.check()
        return await retrieve(sample, emb, max_tokens, min_images)
    finally:
        await emb.aclose()


def run_retrieve(sample: Any, server: SimulatedServer, **kwargs: Any) -> Any:
    return asyncio.run(_retrieve(sample, server, **kwargs))


def context_of(got: Any) -> str:
    return "".join(got.doc.pieces[i] for i in got.selection.kept)


# --- the split -------------------------------------------------------------------------------


def test_split_keeps_empty_pieces_and_gives_the_context_back() -> None:
    context = "Alpha one. Beta two!<image>Gamma?<image><image>Delta"
    pieces = split_pieces(context)
    assert pieces == ["Alpha one.", " Beta two!", "", "<image>", "Gamma?", "", "<image>", "<image>", "Delta"]
    assert "".join(pieces) == context
    assert split_pieces("") == []
    assert split_pieces("<image>") == ["<image>"]
    assert split_pieces("Who? Me... Yes") == ["Who?", " Me.", ".", ".", " Yes"]


def test_document_of_a_loaded_row(release: Path) -> None:
    sample = load(release, "retrieval-text")
    doc = document(sample)
    assert "".join(doc.pieces) == DOC  # `</s>` dropped, nothing else changed
    assert len(doc.pieces) == 10 and doc.pieces[2] == doc.pieces[6] == doc.pieces[9] == ""
    assert [im.key for im in doc.images] == ["red.png", "blue.png"] and doc.kept_images == ()
    assert doc.query == PREFIX + QUESTION
    assert doc.embed_texts[0] == "summarize:Filler about weather." and doc.embed_texts[2] == "summarize:"
    spans = {n.index: (n.kind, n.pieces) for n in doc.needles}
    assert spans == {0: ("text", (1,)), 1: ("text", (8,)), 2: ("unknown", ()), 3: ("image", (3,)), 4: ("unknown", ())}


# --- selection through the served embedder -------------------------------------------------------


def test_everything_fits_within_the_default_budget(release: Path) -> None:
    sample = load(release, "retrieval-text")
    with embedding_server() as server:
        got = run_retrieve(sample, server)
    assert got.selection.kept == tuple(range(10))
    assert got.selection.tokens == FULL_COST and got.selection.images == 2
    # The reduced prompt is then the plain prompt, part for part.
    bench = MmNiah(tasks=["retrieval-text"])
    assert bench.prompt(got.sample).messages == bench.prompt(sample).messages
    assert got.sample.id == sample.id and got.sample.fingerprint() == sample.fingerprint()
    needle = got.selection.needles[0]
    assert (needle.found, needle.ranks, needle.kept) == (True, (1,), True)


def test_budget_is_checked_before_adding_so_the_last_piece_overshoots(release: Path) -> None:
    sample = load(release, "retrieval-text")
    with embedding_server() as server:
        got = run_retrieve(sample, server, max_tokens=10)
    # Piece 1 (7 tokens, 7 < 10), then piece 4 although it ends at 12; then the budget is spent.
    assert got.selection.kept == (1, 4)
    assert got.selection.tokens == 12 and got.selection.images == 0
    assert context_of(got) == " The penguin sings loudly at dawn.Alpha notes follow here."
    text = got.sample.text()
    assert text == " The penguin sings loudly at dawn.Alpha notes follow here.\n" + QUESTION + OPEN_SENTENCE
    assert MmNiah().prompt(got.sample).messages[0].parts == [text]
    hits = {h.index: h for h in got.selection.needles}
    assert (hits[0].ranks, hits[0].kept) == ((1,), True)
    assert (hits[1].pieces, hits[1].ranks, hits[1].kept) == ((8,), (5,), False)  # "Gamma closes." dropped
    assert (hits[3].kind, hits[3].ranks, hits[3].kept) == ("image", (3,), False)
    assert (hits[2].found, hits[2].kept) == (False, None)
    assert got.selection.needles_kept is False
    assert got.selection.to_dict()["needles"][0] == {
        "index": 0,
        "kind": "text",
        "found": True,
        "pieces": [1],
        "ranks": [1],
        "kept": True,
    }


def test_minimum_images_are_taken_after_the_budget_skipping_text(release: Path) -> None:
    sample = load(release, "retrieval-text")
    with embedding_server() as server:
        got = run_retrieve(sample, server, max_tokens=10, min_images=2)
    # 1 (7), 4 (12); over budget: image 3 taken, texts 5 and 8 skipped, image 7 taken; then stop.
    assert got.selection.kept == (1, 3, 4, 7)
    assert got.selection.tokens == 12 + 2 * IMAGE_TOKENS and got.selection.images == 2
    assert context_of(got) == " The penguin sings loudly at dawn.<image>Alpha notes follow here.<image>"
    parts = MmNiah().prompt(got.sample).messages[0].parts
    assert [p.key if isinstance(p, ImageRef) else p for p in parts] == [
        " The penguin sings loudly at dawn.",
        "red.png",
        "Alpha notes follow here.",
        "blue.png",
        "\n" + QUESTION + OPEN_SENTENCE,
    ]


def test_question_and_option_images_are_always_kept(release: Path) -> None:
    sample = load(release, "reasoning-image")
    with embedding_server() as server:
        got = run_retrieve(sample, server, max_tokens=1)
    # Pieces: "Alpha notes." (0.8, 3 tokens), "", <image> red (0.7), "Weather report." (0.1), "":
    # the first fills the budget of 1; the context image is dropped, the question's and the
    # options' stay.
    assert got.doc.pieces == ("Alpha notes.", "", "<image>", "Weather report.", "")
    assert got.selection.kept == (0,) and got.selection.tokens == 3 and got.selection.images == 0
    parts = MmNiah().prompt(got.sample).messages[0].parts
    assert [p.key if isinstance(p, ImageRef) else p for p in parts] == [
        "Alpha notes.\nLook at ",
        "green.png",
        " and find the penguin. Which option matches?\nA. ",
        "blue.png",
        "\nB. ",
        "red.png",
        OPTION_SENTENCE,
    ]
    assert got.selection.needles == () and got.selection.needles_kept is None


def test_what_the_server_is_asked(release: Path) -> None:
    sample = load(release, "retrieval-text")
    with embedding_server() as server:
        run_retrieve(sample, server, batch_size=3)
    texts = [b for b in server.bodies("embeddings") if "input" in b][1:]  # the first is check()'s probe
    assert all(b["model"] == EMBED_MODEL and b["encoding_format"] == "float" and b["truncate_prompt_tokens"] == -1 for b in texts)
    assert all(len(b["input"]) <= 3 for b in texts)
    sent = [t for b in texts for t in b["input"]]
    # The question and each distinct text piece once (the two empty pieces are one "summarize:").
    assert sorted(sent) == sorted({PREFIX + QUESTION, *(PREFIX + p for p in document(sample).text_pieces)})
    images = [b for b in server.bodies("embeddings") if "messages" in b]
    assert len(images) == 2
    assert all(b["messages"][0]["role"] == "user" and b["messages"][0]["content"][0]["type"] == "image_url" for b in images)
    assert all(b["messages"][0]["content"][0]["image_url"]["url"].startswith("data:image/jpeg;base64,") for b in images)
    counted = server.bodies("tokenize")[1:]
    assert all(b == {"model": EMBED_MODEL, "prompt": b["prompt"], "add_special_tokens": False} for b in counted)
    assert sorted(b["prompt"] for b in counted) == sorted(p for p in document(sample).text_pieces if p)  # never ""


def test_scores_are_cosines_with_the_question(release: Path) -> None:
    sample = load(release, "retrieval-text")
    doc = document(sample)

    async def go(server: SimulatedServer) -> PieceScores:
        emb = embedder(server)
        try:
            return await score_document(doc, emb)
        finally:
            await emb.aclose()

    with embedding_server() as server:
        got = asyncio.run(go(server))
    assert got.scores == pytest.approx([0.1, 1.0, 0.0, 0.7, 0.8, 0.6, 0.0, 0.2, 0.3, 0.0], abs=1e-6)
    assert got.token_counts == [3, 6, 0, 4, 3, 0, 2, 0]
    assert PieceScores.from_dict(json.loads(json.dumps(got.to_dict()))) == got


# --- the selection loop on its own -----------------------------------------------------------------


def test_selection_rules_on_given_scores(release: Path) -> None:
    doc = document(load(release, "retrieval-text"))
    counts = [3, 6, 0, 4, 3, 0, 2, 0]
    # An empty piece scored first costs one token; the budget of 1 is then spent.
    sel = select(doc, [0, 0, 9, 0, 0, 0, 0, 0, 0, 0], counts, max_tokens=1)
    assert sel.kept == (2,) and sel.tokens == 1
    # A budget of 0 keeps nothing unless images are required; then only images, best first.
    assert select(doc, [0.1, 1.0, 0, 0.7, 0.8, 0.6, 0, 0.2, 0.3, 0], counts, max_tokens=0).kept == ()
    sel = select(doc, [0.1, 1.0, 0, 0.7, 0.8, 0.6, 0, 0.2, 0.3, 0], counts, max_tokens=0, min_images=1)
    assert sel.kept == (3,) and sel.tokens == IMAGE_TOKENS
    # More images required than the document has: every image, and no text once over budget.
    sel = select(doc, [0.1, 1.0, 0, 0.7, 0.8, 0.6, 0, 0.2, 0.3, 0], counts, max_tokens=5, min_images=5)
    assert sel.kept == (1, 3, 7) and sel.images == 2
    with pytest.raises(ValueError):
        select(doc, [0.0] * 9, counts)


def test_a_changed_file_is_refused(release: Path) -> None:
    sample = load(release, "retrieval-text")
    path = release / "annotations" / "retrieval-text.jsonl"
    path.write_text(path.read_text(encoding="utf-8").replace("loudly", "softly"), encoding="utf-8")
    with pytest.raises(DataError, match="changed during the run"):
        document(sample)


def test_reduced_sample_keeps_identity_and_scoring_fields(release: Path) -> None:
    sample = load(release, "retrieval-text")
    doc = document(sample)
    sel = select(doc, [0.1, 1.0, 0, 0.7, 0.8, 0.6, 0, 0.2, 0.3, 0], [3, 6, 0, 4, 3, 0, 2, 0], max_tokens=10)
    reduced = reduced_sample(sample, doc, sel)
    assert (reduced.id, reduced.answer, reduced.context_length, reduced.placed_depth) == (
        sample.id,
        sample.answer,
        sample.context_length,
        sample.placed_depth,
    )
    assert reduced.images == []
    assert sample.text().startswith("Filler about weather.")  # the original is untouched


# --- failures ------------------------------------------------------------------------------------


def test_a_server_without_tokenize_is_told_in_one_sentence() -> None:
    async def go(server: SimulatedServer) -> None:
        emb = embedder(server)
        try:
            await emb.check()
        finally:
            await emb.aclose()

    with embedding_server(tokenize=False) as server, pytest.raises(DataError) as err:
        asyncio.run(go(server))
    message = str(err.value)
    assert message == (
        f"the embedding server {server.url} has no /tokenize endpoint, which counts the tokens of the text pieces; "
        "serve the embedding model with vLLM, or use --embed-backend transformers"
    )


def test_an_unreachable_embedding_server_is_told_in_one_sentence() -> None:
    with embedding_server() as server:
        url = server.url
    emb = ServedEmbedder(EMBED_MODEL, url)
    with pytest.raises(DataError, match=r"^cannot reach the embedding server .*; start it or fix --embed-url$"):
        asyncio.run(emb.check(timeout_s=2))


def test_transient_failures_are_retried_and_rejections_are_not() -> None:
    async def embed(server: SimulatedServer) -> Any:
        emb = embedder(server)
        try:
            return await emb.embed_texts(["penguin", "alpha"])
        finally:
            await emb.aclose()

    with embedding_server(embed_faults=["503", "429"]) as server:
        vectors = asyncio.run(embed(server))
        assert len(server.bodies("embeddings")) == 3
    assert vectors.shape == (2, 3) and float(vectors[0] @ vectors[1]) == pytest.approx(0.8, abs=1e-6)
    with embedding_server(embed_faults=["400"]) as server, pytest.raises(RequestError) as err:
        asyncio.run(embed(server))
    assert err.value.kind == REQUEST_REJECTED and len(server.bodies("embeddings")) == 1
    with embedding_server(embed_faults=["500", "500", "500"]) as server, pytest.raises(RequestError) as err:
        asyncio.run(embed(server))
    assert err.value.kind == BACKEND_ERROR and "gave up after 3 attempts" in str(err.value)


def test_rejections_are_classified_and_scrubbed_and_long_waits_refused() -> None:
    key = "sk-embed-secret-1234"

    async def embed(server: SimulatedServer) -> Any:
        emb = ServedEmbedder(EMBED_MODEL, server.url, api_key=key, retry=RetryPolicy(max_retries=2, base_s=0.01, max_wait_s=5))
        try:
            return await emb.embed_texts(["penguin"])
        finally:
            await emb.aclose()

    with embedding_server(embed_faults=["context"]) as server, pytest.raises(RequestError) as err:
        asyncio.run(embed(server))
    assert err.value.kind == CONTEXT_TOO_LONG  # vLLM's 400 "maximum context length" body
    with embedding_server(embed_faults=["echo"]) as server, pytest.raises(RequestError) as err:
        asyncio.run(embed(server))  # a 400 whose body repeats the Authorization header
    assert err.value.kind == REQUEST_REJECTED
    assert key not in str(err.value) and "[redacted]" in str(err.value)
    with embedding_server(embed_faults=["429long"]) as server, pytest.raises(RequestError) as err:
        asyncio.run(embed(server))
    assert err.value.kind == BACKEND_ERROR and "not waited for" in str(err.value)
    assert len(server.bodies("embeddings")) == 1


def test_requests_in_flight_are_bounded() -> None:
    async def count(server: SimulatedServer) -> list[int]:
        emb = embedder(server, tokenize_concurrency=3)
        try:
            return await emb.count_tokens([f"word {'x ' * i}" for i in range(12)])
        finally:
            await emb.aclose()

    with embedding_server(tokenize_delay_s=0.05) as server:
        counts = asyncio.run(count(server))
    assert counts == [1 + i for i in range(12)]
    assert server.peak == 3


def test_tokenize_url_sits_beside_v1() -> None:
    assert tokenize_url("http://h:8000/v1") == "http://h:8000/tokenize"
    assert tokenize_url("http://h:8000/v1/") == "http://h:8000/tokenize"
    assert tokenize_url("http://h:8000/embed/v1") == "http://h:8000/embed/tokenize"
    assert tokenize_url("http://h:8000") == "http://h:8000/tokenize"
