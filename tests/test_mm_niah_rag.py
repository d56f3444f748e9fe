"""MM-NIAH's RAG baseline, the retrieval half: hand-made rows in the release layout, loaded by the
real loader, embedded by a real HTTP embedding server on 127.0.0.1, selected by the authors'
rules (docs/protocols/mm-niah.md, "The retrieval baseline"), and turned into the prompt the model would get.

The server embeds deterministically: a text's vector is set by the keywords it contains, an
image's by its dominant colour, so every piece's cosine with the question is known by hand;
`/tokenize` counts whitespace-separated words. Expected selections are worked out below from the
rules, piece by piece.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

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
from needlepoint.conversation import ImageRef
from needlepoint.errors import DataError
from needlepoint.models.embeddings import EmbeddingError, ServedEmbedder, tokenize_url
from needlepoint.models.openai_compat import RetryPolicy
from needlepoint.status import BACKEND_ERROR, CONTEXT_TOO_LONG, REQUEST_REJECTED

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


def text_vector(text: str) -> list[float]:
    low = text.lower()
    hits = [v for k, v in TEXT_VECTORS.items() if k in low]
    assert len(hits) <= 1, f"a test text should carry one keyword at most: {text!r}"
    return hits[0] if hits else OTHER


def image_vector(data_url: str) -> list[float]:
    assert data_url.startswith("data:image/jpeg;base64,")
    im = Image.open(io.BytesIO(base64.b64decode(data_url.split(",", 1)[1]))).convert("RGB")
    mean = list(im.resize((1, 1), Image.Resampling.BOX).getpixel((0, 0)))  # type: ignore[arg-type]
    return IMAGE_VECTORS[("red", "green", "blue")[mean.index(max(mean))]]


@dataclass
class EmbeddingServer:
    """vLLM's embedding endpoints on 127.0.0.1 in a background thread: `/v1/embeddings` (text
    `input` lists, chat-style image `messages`) and, unless `tokenize` is False, `/tokenize`.
    `faults` are HTTP statuses answered to the first embedding requests, one each."""

    tokenize: bool = True
    faults: list[int] = field(default_factory=list)
    fault_body: str = "simulated fault"
    retry_after: str | None = None
    delay_s: float = 0.0
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    port: int = 0
    in_flight: int = 0
    peak: int = 0  # the most requests handled at once

    def __post_init__(self) -> None:
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> EmbeddingServer:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._setup())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _setup(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=1 << 26)
        app.router.add_post("/v1/embeddings", self._embeddings)
        if self.tokenize:
            app.router.add_post("/tokenize", self._tokenize)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _embeddings(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.json()
        self.requests.append(("embeddings", body))
        if self.faults:
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            return web.Response(status=self.faults.pop(0), text=self.fault_body, headers=headers)
        if "messages" in body:
            (part,) = body["messages"][0]["content"]
            vectors = [image_vector(part["image_url"]["url"])]
        else:
            vectors = [text_vector(t) for t in body["input"]]
        # Unnormalised on purpose: the client normalises.
        data = [{"index": i, "object": "embedding", "embedding": [3.0 * x for x in v]} for i, v in enumerate(vectors)]
        return web.json_response({"object": "list", "data": data, "model": body["model"]})

    async def _tokenize(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.json()
        self.requests.append(("tokenize", body))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(self.delay_s)
        self.in_flight -= 1
        n = len(body["prompt"].split())
        return web.json_response({"count": n, "max_model_len": 77, "tokens": list(range(n))})

    def bodies(self, kind: str) -> list[dict[str, Any]]:
        return [b for k, b in self.requests if k == kind]


# --- hand-made rows in the release layout ------------------------------------------------------

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


def niah_row(
    rid: int, context: str, question: str, images: list[str], answer: Any, needles: list[Any], **meta: Any
) -> dict[str, Any]:
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


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """A val split with one retrieval-text row (DOC) and one reasoning-image row whose question
    holds an image and whose options are images."""
    folder = tmp_path / "mm_niah_val"
    (folder / "annotations").mkdir(parents=True)
    (folder / "images").mkdir()
    for name, rgb in COLOURS.items():
        Image.new("RGB", (48, 40), rgb).save(folder / "images" / f"{name}.png")
    text_row = niah_row(
        7, DOC + "</s>", QUESTION, ["red.png", "blue.png"], "sings", [NEEDLE, "Gamma closes.", 3, "red.png", "gone.png"]
    )
    image_row = niah_row(
        9,
        "Alpha notes.<image>Weather report.",
        "Look at <image> and find the penguin. Which option matches?",
        ["red.png", "green.png"],
        0,
        [],
        choices_image_path=["blue.png", "red.png"],
    )
    (folder / "annotations" / "retrieval-text.jsonl").write_text(json.dumps(text_row) + "\n", encoding="utf-8")
    (folder / "annotations" / "reasoning-image.jsonl").write_text(json.dumps(image_row) + "\n", encoding="utf-8")
    return folder


def load(release: Path, task: str) -> Any:
    (sample,) = MmNiah(tasks=[task]).load(release)
    return sample


def embedder(server: EmbeddingServer, **kwargs: Any) -> ServedEmbedder:
    return ServedEmbedder(EMBED_MODEL, server.url, retry=RetryPolicy(max_retries=2, base_s=0.01, cap_s=0.02), **kwargs)


async def _retrieve(sample: Any, server: EmbeddingServer, max_tokens: int = 8192, min_images: int = 0, **kwargs: Any) -> Any:
    emb = embedder(server, **kwargs)
    try:
        await emb.check()
        return await retrieve(sample, emb, max_tokens, min_images)
    finally:
        await emb.aclose()


def run_retrieve(sample: Any, server: EmbeddingServer, **kwargs: Any) -> Any:
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
    with EmbeddingServer() as server:
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
    with EmbeddingServer() as server:
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
    with EmbeddingServer() as server:
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
    with EmbeddingServer() as server:
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
    with EmbeddingServer() as server:
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
    counted = server.bodies("tokenize")[1:]
    assert all(b == {"model": EMBED_MODEL, "prompt": b["prompt"], "add_special_tokens": False} for b in counted)
    assert sorted(b["prompt"] for b in counted) == sorted(p for p in document(sample).text_pieces if p)  # never ""


def test_scores_are_cosines_with_the_question(release: Path) -> None:
    sample = load(release, "retrieval-text")
    doc = document(sample)

    async def go(server: EmbeddingServer) -> PieceScores:
        emb = embedder(server)
        try:
            return await score_document(doc, emb)
        finally:
            await emb.aclose()

    with EmbeddingServer() as server:
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
    async def go(server: EmbeddingServer) -> None:
        emb = embedder(server)
        try:
            await emb.check()
        finally:
            await emb.aclose()

    with EmbeddingServer(tokenize=False) as server, pytest.raises(DataError) as err:
        asyncio.run(go(server))
    message = str(err.value)
    assert message == (
        f"the embedding server {server.url} has no /tokenize endpoint, which counts the tokens of the text pieces; "
        "serve the embedding model with vLLM, or use --embed-backend transformers"
    )


def test_an_unreachable_embedding_server_is_told_in_one_sentence() -> None:
    with EmbeddingServer() as server:
        url = server.url
    emb = ServedEmbedder(EMBED_MODEL, url)
    with pytest.raises(DataError, match=r"^cannot reach the embedding server .*; start it or fix --embed-url$"):
        asyncio.run(emb.check(timeout_s=2))


def test_transient_failures_are_retried_and_rejections_are_not() -> None:
    async def embed(server: EmbeddingServer) -> Any:
        emb = embedder(server)
        try:
            return await emb.embed_texts(["penguin", "alpha"])
        finally:
            await emb.aclose()

    with EmbeddingServer(faults=[503, 429]) as server:
        vectors = asyncio.run(embed(server))
        assert len(server.bodies("embeddings")) == 3
    assert vectors.shape == (2, 3) and float(vectors[0] @ vectors[1]) == pytest.approx(0.8, abs=1e-6)
    with EmbeddingServer(faults=[400]) as server, pytest.raises(EmbeddingError) as err:
        asyncio.run(embed(server))
    assert err.value.kind == REQUEST_REJECTED and len(server.bodies("embeddings")) == 1
    with EmbeddingServer(faults=[500, 500, 500]) as server, pytest.raises(EmbeddingError) as err:
        asyncio.run(embed(server))
    assert err.value.kind == BACKEND_ERROR and "gave up after 3 attempts" in str(err.value)


def test_rejections_are_classified_and_scrubbed_and_long_waits_refused() -> None:
    key = "sk-embed-secret-1234"

    async def embed(server: EmbeddingServer) -> Any:
        emb = ServedEmbedder(EMBED_MODEL, server.url, api_key=key, retry=RetryPolicy(max_retries=2, base_s=0.01, max_wait_s=5))
        try:
            return await emb.embed_texts(["penguin"])
        finally:
            await emb.aclose()

    body = json.dumps({"error": {"message": f"This model's maximum context length is 77 tokens (Authorization: Bearer {key})"}})
    with EmbeddingServer(faults=[400], fault_body=body) as server, pytest.raises(EmbeddingError) as err:
        asyncio.run(embed(server))
    assert err.value.kind == CONTEXT_TOO_LONG
    assert key not in str(err.value) and "[redacted]" in str(err.value)
    with EmbeddingServer(faults=[429], retry_after="600") as server, pytest.raises(EmbeddingError) as err:
        asyncio.run(embed(server))
    assert err.value.kind == BACKEND_ERROR and "not waited for" in str(err.value)
    assert len(server.bodies("embeddings")) == 1


def test_requests_in_flight_are_bounded() -> None:
    async def count(server: EmbeddingServer) -> list[int]:
        emb = embedder(server, tokenize_concurrency=3)
        try:
            return await emb.count_tokens([f"word {'x ' * i}" for i in range(12)])
        finally:
            await emb.aclose()

    with EmbeddingServer(delay_s=0.05) as server:
        counts = asyncio.run(count(server))
    assert counts == [1 + i for i in range(12)]
    assert server.peak == 3


def test_tokenize_url_sits_beside_v1() -> None:
    assert tokenize_url("http://h:8000/v1") == "http://h:8000/tokenize"
    assert tokenize_url("http://h:8000/v1/") == "http://h:8000/tokenize"
    assert tokenize_url("http://h:8000/embed/v1") == "http://h:8000/embed/tokenize"
    assert tokenize_url("http://h:8000") == "http://h:8000/tokenize"
