"""`--solver rag` for MM-NIAH end to end through the CLI: hand-made rows in the release layout, a
real embedding server on 127.0.0.1 (the simulated one with tests/helpers/rag.py's keyword vectors)
and the simulated chat model. What the model is asked, what the record keeps, the cache that
spares a resumed run the embedding, the metrics, the report and the leaderboard name.

The scores, costs and selections of DOC are worked out piece by piece in test_mm_niah_rag.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import report_blob as blob
from helpers import small_niah
from helpers.rag import EMBED_MODEL, QUESTION, embedding_server, write_rag_release

from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.data import OPEN_SENTENCE, OPTION_SENTENCE
from needlepoint.benchmarks.mm_niah.rag_results import context_parts, needle_shares
from needlepoint.benchmarks.mm_niah.rag_solver import RagSolver, kept_ranges
from needlepoint.cli import main
from needlepoint.core import status
from needlepoint.core.errors import DataError
from needlepoint.core.store import read_records
from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME, SimulatedServer

MODEL = "sim-model"
KEPT_TEXT = " The penguin sings loudly at dawn.Alpha notes follow here."  # DOC's pieces 1 and 4, budget 10


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """A val split: DOC as retrieval-text row 7, and a reasoning-image row whose question holds an
    image and whose options are images (the rows of test_mm_niah_rag)."""
    return write_rag_release(tmp_path / "mm_niah_val")


def _args(release: Path, chat: Any, embed_url: str, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "mm_niah",
        "--data",
        str(release),
        "--model",
        MODEL,
        "--api-url",
        chat.url,
        "--solver",
        "rag",
        "--embed-model",
        EMBED_MODEL,
        "--embed-url",
        embed_url,
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


def _texts_embedded(server: SimulatedServer) -> list[str]:
    """Every text the server embedded except check()'s probe."""
    return [t for b in server.bodies("embeddings") if "input" in b for t in b["input"] if t != "summarize:"]


def _parts(body: dict[str, Any]) -> list[str]:
    """A chat request's user content: texts as they are, images as "IMG"."""
    (msg,) = body["messages"]
    if isinstance(msg["content"], str):
        return [msg["content"]]
    return [p["text"] if p["type"] == "text" else "IMG" for p in msg["content"]]


def test_rag_run_asks_the_model_about_the_kept_pieces_and_records_them(
    serve: Any, release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = serve(default="sings")
    out = tmp_path / "run"
    with embedding_server() as emb:
        assert main(_args(release, chat, emb.url, out, "--rag-max-tokens", "10")) == 0
    asked = {json.dumps(_parts(body)): body for _, body in chat.requests}
    # Row 7: pieces 1 and 4 (the budget is checked before adding, so piece 4 overshoots it).
    assert json.dumps([KEPT_TEXT + "\n" + QUESTION + OPEN_SENTENCE]) in asked
    # Row 9: "Alpha notes." (0.8, 3 tokens), then the red context image (0.7, 256) although it
    # overshoots; then the budget is spent. The question's and the options' images follow, in order.
    image_row = next(b for b in asked.values() if "IMG" in _parts(b))
    assert _parts(image_row) == [
        "Alpha notes.",
        "IMG",
        "\nLook at ",
        "IMG",
        " and find the penguin. Which option matches?\nA. ",
        "IMG",
        "\nB. ",
        "IMG",
        OPTION_SENTENCE,
    ]

    records = read_records(out / "records.jsonl")
    rec = records["retrieval-text/7"]
    assert rec["status"] == status.DONE and rec["scores"]["score"] == 1.0
    assert [t["role"] for t in rec["turns"]] == ["tool", "model"] and rec["turns"][0]["tool"] == "embed"
    rag = rec["solver"]["rag"]
    assert {k: rag[k] for k in ("pieces", "pieces_kept", "images", "images_kept", "question_images", "tokens_kept", "kept")} == {
        "pieces": 10,
        "pieces_kept": 2,
        "images": 2,
        "images_kept": 0,
        "question_images": 0,
        "tokens_kept": 12,
        "kept": [[1, 1], [4, 4]],
    }
    assert rag["needles_kept"] is False  # "Gamma closes." (piece 8, rank 5) was dropped
    assert [(n["index"], n["ranks"], n["kept"]) for n in rag["needles"]] == [(0, [1], True), (1, [5], False), (2, [], None)]
    assert rec["solver"]["embedding"] == {
        "backend": "served",
        "model": EMBED_MODEL,
        "texts": 9,
        "images": 2,
        "counted": 5,
        "cached": False,
    }
    image_rec = records["reasoning-image/9"]["solver"]["rag"]
    assert (image_rec["question_images"], image_rec["images_kept"], image_rec["tokens_kept"]) == (3, 1, 259)
    assert image_rec["kept"] == [[0, 0], [2, 2]] and image_rec["needles_kept"] is None

    header = json.loads((out / "run.json").read_text())
    assert header["model_label"] == f"{MODEL}-RAG"
    assert header["identity"]["solver"] == "rag" and header["identity"]["solver.max_tokens"] == 10
    assert header["identity"]["solver.embed_model"] == EMBED_MODEL and "solver.embed_url" not in header["identity"]
    assert (out / "leaderboard" / f"{MODEL}-RAG_retrieval-text-val.jsonl").is_file()
    assert len(list((out / "cache" / "rag").glob("*.json"))) == 2

    metrics = json.loads((out / "metrics.json").read_text())
    rag_m = metrics["rag"]
    assert rag_m["context_ranges"] == ["1k"] and rag_m["overall"]["n_not_located"] == 1
    assert rag_m["tasks"]["retrieval-text"]["shares"] == [0.0] and rag_m["overall"]["n_located"] == 1
    assert rag_m["tasks"]["reasoning-image"] == {
        "shares": [None],
        "kept": [0],
        "located": [0],
        "overall": None,
        "n_kept": 0,
        "n_located": 0,
        "n_not_located": 1,
    }
    assert "MM-NIAH RAG: samples whose needles were kept" in capsys.readouterr().out

    data = blob(out / "report" / "index.html")
    card = next(it for it in data["items"] if it["id"] == "retrieval-text/7")
    assert card["x"] == [[" The penguin sings loudly at dawn.", True], ["Alpha notes follow here.", False]]
    assert dict(card["f"])["needle"] == "dropped" and card["k"]["needle"] == "dropped"
    needle_filter = next(f for f in data["filters"] if f["key"] == "needle")
    assert needle_filter["values"] == [["dropped", 1], ["not located", 1]]

    board = tmp_path / "board"
    assert main(["report", str(out), "--with-published", "--out", str(board)]) == 0
    text = (board / "leaderboard.md").read_text()
    assert f"{MODEL}-RAG" in text and "InternVL-1.5-RAG" in text and "InternVL-Chat-V1-5-RAG" in text


def test_a_resumed_run_does_not_embed_again(serve: Any, release: Path, tmp_path: Path) -> None:
    chat = serve(default="sings", failing=True)
    out = tmp_path / "run"
    with embedding_server() as emb:
        assert main(_args(release, chat, emb.url, out, "--max-retries", "0", "--no-report")) == 3
        records = read_records(out / "records.jsonl")
        assert {r["status"] for r in records.values()} == {status.BACKEND_ERROR}
        embedded, counted = len(_texts_embedded(emb)), len(emb.bodies("tokenize"))
        images = sum(1 for b in emb.bodies("embeddings") if "messages" in b)
        assert embedded == 6 + 3 and images == 3  # both documents were embedded once (the question and each distinct piece)
        chat.failing = False
        assert main(_args(release, chat, emb.url, out, "--retry-failed", "--no-report")) == 0
        # Only check()'s probe again (one /tokenize); no piece, question or image embedded again.
        assert len(_texts_embedded(emb)) == embedded and len(emb.bodies("tokenize")) == counted + 1
        assert sum(1 for b in emb.bodies("embeddings") if "messages" in b) == images
    records = read_records(out / "records.jsonl")
    assert {r["status"] for r in records.values()} == {status.DONE}
    assert all(r["solver"]["embedding"]["cached"] for r in records.values())
    assert [t["role"] for t in records["retrieval-text/7"]["turns"]] == ["model"]  # no embedding call this time
    assert records["retrieval-text/7"]["solver"]["rag"]["kept"] == [[0, 9]]  # the default budget keeps all


def test_a_server_without_tokenize_is_one_sentence_and_no_run_folder(
    serve: Any, release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = serve(default="sings")
    out = tmp_path / "run"
    with embedding_server(tokenize=False) as emb:
        assert main(_args(release, chat, emb.url, out)) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"the embedding server {emb.url} has no /tokenize endpoint, which counts the tokens of the text pieces; "
        "serve the embedding model with vLLM, or use --embed-backend transformers"
    )
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists() and chat.requests == []


def test_a_model_the_embedding_server_does_not_serve_is_one_sentence(
    serve: Any, release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = serve(default="sings")
    with SimulatedServer() as emb:
        assert main(_args(release, chat, emb.url, tmp_path / "run")) == 2
    err = capsys.readouterr().err
    assert f"does not serve {EMBED_MODEL!r}" in err and "pass the name it serves to --embed-model" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--solver", "rag"], "--solver rag needs --embed-model"),
        (
            ["--solver", "rag", "--embed-model", "e"],
            "needs --embed-url (a served embedding model) or --embed-backend transformers",
        ),
        (["--solver", "rag", "--embed-model", "e", "--embed-backend", "served"], "--embed-backend served needs --embed-url"),
        (
            ["--solver", "rag", "--embed-model", "e", "--embed-url", "http://127.0.0.1:9/v1", "--embed-backend", "transformers"],
            "--embed-url applies to a served embedding model",
        ),
        (
            ["--embed-model", "e", "--embed-url", "http://127.0.0.1:9/v1"],
            "--embed-model applies to `needlepoint eval mm_niah --solver rag`",
        ),
    ],
)
def test_wrong_flags_are_one_sentence(
    release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    args = [
        "eval",
        "mm_niah",
        "--data",
        str(release),
        "--model",
        MODEL,
        "--api-url",
        "http://127.0.0.1:9/v1",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
        *extra,
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_budget_below_one_token_is_one_sentence(release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "eval",
        "mm_niah",
        "--data",
        str(release),
        "--model",
        MODEL,
        "--api-url",
        "http://127.0.0.1:9/v1",
        "--solver",
        "rag",
        "--embed-model",
        "e",
        "--embed-url",
        "http://127.0.0.1:9/v1",
    ]
    assert main([*base, "--rag-max-tokens", "-5"]) == 2
    assert capsys.readouterr().err == "needlepoint: error: --rag-max-tokens must be at least 1, not -5\n"
    assert main([*base, "--rag-max-tokens", "0"]) == 2  # no context kept: accepted once, then every sample failed
    assert capsys.readouterr().err == "needlepoint: error: --rag-max-tokens must be at least 1, not 0\n"
    assert main([*base, "--solver-option", "rag_min_images=1.5"]) == 2
    assert capsys.readouterr().err == "needlepoint: error: --rag-min-images must be a whole number, not 1.5\n"


def test_the_embedding_key_comes_from_the_environment_and_stays_off_disk(
    serve: Any, release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "sk-embed-only-4711"
    monkeypatch.setenv("NEEDLEPOINT_EMBED_API_KEY", key)
    chat = serve(default="sings")
    out = tmp_path / "run"

    def args(url: str, folder: Path) -> list[str]:
        return [
            "eval",
            "mm_niah",
            "--data",
            str(release),
            "--model",
            MODEL,
            "--api-url",
            chat.url,
            "--solver",
            "rag",
            "--embed-model",
            SIMULATED_EMBEDDER_NAME,
            "--embed-url",
            url,
            "--out",
            str(folder),
            "--no-progress",
        ]

    with SimulatedServer(api_key=key) as emb:
        assert main(args(emb.url, out)) == 0
        assert sum(1 for kind, _ in emb.embed_log if kind == "tokenize") > 1  # the key was accepted
    for path in out.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    monkeypatch.delenv("NEEDLEPOINT_EMBED_API_KEY")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with SimulatedServer(api_key=key) as emb:
        capsys.readouterr()
        assert main(args(emb.url, tmp_path / "other")) == 2  # no key: refused at the check
        assert emb.embed_log == []
    assert "refused the key (http_401); set NEEDLEPOINT_EMBED_API_KEY (or OPENAI_API_KEY)" in capsys.readouterr().err


class HoldingEmbeddingServer(SimulatedServer):
    """Holds every embedding request for DOC (the penguin document) until the chat model has been
    asked about the other row: only a solver that lets other samples' generation run while one
    sample embeds gets through."""

    chat: Any = None

    async def _embeddings(self, request: Any) -> Any:
        body = await request.json()
        texts = body.get("input") or []
        if any("penguin sings" in t for t in texts):
            for _ in range(400):
                if any("Which option matches?" in json.dumps(b) for _, b in self.chat.requests):
                    break
                await asyncio.sleep(0.025)
            else:
                from aiohttp import web

                return web.Response(status=400, text="held: the other sample's question never reached the model")
        return await super()._embeddings(request)


def test_generation_continues_while_a_sample_embeds(serve: Any, release: Path, tmp_path: Path) -> None:
    chat = serve(default="sings")
    out = tmp_path / "run"
    with embedding_server(HoldingEmbeddingServer) as emb:
        emb.chat = chat
        assert main(_args(release, chat, emb.url, out, "--concurrency", "2", "--no-report")) == 0
    records = read_records(out / "records.jsonl")
    assert {r["status"] for r in records.values()} == {status.DONE}


def test_helpers() -> None:
    assert kept_ranges([0, 1, 2, 5, 7, 8]) == [[0, 2], [5, 5], [7, 8]] and kept_ranges([]) == []
    pieces = ["a" * 1000, "needle.", "b", "<image>", "c"]
    parts = context_parts(pieces, {"kept": [[0, 1], [4, 4]], "needles": [{"pieces": [1]}]})
    assert parts[1:] == [("needle.", True), ("c", False)]
    assert parts[0][1] is False and parts[0][0].startswith("a" * 240 + " […] ") and len(parts[0][0]) < 600
    assert needle_shares([], [{"id": "x"}]) is None
    with pytest.raises(DataError, match="--embed-model"):
        RagSolver(MmNiah())
    assert RagSolver(MmNiah(), embed_model="e", embed_url="http://h/v1").label("org/m") == "org/m-RAG"


def test_the_demo_s_rag_run(tmp_path: Path) -> None:
    """benchmarks/mm_niah/rag_demo.py on the demo set at 6 documents per task: every reduced prompt
    has a scripted answer, and a needle dropped by retrieval is answered "I could not find it."."""
    from needlepoint.benchmarks.mm_niah.rag_demo import DEMO_MAX_TOKENS, rag_config
    from needlepoint.run.evaluate import evaluate

    data, options, script = small_niah(tmp_path / "data")
    with SimulatedServer(script=script, default=None) as server:
        result = evaluate(rag_config(data, options, server, tmp_path / "runs", concurrency=4, show_progress=False, report=False))
    assert result.failed == [] and result.run_dir == tmp_path / "runs" / "mm_niah_rag"
    records = read_records(result.run_dir / "records.jsonl")
    assert len(records) == 36 and all(r["solver"]["rag"]["max_tokens"] == DEMO_MAX_TOKENS for r in records.values())
    dropped = [r for r in records.values() if r["solver"]["rag"]["needles_kept"] is False]
    assert dropped and all(r["turns"][-1]["reply"] == "I could not find it." for r in dropped)
    assert json.loads((result.run_dir / "run.json").read_text())["model_label"] == "needlepoint-simulated-RAG"
    assert result.metrics["rag"]["overall"]["n_located"] == 24  # the text needles and reasoning-image's sentence
