"""Hostile embedding and `/tokenize` servers, hung ones, and the one HTTP layer under every client.

Every answer comes from the simulated server on 127.0.0.1 (models/simulated.py), which spoils its
answers as told (`embed_faults`, `tokenize_faults`). What must hold: a malformed answer is retried
and then fails as a retryable `backend_error` naming what was wrong, never as `internal_error`; it
is requested again on a rerun; `--timeout` bounds embedding and tokenize requests as it bounds chat
requests; a pasted `.../v1/chat/completions` URL is told to drop its path.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from needlepoint.cli import main
from needlepoint.core import status
from needlepoint.core.conversation import Conversation, Generation, ImageRef, Message
from needlepoint.core.errors import DataError, RequestError
from needlepoint.core.records import Record
from needlepoint.core.store import read_records
from needlepoint.models.embeddings import EMBEDDINGS, ServedEmbedder
from needlepoint.models.http import RetryPolicy
from needlepoint.models.openai_compat import OpenAICompatModel
from needlepoint.models.simulated import EMBED_DIM, OMIT, SIMULATED_EMBEDDER_NAME, SimulatedServer


def _embedder(server: SimulatedServer, **retry: Any) -> ServedEmbedder:
    policy = RetryPolicy(**{"max_retries": 1, "base_s": 0.01, "cap_s": 0.02, **retry})
    return ServedEmbedder(SIMULATED_EMBEDDER_NAME, server.url, retry=policy)


def _embed(server: SimulatedServer, call: Any, check: bool = True, **retry: Any) -> Any:
    """`await call(embedder)` after the endpoint check (the probe fixes the vectors' length)."""

    async def go() -> Any:
        emb = _embedder(server, **retry)
        try:
            if check:
                await emb.check()
            return await call(emb)
        finally:
            await emb.aclose()

    return asyncio.run(go())


def _requests(server: SimulatedServer, kind: str) -> int:
    return sum(1 for k, _ in server.embed_log if k == kind)


def test_one_failure_type_carries_its_kind() -> None:
    err = RequestError(status.CONTEXT_TOO_LONG, "too long")
    assert err.kind == status.CONTEXT_TOO_LONG and str(err) == "too long" and err.attempts == 1


# --- hostile embedding answers ---------------------------------------------------------------

HOSTILE_VECTORS = [
    ("wide", f"vector of {EMBED_DIM + 1} numbers where the probe had {EMBED_DIM}"),
    ("narrow", f"vector of {EMBED_DIM - 1} numbers where the probe had {EMBED_DIM}"),
    ("ragged", f"ragged vectors of {EMBED_DIM} and {EMBED_DIM + 1} numbers in one answer"),
    ("nan", "vector 0 holds nan, not a finite number"),
    ("inf", "vector 0 holds inf, not a finite number"),
    ("empty", "vector 0 has no numbers (a zero-length vector)"),
    ("bool", "vector 0 holds true, not a number"),
    ("text", "vector 0 holds '0.5', not a number"),
    ("short", "1 vectors for 2 inputs"),
    ("index", "vector indices [0, 0] for 2 inputs"),
    ("deep", "not JSON"),
    ("notjson", "not JSON"),
]


@pytest.mark.parametrize(("fault", "needle"), HOSTILE_VECTORS)
def test_a_hostile_embeddings_answer_is_a_retryable_backend_error(fault: str, needle: str) -> None:
    texts = ["the penguin sings", "alpha notes"]
    with SimulatedServer(embed_faults=["", fault, fault]) as server:  # the probe, then both attempts
        with pytest.raises(RequestError) as err:
            _embed(server, lambda e: e.embed_texts(texts))
        assert _requests(server, "embeddings") == 3  # the probe, and the request twice
    assert err.value.kind == status.BACKEND_ERROR and err.value.kind in status.RETRYABLE
    message = str(err.value)
    assert message.startswith("invalid_response: ") and needle in message and "gave up after 2 attempts" in message
    assert err.value.endpoint == server.url
    # once the server answers well again, the request is made again and used
    with SimulatedServer(embed_faults=["", fault]) as server:
        vectors = _embed(server, lambda e: e.embed_texts(texts))
        assert _requests(server, "embeddings") == 3
    assert vectors.shape == (2, EMBED_DIM) and np.isfinite(vectors).all()
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)


@pytest.mark.parametrize(("fault", "needle"), [("wide", "vector of 65 numbers where the probe had 64"), ("nan", "holds nan")])
def test_a_hostile_image_embedding_is_a_backend_error(fault: str, needle: str, tmp_path: Path) -> None:
    Image.new("RGB", (32, 24), (220, 30, 30)).save(tmp_path / "red.png")
    image = ImageRef(key="red.png", path=tmp_path / "red.png")
    with SimulatedServer(embed_faults=["", fault, fault]) as server, pytest.raises(RequestError) as err:
        _embed(server, lambda e: e.embed_images([image]))
    assert err.value.kind == status.BACKEND_ERROR and needle in str(err.value)
    assert "the vector" in str(err.value) or "numbers where" in str(err.value)


def test_without_the_probe_the_first_answer_fixes_the_length() -> None:
    async def twice(e: ServedEmbedder) -> Any:
        await e.embed_texts(["alpha"])
        return await e.embed_texts(["beta"])

    with SimulatedServer(embed_faults=["", "wide", "wide"]) as server, pytest.raises(RequestError) as err:
        _embed(server, twice, check=False)
    assert f"vector of {EMBED_DIM + 1} numbers where the first answer had {EMBED_DIM}" in str(err.value)


def test_an_all_zero_vector_is_used_and_warned_about_once(capsys: pytest.CaptureFixture[str]) -> None:
    async def twice(e: ServedEmbedder) -> Any:
        return await e.embed_texts(["alpha", "beta"]), await e.embed_texts(["gamma", "delta"])

    with SimulatedServer(embed_faults=["", "zeros", "zeros"]) as server:
        first, second = _embed(server, twice)
    assert not first[0].any() and not second[0].any()  # kept as zero: it scores 0 against every question
    assert np.linalg.norm(first[1]) == pytest.approx(1.0)
    err = capsys.readouterr().err
    assert err.count("all-zero vector") == 1 and server.url in err


def test_huge_components_do_not_overflow() -> None:
    from needlepoint.models.embeddings import normalise

    rows = normalise([[1e300, 1e300], [3e-30, 4e-30], [0.0, 0.0], [3.0, 4.0]])
    assert np.isfinite(rows).all()
    assert rows.ravel().tolist() == pytest.approx([2**-0.5, 2**-0.5, 0.6, 0.8, 0.0, 0.0, 0.6, 0.8])


# --- hostile /tokenize answers ---------------------------------------------------------------

HOSTILE_COUNTS = [
    ({"count": -1, "tokens": OMIT}, "a negative token count (-1)"),
    ({"count": 10**12, "tokens": OMIT}, "a token count of 1000000000000 for a text of 13 characters"),
    ({"count": 10**100, "tokens": OMIT}, "a token count of 1e+100 for a text of 13 characters"),
    ({"count": 10**400, "tokens": OMIT}, "a token count of a number of 401 digits"),
    ({"count": True}, "a token count of true, not a whole number"),
    ({"count": 1.5}, "a token count of 1.5, not a whole number"),
    ({"count": None}, "a token count of null, not a whole number"),
    ({"count": "2"}, "a token count of '2', not a whole number"),
    ({"count": 3, "tokens": [0, 1]}, "a token count of 3 beside a list of 2 tokens"),
    ({"count": OMIT, "tokens": OMIT}, "a /tokenize answer without a count"),
]


@pytest.mark.parametrize(("fault", "needle"), HOSTILE_COUNTS)
def test_a_hostile_token_count_is_a_retryable_backend_error(fault: dict[str, Any], needle: str) -> None:
    with SimulatedServer(tokenize_faults=[{}, fault, fault]) as server:  # the probe, then both attempts
        with pytest.raises(RequestError) as err:
            _embed(server, lambda e: e.count_tokens(["penguin sings", ""]))
        assert _requests(server, "tokenize") == 3
    assert err.value.kind == status.BACKEND_ERROR
    message = str(err.value)
    assert message.startswith("invalid_response: /tokenize answered") or "without a count" in message
    assert needle in message and len(message) < 400
    with SimulatedServer(tokenize_faults=[{}, fault]) as server:
        assert _embed(server, lambda e: e.count_tokens(["penguin sings", ""])) == [2, 0]


def test_a_count_over_max_model_len_is_taken() -> None:
    """vLLM does not truncate a /tokenize prompt: a long piece counts more than the model's length."""
    text = " ".join(["word"] * 600)
    with SimulatedServer() as server:
        assert _embed(server, lambda e: e.count_tokens([text])) == [600]  # the server says max_model_len 512


# --- the timeout bounds embedding and tokenize requests ---------------------------------------


@pytest.mark.parametrize("kind", ["embeddings", "tokenize"])
def test_timeout_bounds_embedding_and_tokenize_requests(kind: str) -> None:
    faults: dict[str, Any] = {"embed_faults": ["", "hang"]} if kind == "embeddings" else {"tokenize_faults": [{}, "hang"]}

    def call(e: ServedEmbedder) -> Any:
        return e.embed_texts(["alpha"]) if kind == "embeddings" else e.count_tokens(["alpha beta"])

    with SimulatedServer(**faults) as server, pytest.raises(RequestError) as err:
        _embed(server, call, max_retries=0, timeout_s=0.5)
    assert err.value.kind == status.BACKEND_ERROR
    assert str(err.value) == "timeout: no answer within 0.5 s (gave up after 1 attempts)"


def test_the_wait_note_names_a_request_that_hangs() -> None:
    async def go(server: SimulatedServer) -> tuple[str | None, str | None]:
        emb = _embedder(server, max_retries=0, timeout_s=60)
        now = [100.0]
        emb.transport.clock = lambda: now[0]
        task = asyncio.ensure_future(emb.embed_texts(["alpha"]))
        try:
            for _ in range(2000):
                await asyncio.sleep(0.005)
                if emb.transport._posted:
                    break
            early = emb.wait_note()
            now[0] = 142.0
            return early, emb.wait_note()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await emb.aclose()

    with SimulatedServer(embed_faults=["hang"]) as server:
        early, late = asyncio.run(go(server))
    assert early is None
    assert late == f"waiting 42 s for {EMBEDDINGS} from {server.url} (timeout 60 s)"


# --- through a run: never internal_error, requested again on a rerun ---------------------------

NEEDLE = "The penguin sings loudly at dawn."


def _release(folder: Path) -> Path:
    """One MM-NIAH retrieval-text row with one image, in the release layout."""
    (folder / "annotations").mkdir(parents=True)
    (folder / "images").mkdir()
    Image.new("RGB", (48, 40), (220, 20, 20)).save(folder / "images" / "red.png")
    row = {
        "id": 1,
        "images_list": ["red.png"],
        "context": f"Filler about weather. {NEEDLE}<image>Alpha notes.</s>",
        "question": "What does the penguin do at dawn?",
        "answer": "sings",
        "meta": {
            "placed_depth": 0.5,
            "context_length": 1500,
            "context_length_text": 1000,
            "context_length_image": 500,
            "num_images": 1,
            "needles": [NEEDLE],
            "choices": None,
            "choices_image_path": None,
        },
    }
    (folder / "annotations" / "retrieval-text.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    return folder


def _rag_args(data: Path, server: Any, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "mm_niah",
        "--data",
        str(data),
        "--model",
        "sim-model",
        "--api-url",
        server.url,
        "--solver",
        "rag",
        "--embed-model",
        SIMULATED_EMBEDDER_NAME,
        "--embed-url",
        server.url,
        "--out",
        str(out),
        "--no-progress",
        "--no-report",
        "--max-retries",
        "0",
        *extra,
    ]


@pytest.mark.parametrize(
    ("faults", "name"),
    [
        *(({"embed_faults": ["", f]}, f) for f, _ in HOSTILE_VECTORS),
        *(({"tokenize_faults": [{}, f]}, str(f)) for f, _ in HOSTILE_COUNTS),
    ],
)
def test_no_hostile_embedding_answer_makes_an_internal_error(
    serve: Any, tmp_path: Path, faults: dict[str, Any], name: str
) -> None:
    """The sample's record (runner.solve, as the run makes it) under each hostile answer: a
    `backend_error` saying what was wrong (which request meets the fault first, the texts' or the
    image's, is the loop's choice, so the message is checked by the tests above)."""
    from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
    from needlepoint.benchmarks.mm_niah.rag_solver import RagSolver
    from needlepoint.models.openai_compat import ClientSettings
    from needlepoint.run.runner import solve

    bench = MmNiah()
    (sample,) = bench.load(_release(tmp_path / "data"))
    server = serve(default="sings", **faults)
    retry = RetryPolicy(max_retries=0, timeout_s=5)
    solver = RagSolver(bench, embed_model=SIMULATED_EMBEDDER_NAME, embed_url=server.url, client=ClientSettings(retry))

    async def go() -> Record:
        model = OpenAICompatModel("sim-model", [server.url], retry=retry)
        try:
            await solver.embedder.check()
            return await solve(bench, solver, {"model": model}, sample, Generation(), tmp_path / "run")
        finally:
            await model.aclose()
            await solver.embedder.aclose()

    record = asyncio.run(go())
    assert record["status"] == status.BACKEND_ERROR and record["error"].startswith("invalid_response: "), (
        name,
        record.get("error"),
    )
    assert record["turns"][-1]["error_kind"] == status.BACKEND_ERROR and not record.get("traceback")


@pytest.mark.parametrize(
    ("faults", "needle"),
    [
        ({"embed_faults": ["", "hang"]}, "timeout: no answer within 1 s"),
        ({"tokenize_faults": [{}, {"count": -1}]}, "a negative token count (-1)"),
    ],
)
def test_a_hostile_embedding_server_fails_the_sample_retryably_and_a_rerun_asks_again(
    serve: Any, tmp_path: Path, faults: dict[str, Any], needle: str
) -> None:
    data = _release(tmp_path / "data")
    server = serve(default="sings", **faults)
    out = tmp_path / "run"
    assert main(_rag_args(data, server, out, "--timeout", "1")) == 3  # failed samples, not an internal fault
    (record,) = read_records(out / "records.jsonl").values()
    assert record["status"] == status.BACKEND_ERROR and needle in record["error"]
    (turn,) = record["turns"]
    assert turn["role"] == "tool" and turn["error_kind"] == status.BACKEND_ERROR and needle in (turn["error"] or "")
    assert not (out / "cache" / "rag").exists() or not any((out / "cache" / "rag").iterdir())  # nothing cached
    # the server answers well now: the rerun requests the embeddings again and answers the sample
    assert main(_rag_args(data, server, out, "--timeout", "1", "--retry-failed")) == 0
    (record,) = read_records(out / "records.jsonl").values()
    assert record["status"] == status.DONE and record["scores"]


# --- a pasted endpoint URL -----------------------------------------------------------------------


def test_a_pasted_chat_completions_url_is_told_to_drop_the_path(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = serve(default="sings")
    data = _release(tmp_path / "data")
    args = [
        "eval",
        "mm_niah",
        "--data",
        str(data),
        "--model",
        "sim-model",
        "--api-url",
        server.url + "/chat/completions",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].endswith(
        f"--api-url {server.url}/chat/completions ends in /chat/completions, the path needlepoint adds itself; "
        f"drop it: --api-url {server.url}"
    )
    assert "/v1/v1" not in err[0] and "lacks /v1" not in err[0]
    assert server.log == [] and not (tmp_path / "run").exists()


@pytest.mark.parametrize("tail", ["/chat/completions", "/chat/completions/", "/embeddings", "/models"])
def test_pasted_paths_keep_the_query_string_out_of_the_message(tail: str) -> None:
    url = "http://user:pw@h:8000/v1" + tail + "?api-version=2024"
    model = OpenAICompatModel("m", [url])
    with pytest.raises(DataError) as err:
        asyncio.run(model.check_endpoints())
    message = str(err.value)
    assert message.endswith("drop it: --api-url http://h:8000/v1?[redacted]")
    assert "pw" not in message and "2024" not in message


def test_a_pasted_embeddings_url_is_told_to_drop_the_path() -> None:
    with SimulatedServer() as server, pytest.raises(DataError) as err:
        asyncio.run(ServedEmbedder(SIMULATED_EMBEDDER_NAME, server.url + "/embeddings").check())
    assert str(err.value).endswith(f"drop it: --embed-url {server.url}")
    assert server.embed_log == []


# --- the chat client through the same layer --------------------------------------------------


def test_a_chat_answer_nested_too_deep_is_retried_not_a_fault() -> None:
    async def go(server: SimulatedServer) -> Any:
        model = OpenAICompatModel("m", [server.url], retry=RetryPolicy(max_retries=1, base_s=0.01))
        try:
            return await model.complete(Conversation([Message("user", ["hi"])]), Generation(timeout_s=5))
        finally:
            await model.aclose()

    with SimulatedServer(faults={"hi": ["deep", "deep"]}, script={"hi": ["ok"]}) as server:
        reply = asyncio.run(go(server))
        assert asyncio.run(go(server)).text == "ok"  # the faults are spent: asked again, answered
    assert reply.error_kind == status.BACKEND_ERROR and reply.attempts == 2
    assert reply.error.startswith("invalid_response: not a chat completion") and "gave up after 2 attempts" in reply.error


def test_the_advice_names_the_option_that_gave_the_url() -> None:
    model = OpenAICompatModel("m", ["http://h:8000/v1/chat/completions"], flag="--localizer-url")
    with pytest.raises(
        DataError,
        match=r"^--localizer-url http://h:8000/v1/chat/completions ends in /chat/completions, .*"
        r"drop it: --localizer-url http://h:8000/v1$",
    ):
        asyncio.run(model.check_endpoints())
