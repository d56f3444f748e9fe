"""The OpenAI-compatible client and whole runs against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
from collections import Counter
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
from helpers import prompt_key, ref_run_config, write_jsonl_release
from helpers.images import in_memory
from helpers.servers import count_piece_writes
from PIL import Image

from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.core.config import RunConfig
from needlepoint.core.conversation import Conversation, Generation, ImageRef, Message
from needlepoint.core.images import encode_jpeg, read_small_image_status
from needlepoint.core.store import read_records
from needlepoint.models.openai_compat import (
    OpenAICompatModel,
    RetryPolicy,
    message_payload,
    request_body,
    retry_after_s,
    sampling_params,
)
from needlepoint.models.simulated import SimulatedServer
from needlepoint.run.evaluate import evaluate

FENCE = "```"
REPAIR = (
    "Your previous answer did not end with a valid JSON bbox output.\\nNow output ONLY one complete JSON code "
    'block.\\nUse this exact schema:\\n```json\\n{"bboxes": [[x1, y1, x2, y2]]}\\n```\\nDo not output any extra text.'
)


def _ask(server: Any, text: str = "hi", retries: int = 2, timeout_s: float = 0.5, **model_kw: Any) -> Any:
    async def go() -> Any:
        model = OpenAICompatModel("sim-model", [server.url], retry=RetryPolicy(max_retries=retries, base_s=0.01), **model_kw)
        try:
            return await model.complete(Conversation([Message("user", [text])]), Generation(timeout_s=timeout_s))
        finally:
            await model.aclose()

    return asyncio.run(go())


# --- the client on its own


def test_success_and_request_body(serve: Any) -> None:
    server = serve(script={"hi": ['{"bbox": [1, 2, 3, 4]}']})
    reply = _ask(server)
    assert reply.error is None
    assert reply.text == '{"bbox": [1, 2, 3, 4]}'
    assert reply.finish_reason == "stop"
    assert reply.attempts == 1
    assert reply.request_bytes > 0
    headers, body = server.requests[0]
    assert body["model"] == "sim-model"
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.0, 1.0, 1024, 7)
    assert "Authorization" not in headers


def test_request_body_is_the_json_of_the_message_with_the_images_spliced_in() -> None:
    first, second = ImageRef("a", loader=lambda: b""), ImageRef("b", loader=lambda: b"")
    conversation = Conversation([Message("user", ['Täxt "quoted" <b>', first, "between", second])])
    images = [base64.b64encode(b"first image"), base64.b64encode(b"the second one")]
    gen = Generation(extra={"top_k": 5})
    urls = {id(first): "data:image/jpeg;base64," + images[0].decode(), id(second): "data:image/jpeg;base64," + images[1].decode()}
    expected = {"model": "m", "messages": message_payload(conversation, lambda ref: urls[id(ref)]), **sampling_params(gen)}
    body = request_body("m", conversation, gen, images)
    assert body == json.dumps(expected, ensure_ascii=False, separators=(",", ":")).encode("utf-8")  # byte for byte, compact
    # File URLs (--local-images) are serialised in place, alone or beside base64: the same bytes.
    file_urls = [b"file:///data/a%20b.jpg", b"file:///data/b.jpg"]
    for sent, second_url in ((file_urls, file_urls[1].decode()), ([file_urls[0], images[1]], urls[id(second)])):

        def url_of(ref: ImageRef, at: str = second_url) -> str:
            return file_urls[0].decode() if ref is first else at

        payload = message_payload(conversation, url_of)
        expected = {"model": "m", "messages": payload, **sampling_params(gen)}
        assert (
            request_body("m", conversation, gen, sent) == json.dumps(expected, ensure_ascii=False, separators=(",", ":")).encode()
        )
    for wrong in ([], images[:1], [*images, images[0]], file_urls[:1], [*file_urls, file_urls[0]]):
        with pytest.raises(ValueError, match=f"{len(wrong)} images for 2 image slots"):
            request_body("m", conversation, gen, wrong)
    from needlepoint.models.openai_compat import _SLOT  # a text that holds the slot's mark is never cut there

    marked = Conversation([Message("user", [f"a {_SLOT} b", first, "between", second])])
    with pytest.raises(ValueError, match="2 base64 images for 3 image slots"):
        request_body("m", marked, gen, images)


def test_a_lone_surrogate_in_a_reply_becomes_a_replacement_character(serve: Any) -> None:
    """A server can send `"\\ud800"`, which decodes to a character no UTF-8 file can hold: the reply
    keeps the rest of its text, valid pairs included, and the record and report can be written."""
    server = serve(script={"hi": ["a\ud800b \U0001f600"]})
    reply = _ask(server)
    assert reply.error is None
    assert reply.text == "a\ufffdb \U0001f600"
    reply.text.encode("utf-8")


def test_generation_none_is_left_out_and_extra_merged(serve: Any) -> None:
    server = serve()

    async def go() -> Any:
        model = OpenAICompatModel("m", [server.url])
        try:
            gen = Generation(temperature=None, seed=None, extra={"top_k": 1, "repetition_penalty": 1.05})
            return await model.complete(Conversation([Message("user", ["x"])]), gen)
        finally:
            await model.aclose()

    assert asyncio.run(go()).error is None
    body = server.requests[0][1]
    assert "temperature" not in body and "seed" not in body
    assert body["top_k"] == 1 and body["repetition_penalty"] == 1.05


@pytest.mark.parametrize("fault", ["429", "500", "close", "badjson", "hang"])
def test_retryable_fault_then_success(serve: Any, fault: str) -> None:
    server = serve(faults={"hi": [fault]}, script={"hi": ["ok"]})
    reply = _ask(server)
    assert reply.error is None
    assert reply.text == "ok"
    assert reply.attempts == 2
    assert server.log == [("hi", 0), ("hi", 0)]


@pytest.mark.parametrize(
    ("fault", "error_start"),
    [("500", "http_500"), ("badjson", "invalid_response"), ("close", "connection"), ("hang", "timeout")],
)
def test_retries_exhausted(serve: Any, fault: str, error_start: str) -> None:
    server = serve(faults={"hi": [fault] * 3})
    reply = _ask(server, retries=2)
    assert reply.error is not None
    assert reply.error.startswith(error_start), reply.error
    assert "gave up after 3 attempts" in reply.error
    assert reply.attempts == 3
    assert reply.text == ""
    assert len(server.log) == 3


def test_400_is_not_retried(serve: Any) -> None:
    server = serve(faults={"hi": ["400"]}, script={"hi": ["ok"]})
    reply = _ask(server, retries=5)
    assert reply.error is not None and reply.error.startswith("http_400")
    assert "simulated 400" in reply.error
    assert reply.attempts == 1
    assert server.log == [("hi", 0)]


def test_404_is_not_retried(serve: Any) -> None:
    server = serve(default=None)
    reply = _ask(server, text="unknown", retries=5)
    assert reply.error is not None and reply.error.startswith("http_404")
    assert len(server.log) == 1


def test_server_stops_after_hang_fault() -> None:
    """A hung request the client gave up on must not keep the simulated server from stopping."""
    server = SimulatedServer(faults={"hi": ["hang"] * 2}, keep_requests=True).start()
    try:
        reply = _ask(server, retries=1, timeout_s=0.2)
        assert reply.error is not None and reply.error.startswith("timeout")
    finally:
        server.stop()  # raises TimeoutError when the hung handler blocks the shutdown


def test_api_key_header(serve: Any) -> None:
    server = serve()
    assert _ask(server, api_key="sk-secret-test").error is None
    assert server.requests[0][0]["Authorization"] == "Bearer sk-secret-test"


def test_retry_after_parsing() -> None:
    assert retry_after_s(None) is None
    assert retry_after_s("") is None
    assert retry_after_s("2.5") == 2.5
    assert retry_after_s("-3") == 0.0
    assert retry_after_s("soon") is None
    future = retry_after_s(formatdate(timeval=None, usegmt=True))  # an HTTP date: now
    assert future is not None and 0.0 <= future < 5.0


def test_retry_policy_delay_honours_retry_after() -> None:
    policy = RetryPolicy(max_retries=3, base_s=0.01, cap_s=0.02)
    for attempt in range(6):
        assert 0.0 <= policy.delay(attempt, None) <= 0.02
        assert policy.delay(attempt, 1.5) >= 1.5


# --- whole runs


def _good(row: dict[str, Any]) -> str:
    return f"{FENCE}json\n" + json.dumps([{"bbox_2d": row["solution"], "label": "target"}]) + f"\n{FENCE}"


def _config(data: Path, urls: list[str], out: Path, **kw: Any) -> RunConfig:
    config: RunConfig = ref_run_config(data, urls, out, **{"generation": {"timeout_s": 0.5}, **kw})
    return config


def test_run_with_faults_then_retry_failed(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    keys = [prompt_key(s) for s in samples]
    assert len(set(keys)) == len(samples) == 12
    prose = "The target is the leftmost shape in the picture."
    script: dict[str, list[Any]] = {k: [_good(r)] for k, r in zip(keys, rows)}
    script[keys[1]] = [prose, _good(rows[1])]  # repaired by the second turn
    script[keys[9]] = [prose, "Still no JSON, sorry."]  # fails even after the repair turn
    script[keys[11]] = ["", _good(rows[11])]  # an empty first answer is repaired too
    faults = {
        keys[2]: ["429"],
        keys[3]: ["500"],
        keys[4]: ["hang"] * 3,  # every attempt times out: backend_error
        keys[5]: ["close"],
        keys[6]: ["badjson"],
        keys[7]: ["400"],  # not retried: request_rejected
        keys[8]: ["500"] * 3,  # retries exhausted: backend_error
    }
    server = serve(script=script, faults=faults, default=None)
    out = tmp_path / "run"
    result = evaluate(_config(folder, [server.url], out))

    records = read_records(out / "records.jsonl")
    assert sorted(records, key=int) == [s.id for s in samples]
    by_index = [records[s.id] for s in samples]
    status = [r["status"] for r in by_index]
    assert status == ["done"] * 4 + ["backend_error"] + ["done"] * 2 + ["request_rejected", "backend_error"] + ["done"] * 3
    assert sorted(result.failed, key=int) == [samples[i].id for i in (4, 7, 8)]

    hang, bad_request, server_error = by_index[4], by_index[7], by_index[8]
    assert hang["error"].startswith("timeout") and "gave up after 3 attempts" in hang["error"]
    assert bad_request["error"].startswith("http_400")
    assert server_error["error"].startswith("http_500") and "gave up after 3 attempts" in server_error["error"]
    for rec in (hang, bad_request, server_error):
        assert rec["parse_error"] == rec["status"]
        assert rec["scores"]["iou"] == 0.0 and rec["scores"]["hit"] is False
        assert len(rec["turns"]) == 1 and rec["repair_used"] is False
    assert bad_request["turns"][0]["attempts"] == 1
    for i in (2, 3, 5, 6):
        assert by_index[i]["turns"][0]["attempts"] == 2
        assert by_index[i]["scores"]["iou"] == pytest.approx(1.0)

    repaired = by_index[1]
    assert repaired["repair_used"] is True and len(repaired["turns"]) == 2
    assert repaired["turns"][0]["reply"] == prose
    assert repaired["parse_error"] is None and repaired["scores"]["hit"] is True
    still_bad = by_index[9]
    assert still_bad["repair_used"] is True and len(still_bad["turns"]) == 2
    assert still_bad["parse_error"] == "no_bbox_found" and still_bad["status"] == "done"
    assert by_index[11]["repair_used"] is True and by_index[11]["scores"]["hit"] is True
    assert by_index[0]["repair_used"] is False and len(by_index[0]["turns"]) == 1

    requests = Counter(server.log)
    expected = {0: 1, 1: 1, 2: 2, 3: 2, 4: 3, 5: 2, 6: 2, 7: 1, 8: 3, 9: 1, 10: 1, 11: 1}
    for i, n in expected.items():
        assert requests[(keys[i], 0)] == n, f"sample {i}"
    for i in (1, 9, 11):
        assert requests[(keys[i], 1)] == 1
    assert sum(requests.values()) == sum(expected.values()) + 3

    # the repair turn: same conversation, first answer, then the literal repair text
    repair_bodies = [b for _, b in server.requests if len(b["messages"]) == 3 and b["messages"][1]["content"] == prose]
    assert len(repair_bodies) == 2
    msgs = repair_bodies[0]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[0]["content"][0]["type"] == "text" and msgs[0]["content"][1]["type"] == "image_url"
    assert msgs[2]["content"] == REPAIR

    metrics = result.metrics
    assert metrics["n"] == 9  # the headline metrics cover the answered samples
    # failed requests are counted apart from parse failures: the model never answered
    assert metrics["parse_errors"] == {"no_bbox_found": 1} and metrics["failures"] == {}
    assert metrics["parse_fail"] == 1
    assert metrics["repair_used"] == 3
    assert metrics["hits@0.5"] == 8
    assert metrics["run"]["failed"] == 3
    assert metrics["run"]["answered"] == 9
    assert metrics["run"]["failed_by_kind"] == {"backend_error": 2, "request_rejected": 1}
    assert (
        result.notes[0] == "3 sample(s) failed (2 backend_error, 1 request_rejected); listed in metrics.json under run.failed_ids"
    )
    assert "--retry-failed to request the 2 transient failure(s) again" in result.notes[1]
    assert result.notes[2].startswith("request_rejected: the server refuses these samples as they are")
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(metrics))
    assert json.loads((out / "run.json").read_text())["status"] != "complete"

    # --retry-failed asks again for the two transient failures only, not for the rejected request
    before = len(server.log)
    again = evaluate(_config(folder, [server.url], out, retry_failed=True))
    assert sorted(server.log[before:]) == sorted((keys[i], 0) for i in (4, 8))
    assert again.failed == [samples[7].id]
    assert again.metrics["run"]["failed_by_kind"] == {"request_rejected": 1}
    assert again.metrics["hits@0.5"] == 10
    assert again.metrics["n"] == 11
    final = read_records(out / "records.jsonl")
    assert all(final[samples[i].id]["status"] == "done" for i in (4, 8))
    assert final[samples[7].id]["status"] == "request_rejected"
    assert len((out / "records.jsonl").read_text().splitlines()) == 14  # 12 + 2 superseding records
    assert json.loads((out / "run.json").read_text())["status"] == "incomplete"

    # a plain rerun of a complete run asks nothing
    before = len(server.log)
    evaluate(_config(folder, [server.url], out))
    assert len(server.log) == before


def test_repair_on_length_only_end_to_end(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    keys = [prompt_key(s) for s in samples]
    script = {
        keys[0]: [{"text": "No JSON here.", "finish_reason": "stop"}, _good(rows[0])],
        keys[1]: [{"text": '{"bbox_2d": [1, 2', "finish_reason": "length"}, _good(rows[1])],
    }
    server = serve(script=script, default=None)
    result = evaluate(
        _config(
            folder, [server.url], tmp_path / "run", limit=2, options={"box_format": "abs_xyxy", "repair_on_length_only": True}
        )
    )
    records = read_records(tmp_path / "run" / "records.jsonl")
    first, second = records[samples[0].id], records[samples[1].id]
    assert first["repair_used"] is False and len(first["turns"]) == 1
    assert first["parse_error"] == "no_bbox_found"
    assert second["repair_used"] is True and len(second["turns"]) == 2
    assert second["turns"][0]["finish_reason"] == "length"
    assert second["scores"]["hit"] is True
    assert Counter(server.log) == {(keys[0], 0): 1, (keys[1], 0): 1, (keys[1], 1): 1}
    assert result.metrics["parse_fail"] == 1


def test_requests_spread_over_several_endpoints(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, _ = ref_release
    one, two = serve(delay_s=0.05), serve(delay_s=0.05)
    result = evaluate(_config(folder, [one.url, two.url], tmp_path / "run"))
    assert result.metrics["n"] == 12 and result.failed == []
    assert len(one.log) > 0 and len(two.log) > 0
    assert len(one.log) + len(two.log) == 12
    assert {k for k, _ in one.log}.isdisjoint({k for k, _ in two.log})


def test_api_key_sent_but_never_stored(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, _ = ref_release
    server = serve(faults={}, script={})
    out = tmp_path / "run"
    # the HTML report is written too: the key must not reach it either
    evaluate(_config(folder, [server.url], out, api_key="sk-secret-test", report=True, limit=4))
    assert len(server.requests) == 4
    assert all(h.get("Authorization") == "Bearer sk-secret-test" for h, _ in server.requests)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"run.json", "records.jsonl", "metrics.json"}
    for p in files:
        assert b"sk-secret-test" not in p.read_bytes(), p
    header = json.loads((out / "run.json").read_text())
    assert "api_key" not in header["config"]
    assert (out / "report" / "index.html").is_file()


def test_credentials_in_urls_are_not_stored(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    """A key passed in an endpoint's user info or query string stays out of the run folder."""
    folder, _ = ref_release
    server = serve(faults={}, script={})
    out = tmp_path / "run"
    url = server.url.replace("http://", "http://user:sk-in-url@") + "?api-key=sk-in-query"
    evaluate(_config(folder, [url], out, limit=2))
    for p in (q for q in out.rglob("*") if q.is_file()):
        data = p.read_bytes()
        assert b"sk-in-url" not in data and b"sk-in-query" not in data, p


def test_images_sent_as_jpeg_after_the_text(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    server = serve()
    evaluate(_config(folder, [server.url], tmp_path / "parquet", limit=3, concurrency=1))
    sent = {}
    for _, body in server.requests:
        content = body["messages"][0]["content"]
        assert [p["type"] for p in content] == ["text", "image_url"]
        assert content[0]["text"].startswith("<image>\nLocate every object that matches the description")
        url = content[1]["image_url"]["url"]
        assert url.startswith("data:image/jpeg;base64,")
        sent[content[0]["text"]] = base64.b64decode(url.split(",", 1)[1])
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    for s, r in zip(samples[:3], rows):
        # an RGB JPEG source needing no resize goes out as its own bytes
        assert sent[prompt_key(s)] == r["image"]["bytes"]

    # PNG sources (JSONL + images layout) are converted to RGB JPEG
    jsonl = write_jsonl_release(tmp_path / "jsonl", rows[:3], fmt="PNG")
    server2 = serve()
    evaluate(_config(jsonl, [server2.url], tmp_path / "jsonl_run", concurrency=1))
    assert len(server2.requests) == 3
    for _, body in server2.requests:
        url = body["messages"][0]["content"][1]["image_url"]["url"]
        im = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
        assert (im.format, im.mode, im.size) == ("JPEG", "RGB", (400, 300))

    # --max-image-side downscales
    server3 = serve()
    evaluate(
        _config(folder, [server3.url], tmp_path / "small", limit=1, options={"box_format": "abs_xyxy", "max_image_side": 200})
    )
    url = server3.requests[0][1]["messages"][0]["content"][1]["image_url"]["url"]
    assert Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (200, 150)


def _jpeg_refs(folder: Path, count: int) -> list[ImageRef]:
    """`count` small JPEG files of distinct sizes in `folder`, as image references."""
    refs = []
    for k in range(count):
        path = folder / f"im{k}.jpg"
        Image.new("RGB", (40 + k, 30), (10 * k, 20, 30)).save(path, quality=80)
        refs.append(ImageRef(key=path.name, path=path))
    return refs


def test_images_are_read_on_the_event_loop_and_only_transcoded_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every image of a request, a document's dozens as a pair's two, is read and encoded as base64
    on the event loop (in a worker thread each system call of a read would hand the interpreter
    lock between the thread and the loop: issue 45); only an image that must be transcoded (a PNG)
    goes to a worker thread, read once. The document keeps its order; the base64 is of the files
    as stored."""
    import threading

    import needlepoint.models.openai_compat as oc

    refs = _jpeg_refs(tmp_path, 6)
    png = tmp_path / "p.png"
    Image.new("RGB", (20, 10), "red").save(png)
    refs.insert(3, ImageRef(key="p.png", path=png))
    readers: list[int] = []
    transcoders: list[int] = []
    real_read, real_encode = read_small_image_status, encode_jpeg  # what openai_compat reads and transcodes with

    def read(ref: ImageRef) -> tuple[bytes | None, os.stat_result | None]:
        readers.append(threading.get_ident())
        return real_read(ref)

    def transcode(ref: ImageRef, reencode: bool = False, data: bytes | None = None) -> bytes:
        transcoders.append(threading.get_ident())
        return real_encode(ref, reencode, data)

    monkeypatch.setattr(oc, "read_small_image_status", read)
    monkeypatch.setattr(oc, "encode_jpeg", transcode)

    async def encode(images: list[ImageRef]) -> tuple[list[bytes], int]:
        model = OpenAICompatModel("m", ["http://127.0.0.1:9/v1"])
        try:
            return await model._encode_images(Conversation([Message("user", ["look", *images])])), threading.get_ident()
        finally:
            await model.aclose()

    document, loop_thread = asyncio.run(encode(refs))
    assert readers == [loop_thread] * 7 and len(transcoders) == 1 and transcoders[0] != loop_thread
    jpegs = [r for r in refs if r.key != "p.png"]
    assert [d for k, d in enumerate(document) if k != 3] == [base64.b64encode(r.read_bytes()) for r in jpegs]
    assert Image.open(io.BytesIO(base64.b64decode(document[3]))).size == (20, 10)  # the PNG, as a JPEG
    readers.clear()
    pair, loop_thread = asyncio.run(encode(jpegs[:2]))
    assert readers == [loop_thread, loop_thread] and pair == [base64.b64encode(r.read_bytes()) for r in jpegs[:2]]


def test_after_a_slow_document_the_run_reads_documents_in_a_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files on slow storage (a network file system): once a document's reads have kept the event
    loop waiting for SLOW_READ_S, the run's later documents are read and encoded in a worker thread,
    where the waits overlap the loop's work; a pair stays on the loop. The base64 is the same
    either way."""
    import threading
    import time

    import needlepoint.models.openai_compat as oc

    refs = _jpeg_refs(tmp_path, 4)
    readers: list[int] = []
    real_read = read_small_image_status

    def slow(ref: ImageRef) -> tuple[bytes | None, os.stat_result | None]:
        readers.append(threading.get_ident())
        time.sleep(oc.SLOW_READ_S / 3)  # each image a network round trip: a document of 4 holds the loop too long
        return real_read(ref)

    monkeypatch.setattr(oc, "read_small_image_status", slow)

    async def three_requests() -> tuple[list[list[bytes]], list[list[int]], int, bool]:
        model = OpenAICompatModel("m", ["http://127.0.0.1:9/v1"])
        sent, seen = [], []
        try:
            for images in (refs, refs[:2], [*refs[2:], *refs[:2]]):  # a document, a pair, a document
                readers.clear()
                model.images.clear()  # read each time, as distinct images would be
                sent.append(await model._encode_images(Conversation([Message("user", ["look", *images])])))
                seen.append(list(readers))
            return sent, seen, threading.get_ident(), model.slow_reads
        finally:
            await model.aclose()

    sent, seen, loop_thread, slow_reads = asyncio.run(three_requests())
    assert slow_reads and seen[0] == [loop_thread] * 4 and seen[1] == [loop_thread] * 2
    assert len(seen[2]) == 4 and loop_thread not in seen[2]
    stored = [base64.b64encode(r.read_bytes()) for r in refs]
    assert sent == [stored, stored[:2], [*stored[2:], *stored[:2]]]


def test_a_body_of_megabytes_goes_out_in_pieces_equal_to_the_joined_body(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request over PIECES_FROM_BYTES is sent as its pieces (never joined): the server gets the
    same body, under a Content-Length of its size, on the first attempt and on the retry after a
    503; the request's size is that of the joined body."""
    import numpy as np

    from needlepoint.core.images import to_base64
    from needlepoint.models.openai_compat import PIECES_FROM_BYTES

    rng = np.random.default_rng(3)
    jpegs = []
    for _ in range(3):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (700, 700, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=95)
        jpegs.append(buf.getvalue())
    refs = [in_memory(f"p{i}.jpg", data) for i, data in enumerate(jpegs)]
    conversation = Conversation([Message("user", ["look", refs[0], "and", refs[1], refs[2], "end"])])
    generation = Generation(timeout_s=5)
    joined = request_body("m", conversation, generation, [to_base64(j) for j in jpegs])
    assert len(joined) > PIECES_FROM_BYTES
    server = serve(script={}, default="ok", faults={"lookandend": ["503"]}, models=("m",))
    written = count_piece_writes(monkeypatch)

    async def go() -> Any:
        model = OpenAICompatModel("m", [server.url], retry=RetryPolicy(max_retries=2, base_s=0.01))
        try:
            return await model.complete(conversation, generation)
        finally:
            await model.aclose()

    reply = asyncio.run(go())
    assert reply.error is None and reply.text == "ok" and reply.attempts == 2
    assert reply.request_bytes == len(joined)
    assert written == [7, 7]  # text, image, text, image, text, image, text: one attempt each
    assert len(server.requests) == 2
    for headers, body in server.requests:
        assert headers["Content-Length"] == str(len(joined))
        assert headers["Content-Type"] == "application/json"
        assert body == json.loads(joined)
