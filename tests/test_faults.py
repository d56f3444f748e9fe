"""Real servers, real faults: capped waits, the endpoint check, failover between endpoints, failure
kinds, reasoning replies, the sampling parameters sent, and credentials kept out of every text.

Every test talks to a simulated OpenAI-compatible server on 127.0.0.1 that injects the fault.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import good_ref_reply, prompt_key, ref_eval_args, ref_run_config, report_blob, run_cli

from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.cli import build_parser, main
from needlepoint.core import status
from needlepoint.core.conversation import Conversation, Generation, Message
from needlepoint.core.errors import DataError
from needlepoint.core.progress import BarProgress
from needlepoint.core.records import Record
from needlepoint.core.redact import scrub
from needlepoint.core.store import read_records
from needlepoint.models.openai_compat import (
    KNOWN_BODY_KEYS,
    OpenAICompatModel,
    RetryPolicy,
    classify_rejection,
    unknown_body_keys,
)
from needlepoint.models.simulated import VLLM_CONTEXT_ERROR, VLLM_IMAGES_ERROR, ScriptReply, SimulatedServer
from needlepoint.report import html as report_html
from needlepoint.run.evaluate import evaluate

_good = good_ref_reply
_config = ref_run_config


def _model(urls: list[str], **retry: Any) -> OpenAICompatModel:
    return OpenAICompatModel("sim-model", urls, retry=RetryPolicy(**{"max_retries": 2, "base_s": 0.01, **retry}))


def _ask(urls: list[str], text: str = "hi", api_key: str | None = None, **retry: Any) -> Any:
    async def go() -> Any:
        model = _model(urls, **retry)
        if api_key:
            model = OpenAICompatModel("sim-model", urls, api_key, retry=model.retry)
        try:
            # a client that sleeps as the server asks would hang here for a day: give it 20 s
            return await asyncio.wait_for(model.complete(Conversation([Message("user", [text])]), Generation(timeout_s=2)), 20)
        finally:
            await model.aclose()

    return asyncio.run(go())


# --- every wait is capped, and the progress line says what the run waits for


@pytest.mark.parametrize(("fault", "asked"), [("429long", "100000 s"), ("429date", "")])
def test_absurd_retry_after_fails_at_once(serve: Any, fault: str, asked: str) -> None:
    server = serve(faults={"hi": [fault, fault]}, script={"hi": ["ok"]})
    reply = _ask([server.url], max_retries=5)
    assert reply.error_kind == status.BACKEND_ERROR
    assert reply.error.startswith("http_429")
    assert "the server asked to wait" in reply.error and "more than --max-wait 300 s" in reply.error
    assert asked in reply.error
    assert reply.attempts == 1 and len(server.log) == 1


def test_max_wait_caps_a_moderate_retry_after(serve: Any) -> None:
    server = serve(faults={"hi": ["429"]}, script={"hi": ["ok"]}, retry_after_s=5.0)
    reply = _ask([server.url], max_wait_s=1.0)
    assert reply.error is not None and "asked to wait 5 s, more than --max-wait 1 s" in reply.error
    assert len(server.log) == 1
    # within the cap the client waits and succeeds
    server2 = serve(faults={"hi": ["429"]}, script={"hi": ["ok"]}, retry_after_s=0.05)
    assert _ask([server2.url], max_wait_s=1.0).text == "ok"


def test_max_wait_flag_and_run(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    ns = build_parser().parse_args(["eval", "ref_adv_s", "--data", "d", "--model", "m", "--api-url", "http://h/v1"])
    assert ns.max_wait == 300.0
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    key = prompt_key(samples[0])
    server = serve(faults={key: ["429date"]}, script={prompt_key(s): [_good(r)] for s, r in zip(samples, rows)})
    result = evaluate(_config(folder, [server.url], tmp_path / "run", limit=3, max_wait_s=60))
    rec = read_records(tmp_path / "run" / "records.jsonl")[samples[0].id]
    assert rec["status"] == status.BACKEND_ERROR
    assert "the server asked to wait" in rec["error"] and "--max-wait 60 s" in rec["error"]
    assert result.failed == [samples[0].id]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["max_wait_s"] == 60
    with pytest.raises(DataError, match="--max-wait"):
        _config(folder, [server.url], tmp_path / "x", max_wait_s=float("nan"))


def test_wait_note_while_waiting(serve: Any) -> None:
    server = serve(faults={"hi": ["429"]}, script={"hi": ["ok"]}, retry_after_s=30.0)

    async def go() -> str | None:
        model = _model([server.url])
        task = asyncio.ensure_future(model.complete(Conversation([Message("user", ["hi"])]), Generation(timeout_s=2)))
        try:
            assert model.wait_note() is None
            for _ in range(2000):
                await asyncio.sleep(0.005)
                if model.wait_note() is not None:
                    break
            return model.wait_note()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await model.aclose()

    note = asyncio.run(go())
    assert note is not None
    assert note.startswith("waiting ") and note.endswith(f"{server.url} answered 429")
    assert 25 <= int(note.split()[1]) <= 30


def test_progress_line_shows_the_wait_note() -> None:
    class Bench:
        name = "ref_adv_s"

        def running(self, records: Any) -> str:
            return ""

    class Waiting:
        def wait_note(self) -> str:
            return "waiting 42 s: http://h:8000/v1 answered 429"

    class Embedder:  # a solver's model: its waits are named too
        def wait_note(self) -> str:
            return "waiting 31 s for embeddings from http://e:8001/v1 (timeout 60 s)"

    class Quiet:
        def wait_note(self) -> None:
            return None

    progress = BarProgress(Bench(), 3, [], True, [Waiting(), Quiet(), object(), Embedder()])
    try:
        progress.tick()
        assert progress.bar is not None
        assert progress.bar.tasks[0].fields["note"] == (
            "waiting 42 s: http://h:8000/v1 answered 429; waiting 31 s for embeddings from http://e:8001/v1 (timeout 60 s)"
        )
    finally:
        progress.close()


# --- the endpoint check


def _eval_args(data: Path, url: str, out: Path, model: str = "sim-model") -> list[str]:
    return ref_eval_args(data, url, out, "--no-report", model=model, max_retries=None)


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("no_key", "wants an API key (HTTP 401); pass it with --api-key or set $OPENAI_API_KEY"),
        ("wrong_key", "refused the API key (HTTP 401); pass the right key with --api-key or $OPENAI_API_KEY"),
        ("no_v1", "the URL probably lacks /v1; try --api-url {url}"),
        ("wrong_model", "does not serve model 'sim-modle'; it serves needlepoint-simulated, sim-model"),
    ],
)
def test_endpoint_check(
    case: str, needle: str, serve: Any, ref_release: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    folder, _ = ref_release
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = serve(api_key="sk-right" if case.endswith("key") else None, models=("needlepoint-simulated", "sim-model"))
    url = server.url[: -len("/v1")] if case == "no_v1" else server.url
    args = _eval_args(folder, url, tmp_path / "run", "sim-modle" if case == "wrong_model" else "sim-model")
    if case == "wrong_key":
        args += ["--api-key", "sk-wrong"]
    assert main(args) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert needle.format(url=server.url) in lines[0]
    assert "sk-wrong" not in lines[0]
    assert server.log == []
    assert not (tmp_path / "run").exists()


def test_endpoint_check_leaves_no_default_run_folder(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, _ = ref_release
    server = serve(models=("other/model",))
    done = run_cli(
        [
            "eval",
            "ref_adv_s",
            "--data",
            str(folder),
            "--model",
            "sim-model",
            "--api-url",
            server.url,
            "--box-format",
            "abs_xyxy",
            "--no-progress",
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "it serves other/model: pass one of these with --model" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_endpoint_check_passes_with_the_right_key(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, _ = ref_release
    server = serve(api_key="sk-right")
    result = evaluate(_config(folder, [server.url], tmp_path / "run", limit=2, api_key="sk-right"))
    assert result.metrics["run"]["answered"] == 2


# --- several endpoints


def test_dead_endpoint_taken_out_of_rotation_and_probed_after_cooldown(serve: Any) -> None:
    alive = serve(default="ok")
    dead = serve()
    dead_url = dead.url
    dead.stop()  # nothing listens there any more: connections are refused

    async def go() -> tuple[list[Any], OpenAICompatModel]:
        model = _model([dead_url, alive.url], cooldown_s=30.0)
        now = [1000.0]
        model.clock = lambda: now[0]
        try:
            replies = [
                await model.complete(Conversation([Message("user", [f"q{i}"])]), Generation(timeout_s=2)) for i in range(20)
            ]
            down = model.endpoints[0]
            assert down.sent == 3 and down.down_until == 1030.0  # three failures, then out of rotation
            now[0] = 1031.0  # the cool-down is over: the next request probes it once
            replies.append(await model.complete(Conversation([Message("user", ["q20"])]), Generation(timeout_s=2)))
            return replies, model
        finally:
            await model.aclose()

    replies, model = asyncio.run(go())
    assert [r.error for r in replies] == [None] * 21
    assert all(r.endpoint == alive.url for r in replies)
    assert [r.attempts for r in replies[:4]] == [2, 2, 2, 1]
    assert replies[20].attempts == 2
    assert model.endpoints[0].sent == 4  # 3 before it was marked down, 1 probe after the cool-down
    assert model.endpoints[1].sent == 21
    assert len(alive.log) == 21


def test_run_survives_a_failing_endpoint(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    script = {prompt_key(s): [_good(r)] for s, r in zip(samples, rows)}
    healthy = serve(script=script, delay_s=0.01)
    sick = serve(script=script, failing=True)  # answers 503 to everything
    result = evaluate(_config(folder, [sick.url, healthy.url], tmp_path / "run", concurrency=4, max_retries=1))
    records = read_records(tmp_path / "run" / "records.jsonl")
    assert len(records) == 12 and result.failed == []
    assert all(r["status"] == "done" and r["scores"]["hit"] for r in records.values())
    assert len(healthy.log) == 12
    # marked down after 3 consecutive failures; at most the requests already in flight follow
    assert len(sick.log) <= RetryPolicy().fail_limit + 4 - 1


def test_run_survives_an_endpoint_stopped_mid_run(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    script: dict[str, list[ScriptReply]] = {prompt_key(s): [_good(r)] for s, r in zip(samples, rows)}
    one = serve(script=script, delay_s=0.02)

    class Stopping(SimulatedServer):
        """Stops serving (its port then refuses connections) after answering three requests."""

        stopping = False

        async def _chat(self, request: Any) -> Any:
            answer = await super()._chat(request)
            if len(self.log) >= 3 and not self.stopping:
                self.stopping = True
                asyncio.get_running_loop().call_later(0.01, lambda: asyncio.ensure_future(self._runner.cleanup()))
            return answer

    two = Stopping(script=script, delay_s=0.02, models=("sim-model",)).start()
    try:
        result = evaluate(_config(folder, [two.url, one.url], tmp_path / "run", concurrency=2, max_retries=1))
    finally:
        two.stop()
    records = read_records(tmp_path / "run" / "records.jsonl")
    assert len(records) == 12 and result.failed == []
    assert all(r["status"] == "done" and r["scores"]["hit"] for r in records.values())
    assert 3 <= len(two.log) <= 3 + 2  # the requests in flight when it stopped failed over to the other
    assert len(one.log) >= 12 - len(two.log)


# --- failure kinds


def test_classify_vllm_rejections() -> None:
    assert classify_rejection(400, json.dumps(VLLM_CONTEXT_ERROR)) == status.CONTEXT_TOO_LONG
    assert classify_rejection(400, json.dumps(VLLM_IMAGES_ERROR)) == status.TOO_MANY_IMAGES
    assert (
        classify_rejection(400, json.dumps({"error": {"message": "This model's maximum context length is 4096 tokens."}}))
        == status.CONTEXT_TOO_LONG
    )
    assert (
        classify_rejection(400, "The decoder prompt (length 9000) is longer than the maximum model length of 8192.")
        == status.CONTEXT_TOO_LONG
    )
    assert classify_rejection(400, '{"object":"error","message":"temperature must be non-negative"}') == status.REQUEST_REJECTED
    assert classify_rejection(404, "The model `x` does not exist.") == status.REQUEST_REJECTED


def test_failure_kinds_in_a_run(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)[:6]
    keys = [prompt_key(s) for s in samples]
    script = {k: [_good(r)] for k, r in zip(keys, rows)}
    faults = {keys[0]: ["context"], keys[1]: ["context"], keys[2]: ["images"], keys[3]: ["500"] * 3}
    server = serve(script=script, faults=faults)
    out = tmp_path / "run"
    result = evaluate(_config(folder, [server.url], out, limit=6))
    records = read_records(out / "records.jsonl")
    kinds = [records[s.id]["status"] for s in samples]
    assert kinds == ["context_too_long", "context_too_long", "too_many_images", "backend_error", "done", "done"]
    assert records[samples[0].id]["turns"][0]["error_kind"] == "context_too_long"
    assert records[samples[0].id]["turns"][0]["attempts"] == 1  # a property of the sample: not retried
    run = json.loads((out / "metrics.json").read_text())["run"]
    assert run["answered"] == 2 and run["failed"] == 4
    assert run["failed_by_kind"] == {"backend_error": 1, "context_too_long": 2, "too_many_images": 1}

    notes = result.notes
    assert notes[0].startswith("4 sample(s) failed (1 backend_error, 2 context_too_long, 1 too_many_images)")
    assert notes[1] == "rerun with --retry-failed to request the 1 transient failure(s) again"
    assert notes[2].startswith("context_too_long, too_many_images: the server refuses these samples as they are")
    longest = max((records[s.id]["turns"][0].get("usage") or {})["prompt_tokens"] for s in samples[4:])
    assert longest > 0
    assert notes[3].startswith(
        f"2 sample(s) exceed the model's context (8192 tokens, the server says); the longest prompt that fit had {longest} prompt tokens"
    )
    assert notes[4].startswith("1 sample(s) have more images than the server accepts per prompt")

    before = len(server.log)
    evaluate(_config(folder, [server.url], out, limit=6, retry_failed=True))
    assert server.log[before:] == [(keys[3], 0)]


# --- reasoning models


def test_reasoning_replies(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)[:4]
    keys = [prompt_key(s) for s in samples]
    script: dict[str, Any] = {k: [_good(r)] for k, r in zip(keys, rows)}
    script[keys[0]] = [{"text": None, "reasoning": "Let me think about the <b>shapes</b>...", "finish_reason": "length"}]
    script[keys[1]] = [
        {"text": None, "reasoning": "Hmm, the left one", "reasoning_field": "reasoning", "finish_reason": "length"}
    ]
    script[keys[2]] = [{"text": _good(rows[2]), "reasoning": "It is clearly the red square."}]
    server = serve(script=script)
    out = tmp_path / "run"
    result = evaluate(_config(folder, [server.url], out, limit=4, report=True))
    records = read_records(out / "records.jsonl")
    first, second, third, plain = (records[s.id] for s in samples)
    for rec, thought in ((first, "Let me think about the <b>shapes</b>..."), (second, "Hmm, the left one")):
        assert rec["status"] == "done" and rec["parse_error"] == status.NO_CONTENT
        assert rec["repair_used"] is False and len(rec["turns"]) == 1
        assert rec["turns"][0]["reply"] == "" and rec["turns"][0]["reasoning"] == thought
        assert rec["scores"]["hit"] is False and rec["scores"]["iou"] == 0.0
    assert third["parse_error"] is None and third["scores"]["hit"] is True
    assert third["turns"][0]["reasoning"] == "It is clearly the red square."
    assert "reasoning" not in plain["turns"][0]
    assert [k for k, _ in server.log].count(keys[0]) == 1  # no repair turn
    assert result.metrics["parse_errors"] == {"no_content": 2}
    assert result.notes[-1] == (
        "warning: 2 of 4 replies had no content, only reasoning (the model's thinking ran out of tokens?); raise --max-tokens"
    )
    page = (out / "report" / "index.html").read_text(encoding="utf-8")
    blob = report_blob(out / "report" / "index.html")
    by_id = {it["id"]: it for it in blob["items"]}
    assert by_id[samples[0].id]["r"] == "Let me think about the <b>shapes</b>..."
    assert by_id[samples[2].id]["r"] == "It is clearly the red square."
    assert by_id[samples[3].id]["r"] == ""
    assert "[no content, only reasoning]" in by_id[samples[0].id]["a"]
    assert 'createElement("details")' in page or 'el("details"' in page


def test_few_empty_replies_do_not_warn(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    script: dict[str, Any] = {prompt_key(s): [_good(r)] for s, r in zip(samples, rows)}
    script[prompt_key(samples[0])] = [{"text": None, "reasoning": "thinking"}]
    result = evaluate(_config(folder, [serve(script=script).url], tmp_path / "run"))
    assert result.metrics["parse_errors"] == {"no_content": 1}
    assert not any("--max-tokens" in n for n in result.notes)  # 1 of 12 is under a tenth


# --- the sampling parameters sent


def test_sampling_sent_is_recorded(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, _ = ref_release
    server = serve()
    out = tmp_path / "run"
    evaluate(_config(folder, [server.url], out, limit=2, generation={"timeout_s": 2, "extra": {"top_k": 5}}))
    header = json.loads((out / "run.json").read_text())
    sent = {k: v for k, v in server.requests[0][1].items() if k not in ("model", "messages")}
    assert header["sampling_sent"] == [sent]
    assert sent == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 1024, "seed": 7, "top_k": 5}
    assert "neutral_sampling" not in header["identity"]


def test_neutral_sampling(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, _ = ref_release
    server = serve()
    out = tmp_path / "run"
    gen = {"timeout_s": 2, "extra": {"repetition_penalty": 1.1}}  # --extra-body wins over the neutral value
    evaluate(_config(folder, [server.url], out, limit=1, neutral_sampling=True, generation=gen))
    body = server.requests[0][1]
    sent = {k: v for k, v in body.items() if k not in ("model", "messages")}
    assert sent == {
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 1024,
        "seed": 7,
        "top_k": -1,
        "min_p": 0.0,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    header = json.loads((out / "run.json").read_text())
    assert header["identity"]["neutral_sampling"] is True
    assert header["sampling_sent"] == [sent]
    ns = build_parser().parse_args(["eval", "ref_adv_s", "--data", "d", "--model", "m", "--api-url", "u", "--neutral-sampling"])
    assert ns.neutral_sampling is True


def test_unknown_extra_body_keys_warn(serve: Any, ref_release: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert unknown_body_keys(["top_k", "repetition_penalty", "topk", "chat_template_kwargs"]) == ["topk"]
    assert {"top_k", "min_p", "repetition_penalty", "max_tokens", "temperature"} <= KNOWN_BODY_KEYS
    folder, _ = ref_release
    server = serve()
    args = _eval_args(folder, server.url, tmp_path / "run") + ["--limit", "1", "--extra-body", '{"topk": 1, "top_k": 2}']
    main(args)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "--extra-body key(s) topk are known to neither" in warnings[0]


# --- credentials never stored or printed


def test_scrub() -> None:
    text = "POST http://bob:pw123@h:1/v1/chat?api-key=sk-q&v=2 failed; Authorization: Bearer sk-abcdef; key sk-abcdef"
    out = scrub(text, ["sk-abcdef"])
    assert "pw123" not in out and "bob" not in out and "sk-q" not in out and "sk-abcdef" not in out
    assert "http://h:1/v1/chat?api-key=[redacted]&v=[redacted]" in out
    assert "Bearer [redacted]" in out


def test_error_bodies_that_echo_credentials_are_scrubbed(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, _ = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    server = serve(faults={prompt_key(samples[0]): ["echo"]}, api_key="sk-echo-SECRET-1")
    url = server.url + "?api-key=q-SECRET-3"
    out = tmp_path / "run"
    evaluate(_config(folder, [url], out, limit=2, api_key="sk-echo-SECRET-1", report=True))
    rec = read_records(out / "records.jsonl")[samples[0].id]
    assert rec["status"] == status.REQUEST_REJECTED
    assert "Authorization: Bearer [redacted]" in rec["error"] and "api-key=[redacted]" in rec["error"]
    for p in (q for q in out.rglob("*") if q.is_file()):
        data = p.read_bytes()
        assert b"SECRET" not in data, p


def test_key_in_url_and_flag_is_refused() -> None:
    with pytest.raises(DataError, match="user info and --api-key"):
        OpenAICompatModel("m", ["http://user:pw-SECRET@127.0.0.1:9/v1"], "sk-SECRET")


def test_neutral_values_fill_what_mm_niah_leaves_to_the_server() -> None:
    from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
    from needlepoint.run.evaluate import _generation

    gen = _generation(MmNiah(), {}, neutral=True)
    assert (gen.temperature, gen.top_p, gen.max_tokens, gen.seed) == (0.0, 1.0, None, None)
    assert gen.extra == {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def test_cannot_reach_message_has_no_url_secrets() -> None:
    async def go() -> None:
        model = OpenAICompatModel("m", ["http://user:pw-SECRET@127.0.0.1:9/v1?key=q-SECRET"])
        try:
            await model.check_endpoints(timeout_s=2)
        finally:
            await model.aclose()

    with pytest.raises(DataError) as err:
        asyncio.run(go())
    assert "cannot reach http://127.0.0.1:9/v1" in str(err.value)
    assert "SECRET" not in str(err.value)


def test_report_redacts_by_exact_names() -> None:
    out = report_html.public_config(
        {
            "config": {
                "api_key": "k",
                "generation": {"max_tokens": 64, "extra": {"Authorization": "x", "top_k": 1}},
                "note": "sent with Bearer sk-LEAK",
            }
        }
    )
    assert out["config"]["generation"]["max_tokens"] == 64
    assert out["config"]["generation"]["extra"] == {"Authorization": "[redacted]", "top_k": 1}
    assert out["config"]["api_key"] == "[redacted]"
    assert "sk-LEAK" not in out["config"]["note"]


def test_report_scrubs_errors_of_older_records(ref_release: Any, tmp_path: Path) -> None:
    folder, _ = ref_release
    bench = RefAdv(box_format="abs_xyxy")
    samples = bench.load(folder)[:1]
    error = "http_400: echo of Authorization: Bearer sk-OLD-LEAK to http://h:1/v1/chat?key=q-OLD-LEAK"
    recs: list[Record] = [
        {
            "id": samples[0].id,
            "status": "request_rejected",
            "turns": [{"reply": "", "error": error}],
            "repair_used": False,
            "answer": None,
            "parse_error": "request_rejected",
            "scores": {"iou": 0.0, "hit": False},
            "error": error,
        }
    ]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    page = report_html.write_run_report(run_dir, bench, samples, recs, bench.score(samples, recs), {"config": {}})
    text = page.read_text(encoding="utf-8")
    assert "OLD-LEAK" not in text
    assert "Bearer [redacted]" in text


def test_the_context_line_ignores_a_poisoned_usage_count() -> None:
    """An answered record stored with an impossible prompt count (400 digits, from a run before the
    usage rule) is no evidence of what fit: the line falls back to the request's bytes."""
    from needlepoint.core.outcome import summary_lines

    answered: Any = {
        "id": "a",
        "status": status.DONE,
        "turns": [{"usage": {"prompt_tokens": int("9" * 400), "completion_tokens": 1}, "request_bytes": 5000}],
    }
    refused: Any = {"id": "b", "status": status.CONTEXT_TOO_LONG, "error": "too long", "turns": [{"request_bytes": 90000}]}
    line = next(s for s in summary_lines([answered, refused]) if "exceed the model's context" in s)
    assert "9999" not in line and "the longest request that fit had 5000 bytes" in line, line
