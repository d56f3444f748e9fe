"""MM-NIAH's RAG baseline against a real vLLM embedding server: the tiny random Qwen2.5-VL served
with vLLM's pooling runner (`--runner pooling --convert embed`, vLLM 0.32's flags), which answers
`/tokenize`, text `input` lists and chat-style image `messages` on `/v1/embeddings`. The chat
model is the simulated one (one vLLM server at a time is enough here).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from needlepoint.benchmarks.mm_niah import demo as demo_niah
from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.rag import IMAGE_TOKENS, document, select
from needlepoint.benchmarks.mm_niah.rag_solver import RagSolver
from needlepoint.benchmarks.mm_niah.retrieve import PieceScores
from needlepoint.core.conversation import ImageRef
from needlepoint.models.embeddings import ServedEmbedder
from needlepoint.models.simulated import SimulatedServer

from .conftest import VllmServer, needlepoint, start_servers

pytestmark = pytest.mark.vllm

EMBED_NAME = "tiny/qwen2.5-vl-embed"
POOLING = ["--runner", "pooling", "--convert", "embed"]


@pytest.fixture(scope="module")
def embed_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    logs = tmp_path_factory.mktemp("vllm-embed-logs")
    server = VllmServer(tiny_model, logs / "embed.log", max_model_len=2048, served_name=EMBED_NAME, extra_args=POOLING)
    start_servers([server])
    yield server
    server.stop()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _with(embedder: ServedEmbedder, make: Any) -> Any:
    try:
        return await make(embedder)
    finally:
        await embedder.aclose()


def test_tokenize_counts_are_the_model_tokenizer_s(embed_server: VllmServer, tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    texts = ["The penguin sings loudly at dawn.", "", " Alpha notes follow here.", "summarize:", "x" * 50]

    async def go(e: ServedEmbedder) -> list[int]:
        await e.check()
        return await e.count_tokens(texts)

    got = _run(_with(ServedEmbedder(EMBED_NAME, embed_server.url), go))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    assert got == [len(tokenizer(t, add_special_tokens=False).input_ids) for t in texts]
    assert got[1] == 0 and all(n > 0 for i, n in enumerate(got) if i != 1)


def test_text_and_image_embeddings(embed_server: VllmServer, tmp_path: Path) -> None:
    refs = []
    for name, rgb in {"red": (220, 20, 20), "blue": (20, 20, 220)}.items():
        Image.new("RGB", (64, 48), rgb).save(tmp_path / f"{name}.png")
        refs.append(ImageRef(key=f"{name}.png", path=tmp_path / f"{name}.png"))
    texts = ["summarize:The penguin sings.", "summarize:", "summarize:Alpha notes follow here.", "summarize:The penguin sings."]

    async def go(e: ServedEmbedder) -> tuple[Any, Any, Any]:
        together = await e.embed_texts(texts)
        alone = np.concatenate([await e.embed_texts([t]) for t in texts[:3]])
        images = await e.embed_images([refs[0], refs[1], refs[0]])
        return together, alone, images

    together, alone, images = _run(_with(ServedEmbedder(EMBED_NAME, embed_server.url, batch_size=2), go))
    assert together.shape == (4, 128) and images.shape == (3, 128)  # the tiny model's hidden size
    assert np.allclose(np.linalg.norm(np.concatenate([together, images]), axis=1), 1.0, atol=1e-5)
    assert np.allclose(together[:3], alone, atol=1e-4)  # batching does not change a text's vector
    assert np.allclose(together[0], together[3]) and not np.allclose(together[0], together[2], atol=1e-3)
    assert np.allclose(images[0], images[2], atol=1e-4) and not np.allclose(images[0], images[1], atol=1e-3)


def test_rag_run_through_the_cli(embed_server: VllmServer, tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    data = demo_niah.write_release(tmp_path / "niah", per_task=2)
    out = tmp_path / "run"
    with SimulatedServer(default="3") as chat:
        args = [
            "eval",
            "mm_niah",
            "--data",
            str(data),
            "--model",
            "needlepoint-simulated",
            "--api-url",
            chat.url,
            "--solver",
            "rag",
            "--embed-model",
            EMBED_NAME,
            "--embed-url",
            embed_server.url,
            "--rag-max-tokens",
            "300",
            "--out",
            str(out),
            "--no-progress",
            "--no-report",
        ]
        proc = needlepoint(args)
        assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]
    assert len(records) == 12 and all(r["status"] == "done" for r in records)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    samples = {s.id: s for s in MmNiah(split="val").load(data)}
    for rec in records:
        sample = samples[rec["id"]]
        doc = document(sample)
        cached = PieceScores.from_dict(json.loads((out / "cache" / "rag" / RagSolver.cache_name(sample)).read_text()))
        # vLLM's /tokenize counts are the tokenizer's, and what was kept follows the authors' rules
        # from the cached scores; the kept token count is 256 an image, a text's tokens plus one.
        assert cached.token_counts == [len(tokenizer(p, add_special_tokens=False).input_ids) for p in doc.text_pieces]
        sel = select(doc, cached.scores, cached.token_counts, 300, 0)
        kept = [i for a, b in rec["solver"]["rag"]["kept"] for i in range(a, b + 1)]
        assert kept == list(sel.kept) and rec["solver"]["rag"]["tokens_kept"] == sel.tokens
        counts = iter(cached.token_counts)
        costs = [IMAGE_TOKENS if doc.is_image(i) else next(counts) + 1 for i in range(len(doc.pieces))]
        assert sel.tokens == sum(costs[i] for i in kept)
    assert any(r["solver"]["rag"]["pieces_kept"] < r["solver"]["rag"]["pieces"] for r in records)  # the budget bit
    assert json.loads((out / "run.json").read_text())["model_label"] == "needlepoint-simulated-RAG"


def test_an_unserved_embedding_model_is_one_sentence(embed_server: VllmServer, tmp_path: Path) -> None:
    data = demo_niah.write_release(tmp_path / "niah", per_task=1)
    with SimulatedServer() as chat:
        proc = needlepoint(
            [
                "eval",
                "mm_niah",
                "--data",
                str(data),
                "--model",
                "needlepoint-simulated",
                "--api-url",
                chat.url,
                "--solver",
                "rag",
                "--embed-model",
                "not/served",
                "--embed-url",
                embed_server.url,
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
            ]
        )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"the embedding server {embed_server.url} does not serve 'not/served'" in proc.stderr
    assert "pass the name it serves to --embed-model" in proc.stderr and not (tmp_path / "run").exists()


def test_a_tokenizer_json_that_counts_otherwise_than_tokenize_is_refused(
    embed_server: VllmServer, tiny_model: Path, tmp_path: Path
) -> None:
    """`--embed-tokenizer` against the tiny model's `/tokenize`: its tokenizer.json read by the
    `tokenizers` package alone keeps a run of digits together ("Ġ12") where transformers' Qwen2
    tokenizer, which vLLM counts with, splits single digits. Text without digits counts the same,
    piece for piece; with digits the counts differ, and the served embedder's check refuses the
    file in one sentence instead of selecting with wrong counts."""
    from needlepoint.core.errors import DataError
    from needlepoint.models.tokencount import LocalTokenizer

    data = demo_niah.write_release(tmp_path / "niah", per_task=2)
    pieces = list(dict.fromkeys(p for s in MmNiah(split="val").load(data) for p in document(s).text_pieces))
    plain = [p for p in pieces if not any(c.isdigit() for c in p)]
    assert len(plain) >= 10 and len(plain) < len(pieces)
    local = LocalTokenizer(str(tiny_model))

    async def served(e: ServedEmbedder) -> list[int]:
        return await e.count_tokens(pieces)

    counts = _run(_with(ServedEmbedder(EMBED_NAME, embed_server.url), served))
    by_piece = dict(zip(pieces, counts, strict=True))
    assert [by_piece[p] for p in plain] == local.count(plain)
    assert counts != local.count(pieces)  # the pieces with numbers

    async def checked(e: ServedEmbedder) -> None:
        await e.check()

    with pytest.raises(DataError, match=r"counts \d+ tokens in .* where the server's /tokenize counts \d+"):
        _run(_with(ServedEmbedder(EMBED_NAME, embed_server.url, tokenizer=local), checked))


def test_the_tokenizer_loaded_with_transformers_counts_as_tokenize_and_selects_the_same(
    embed_server: VllmServer, tiny_model: Path, tmp_path: Path
) -> None:
    """`--embed-tokenizer FOLDER` loads the tiny model's tokenizer with transformers' AutoTokenizer,
    as vLLM does: its counts equal `/tokenize`'s piece for piece, digits included (where the
    tokenizer.json alone differs, see the test above), and a run selects what a run counting with
    `/tokenize` selects, asking `/tokenize` only the start's probes."""
    from needlepoint.models.tokencount import load_tokenizer

    data = demo_niah.write_release(tmp_path / "niah", per_task=2)
    pieces = list(dict.fromkeys(p for s in MmNiah(split="val").load(data) for p in document(s).text_pieces))
    pieces += [
        "In 2024, 12,345 penguins (3.5%) sang 1000000 times; call 555-0199!",
        "东京和北京的企鹅在黎明时唱歌。 日本語のテキスト、句読点！",
        "Look at <image> and <|image_pad|> then <|vision_start|><|vision_end|>.",
        ' "Quotes" -- dashes... ellipses?! [brackets] {braces} #hash @at $5.00\n\n\ttab',
        "x" * 50 + " 007 0.0001 1e-9",
    ]
    local = load_tokenizer(str(tiny_model))
    assert local is not None and local.via == "transformers"

    async def served(e: ServedEmbedder) -> list[int]:
        return await e.count_tokens(pieces)

    counts = _run(_with(ServedEmbedder(EMBED_NAME, embed_server.url), served))
    assert local.count(pieces) == counts  # piece for piece
    assert any(c.isdigit() for p in pieces for c in p) and all(n > 0 for p, n in zip(pieces, counts) if p)

    def run(out: Path, *extra: str) -> dict[str, Any]:
        with SimulatedServer(default="3") as chat:
            args = [
                "eval", "mm_niah", "--data", str(data), "--model", "needlepoint-simulated", "--api-url", chat.url,
                "--solver", "rag", "--embed-model", EMBED_NAME, "--embed-url", embed_server.url,
                "--rag-max-tokens", "300", "--out", str(out), "--no-progress", "--no-report", *extra,
            ]  # fmt: skip
            proc = needlepoint(args)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]
        return {r["id"]: r["solver"]["rag"] for r in rows}

    by_tokenize = run(tmp_path / "served")
    by_tokenizer = run(tmp_path / "local", "--embed-tokenizer", str(tiny_model))
    assert len(by_tokenize) == 12 and by_tokenizer == by_tokenize
    assert (tmp_path / "served" / "cache" / "token_counts.jsonl").is_file()
    assert not (tmp_path / "local" / "cache" / "token_counts.jsonl").exists()  # nothing was paid for
