"""Solvers: the default one keeps old runs' identity; a solver with two models and a tool records
every call; faults of our own code are internal errors; the model layer bounds requests in flight;
a replay of a run's records re-drives it to the same metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from helpers import CountingServer, good_ref_reply, prompt_key, ref_run_config
from helpers import report_blob as blob

from needlepoint.benchmarks.ref_adv import RefAdv
from needlepoint.cli import main
from needlepoint.contract.base import Parsed, replies_text
from needlepoint.contract.registry import declaration, register, unregister
from needlepoint.core import status
from needlepoint.core.config import RunConfig, hash_identity, identity
from needlepoint.core.conversation import Conversation, Generation, Message
from needlepoint.core.errors import EXIT_INTERNAL, DataError, RequestError
from needlepoint.core.records import Record, scores
from needlepoint.core.store import RunStore, read_records
from needlepoint.models.openai_compat import OpenAICompatModel, RetryPolicy
from needlepoint.models.replay import ReplayModel
from needlepoint.run.evaluate import evaluate
from needlepoint.run.runner import pending
from needlepoint.solvers import SolveContext, make_solver
from needlepoint.solvers.default import read_reply

_good = good_ref_reply


def _config(data: Path, urls: list[str], out: Path, **kw: Any) -> RunConfig:
    config: RunConfig = ref_run_config(data, urls, out, **{"max_retries": 0, **kw})
    return config


async def _length(text: str) -> int:
    return len(text)


class TwoModels:
    """A reasoner (the --model) writes a note, a tool measures it, a localizer answers the boxes."""

    name = "two"

    def __init__(self, benchmark: Any, localizer_url: str, localizer: str = "org/m") -> None:
        self.benchmark = benchmark
        self.localizer_name = localizer
        self.localizer = OpenAICompatModel(localizer, [localizer_url], None, retry=RetryPolicy(max_retries=0), max_in_flight=2)

    def identity(self) -> dict[str, Any]:
        return {"localizer": self.localizer_name}

    def label(self, model: str) -> str:
        return f"{model} + {self.localizer_name} (two)"

    def models(self) -> Mapping[str, Any]:
        return {"localizer": self.localizer}

    async def solve(self, sample: Any, ctx: SolveContext) -> Parsed:
        conversation = self.benchmark.prompt(sample)
        ctx.request(conversation)
        thought = await ctx.complete(conversation)
        if thought.error:
            return Parsed(error=thought.error_kind)
        chars = await ctx.tool("length", lambda: _length(thought.text), summary=lambda n: {"chars": n})
        ctx.note(reasoner_chars=chars)
        assert ctx.run_dir is not None and (ctx.run_dir / "run.json").is_file()
        boxes = await ctx.complete(conversation, role="localizer")
        return read_reply(self.benchmark, sample, boxes)


class Faulty:
    """Asks the model, then fails in its own code (on every sample, or only on sample `only`)."""

    name = "faulty"

    def __init__(self, benchmark: Any, only: Any = None) -> None:
        self.benchmark = benchmark
        self.only = only

    def identity(self) -> dict[str, Any]:
        return {"only": self.only}

    def label(self, model: str) -> str:
        return model

    def models(self) -> Mapping[str, Any]:
        return {}

    async def solve(self, sample: Any, ctx: SolveContext) -> Parsed:
        conversation = self.benchmark.prompt(sample)
        ctx.request(conversation)
        reply = await ctx.complete(conversation)
        if self.only is None or str(self.only) == sample.id:
            return Parsed(answer=len(reply.text) / 0)
        return read_reply(self.benchmark, sample, reply)


class ToolFails:
    """A tool (an embedder, say) whose request fails with a classified kind."""

    name = "toolfails"

    def __init__(self, benchmark: Any) -> None:
        self.benchmark = benchmark

    def identity(self) -> dict[str, Any]:
        return {}

    def label(self, model: str) -> str:
        return model

    def models(self) -> Mapping[str, Any]:
        return {}

    async def solve(self, sample: Any, ctx: SolveContext) -> Parsed:
        async def embed() -> None:
            raise RequestError(status.CONTEXT_TOO_LONG, "the embedder says the text is too long")

        await ctx.tool("embed", embed)
        return Parsed(answer=None)


@pytest.fixture
def test_solvers() -> Iterator[None]:
    """Ref-Adv-s declares the solvers of this module, as a benchmark declares its own (in its
    Declaration, here one registered in its place)."""
    builtin = declaration("ref_adv_s")
    solvers = {"two": "test_solvers:TwoModels", "faulty": "test_solvers:Faulty", "toolfails": "test_solvers:ToolFails"}
    register("ref_adv_s", dataclasses.replace(builtin, solvers={**builtin.solvers, **solvers}), replace=True)
    yield
    unregister("ref_adv_s")


def test_default_solver_keeps_the_identity_hash_of_runs_before_solvers(tmp_path: Path) -> None:
    config = RunConfig(benchmark="ref_adv_s", data=Path("/d"), model="org/m", api_urls=["http://127.0.0.1:1/v1"])
    bench_ident = {"box_format": "abs_xyxy", "prompt_mode": "direct"}
    # The hash the code before solvers gave this configuration (computed with that code).
    ident = identity(
        config, bench_ident, Generation(), "abcd/3", make_solver("default", RefAdv(box_format="abs_xyxy")).identity()
    )
    assert hash_identity(ident) == "bdaaa6896c882a4d"
    other = RunConfig(benchmark="ref_adv_s", data=Path("/d"), model="org/m", api_urls=["http://127.0.0.1:1/v1"], solver="two")
    ident2 = identity(other, bench_ident, Generation(), "abcd/3", {"localizer": "x"})
    assert ident2["solver"] == "two" and ident2["solver.localizer"] == "x"
    assert hash_identity(ident2) != hash_identity(ident)


def test_default_solver_named_resumes_a_run_started_without_it(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    server = serve(script={prompt_key(s): [_good(r)] for s, r in zip(samples, rows)}, default=None)
    out = tmp_path / "run"
    first = evaluate(_config(folder, [server.url], out, limit=6))
    asked = len(server.log)
    assert asked == 6 and first.metrics["run"]["answered"] == 6
    second = evaluate(_config(folder, [server.url], out, solver="default"))
    assert second.run_dir == out and len(server.log) == asked + 6  # only the six not yet answered
    header = RunStore.read_header(out)
    assert (
        header is not None and "solver" not in header["identity"] and "model_label" not in header
    )  # the leaderboard shows config.model
    rec = read_records(out / "records.jsonl")[samples[0].id]
    assert [(t["role"], t["model"]) for t in rec["turns"]] == [("model", "sim-model")]
    assert rec["scores"] == {"iou": pytest.approx(1.0), "hit": True} and "iou" not in rec


def test_the_describing_threads_end_with_the_answering_and_come_back_when_needed() -> None:
    """The runner ends them once a run has answered (runner.run): a thread left idle would keep
    the run's end from sharing its intervals with a forked helper (stats.scoring)."""
    from needlepoint.solvers import sent

    def describing() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("needlepoint-describe")]

    assert sent._describers().submit(os.getpid).result() == os.getpid() and describing()
    sent.stop_describing()
    assert not describing()
    assert sent._describers().submit(os.getpid).result() == os.getpid() and describing()
    sent.stop_describing()


def test_unknown_solver_and_setting_are_one_sentence(
    ref_release: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = ref_release
    args = [
        "eval",
        "ref_adv_s",
        "--data",
        str(folder),
        "--model",
        "m",
        "--api-url",
        "http://127.0.0.1:9/v1",
        "--box-format",
        "abs_xyxy",
        "--out",
        str(tmp_path / "r"),
        "--no-progress",
    ]
    assert main([*args, "--solver", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown --solver 'nope' for ref_adv_s; choose one of default" in err and "Traceback" not in err
    assert main([*args, "--solver-option", "x=1"]) == 2
    assert "x does not apply to --solver default" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_two_models_and_a_tool_every_call_recorded_and_retried(
    serve: Any, ref_release: Any, tmp_path: Path, test_solvers: None
) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    reasoner = serve(default="the target is the leftmost square")
    localizer = serve(script={prompt_key(s): [_good(r)] for s, r in zip(samples, rows)}, default=None, failing=True)
    out = tmp_path / "run"
    config = _config(folder, [reasoner.url], out, solver="two", solver_options={"localizer_url": localizer.url})
    failed = evaluate(config)
    records = read_records(out / "records.jsonl")
    assert sorted(failed.failed, key=int) == [s.id for s in samples]
    rec = records[samples[0].id]
    assert rec["status"] == status.BACKEND_ERROR and "503" in rec["error"]
    assert [t["role"] for t in rec["turns"]] == ["model", "tool", "localizer"]
    assert rec["turns"][2]["error_kind"] == status.BACKEND_ERROR and rec["turns"][2]["model"] == "org/m"

    localizer.failing = False
    done = evaluate(
        _config(folder, [reasoner.url], out, solver="two", solver_options={"localizer_url": localizer.url}, retry_failed=True)
    )
    assert done.failed == [] and done.metrics["acc@0.5"] == pytest.approx(1.0)
    rec = read_records(out / "records.jsonl")[samples[0].id]
    text = "the target is the leftmost square"
    assert [(t["role"], t.get("model"), t.get("tool")) for t in rec["turns"]] == [
        ("model", "sim-model", None),
        ("tool", None, "length"),
        ("localizer", "org/m", None),
    ]
    assert rec["turns"][0]["reply"] == text and rec["turns"][1]["result"] == {"chars": len(text)}
    assert rec["solver"] == {"reasoner_chars": len(text)} and rec["scores"]["hit"] is True
    shown = replies_text(rec)
    assert shown.split("\n---\n") == [
        f"[model: sim-model] {text}",
        "[tool: length] " + json.dumps({"chars": len(text)}),
        "[localizer: org/m] " + rec["turns"][2]["reply"],
    ]
    header = RunStore.read_header(out)
    assert header is not None
    assert header["identity"]["solver"] == "two" and header["identity"]["solver.localizer"] == "org/m"
    assert "solver.localizer_url" not in header["identity"]  # where a model is served does not change answers
    assert header["config"]["solver_options"] == {"localizer_url": localizer.url}
    assert header["model_label"] == "sim-model + org/m (two)"
    board = tmp_path / "board"
    assert main(["report", str(out), "--out", str(board)]) == 0
    assert "sim-model + org/m (two)" in (board / "leaderboard.md").read_text()


def test_fault_of_our_code_is_an_internal_error_not_retried_and_stops_the_run(
    serve: Any, ref_release: Any, tmp_path: Path, test_solvers: None, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    server = serve(default="some words")
    args = [
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
        "--no-report",
        "--concurrency",
        "1",
    ]

    one = tmp_path / "one"
    assert main([*args, "--out", str(one), "--solver", "faulty", "--solver-option", f"only={samples[2].id}"]) == 3
    err = capsys.readouterr().err
    assert "1 internal_error(s): a fault in needlepoint itself" in err and "rerun with --retry-failed" not in err
    records = read_records(one / "records.jsonl")
    rec = records[samples[2].id]
    assert rec["status"] == rec["parse_error"] == status.INTERNAL_ERROR
    assert rec["error"] == "ZeroDivisionError: division by zero" and "Traceback" in rec["traceback"]
    assert rec["turns"][0]["reply"] == "some words"  # the reply that had arrived is kept
    assert rec["scores"] == {"iou": 0.0, "hit": False}
    assert pending(samples, records, retry_failed=True) == []
    metrics = json.loads((one / "metrics.json").read_text())
    assert metrics["run"]["failed_by_kind"] == {"internal_error": 1}

    every = tmp_path / "every"
    assert main([*args, "--out", str(every), "--solver", "faulty"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "internal error: 5 samples hit a fault in needlepoint itself" in err and "Traceback" not in err
    records = read_records(every / "records.jsonl")
    assert len(records) == 5 and all(r["status"] == status.INTERNAL_ERROR for r in records.values())


def test_tool_failure_takes_its_kind(serve: Any, ref_release: Any, tmp_path: Path, test_solvers: None) -> None:
    folder, _ = ref_release
    out = tmp_path / "run"
    result = evaluate(
        _config(folder, ["http://127.0.0.1:9/v1"], out, solver="toolfails", limit=2), model=ReplayModel([], "sim-model")
    )
    rec = read_records(out / "records.jsonl")[result.failed[0]]
    assert rec["status"] == status.CONTEXT_TOO_LONG and rec["error"] == "the embedder says the text is too long"
    assert rec["turns"] == [
        {
            "role": "tool",
            "tool": "embed",
            "error": rec["error"],
            "error_kind": status.CONTEXT_TOO_LONG,
            "latency_s": rec["turns"][0]["latency_s"],
        }
    ]


@pytest.mark.parametrize("n_servers", [1, 2])
def test_the_model_layer_bounds_requests_in_flight_per_endpoint(n_servers: int) -> None:
    servers = [CountingServer(delay_s=0.05, models=("m",)).start() for _ in range(n_servers)]
    try:
        model = OpenAICompatModel("m", [s.url for s in servers], None, max_in_flight=3)

        async def go() -> None:
            try:
                conversations = [Conversation([Message("user", [f"q{i}"])]) for i in range(12)]
                replies = await asyncio.gather(*(model.complete(c, Generation()) for c in conversations))
                assert all(r.error is None for r in replies)
            finally:
                await model.aclose()

        asyncio.run(go())
    finally:
        for s in servers:
            s.stop()
    assert sum(len(s.requests) for s in servers) == 12
    assert [s.most for s in servers] == [3] * n_servers


def test_replay_of_a_run_redrives_it_to_the_same_metrics(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    keys = [prompt_key(s) for s in samples]
    prose = "The target is the leftmost shape in the picture."
    script: dict[str, list[Any]] = {k: [_good(r)] for k, r in zip(keys, rows)}
    script[keys[1]] = [prose, _good(rows[1])]  # repaired
    script[keys[2]] = [prose, "still no JSON"]  # a parse error after the repair
    script[keys[3]] = [_good(rows[0])]  # a wrong box
    server = serve(script=script, faults={keys[4]: ["400"]}, default=None)
    first = evaluate(_config(folder, [server.url], tmp_path / "a"))
    asked = len(server.log)
    assert first.metrics["run"]["failed_by_kind"] == {"request_rejected": 1}
    assert 0 < first.metrics["acc@0.5"] < 1

    replay = ReplayModel.from_run(tmp_path / "a")
    again = evaluate(
        benchmark="ref_adv_s",
        data=folder,
        model=replay,
        options={"box_format": "abs_xyxy"},
        out=tmp_path / "b",
        show_progress=False,
        report=False,
    )
    assert len(server.log) == asked  # nothing was sent
    assert again.metrics == first.metrics
    a, b = read_records(tmp_path / "a" / "records.jsonl"), read_records(tmp_path / "b" / "records.jsonl")
    for sid in a:
        assert [t["reply"] for t in b[sid]["turns"]] == [t["reply"] for t in a[sid]["turns"]]
        assert (b[sid]["status"], b[sid]["answer"], b[sid]["scores"]) == (a[sid]["status"], a[sid]["answer"], a[sid]["scores"])
    assert a[samples[1].id]["repair_used"] and b[samples[1].id]["repair_used"]

    # Records written before the `scores` key (judge fields at the top level) score the same.
    bench = RefAdv(box_format="abs_xyxy")
    loaded = bench.load(folder)
    legacy = [cast(Record, {**{k: v for k, v in a[s.id].items() if k != "scores"}, **a[s.id]["scores"]}) for s in loaded]
    assert bench.score(loaded, legacy) == bench.score(loaded, [a[s.id] for s in loaded])
    assert scores(legacy[0]) == a[loaded[0].id]["scores"]


def test_blocking_tool_runs_in_a_thread_and_is_recorded(ref_release: Any) -> None:
    import threading

    folder, _ = ref_release
    bench = RefAdv(box_format="abs_xyxy")
    ctx = SolveContext(bench, bench.load(folder)[0], {}, Generation())

    def detect(n: int) -> tuple[int, int]:
        return threading.get_ident(), 2 * n

    async def go() -> tuple[int, int]:
        return await ctx.tool_sync("detect", detect, 21, summary=lambda r: {"boxes": r[1]})

    thread, value = asyncio.run(go())
    assert value == 42 and thread != threading.get_ident()
    assert ctx.turns == [
        {
            "role": "tool",
            "tool": "detect",
            "error": None,
            "error_kind": None,
            "latency_s": ctx.turns[0]["latency_s"],
            "result": {"boxes": 42},
        }
    ]


def test_solver_settings_in_run_json_carry_no_credentials() -> None:
    config = RunConfig(
        benchmark="mc_bench",
        data=Path("/d"),
        model="m",
        api_urls=[],
        solver="agentic",
        solver_options={
            "localizer_url": "http://user:pw@host:8000/v1?api_key=abc",
            "localizer_api_key": "sk-1",
            "threshold": 0.05,
        },
    )
    public = config.public()["solver_options"]
    assert public == {"localizer_url": "http://host:8000/v1?[redacted]", "threshold": 0.05}
    assert "sk-1" not in json.dumps(config.public()) and "pw" not in json.dumps(config.public())


def test_replay_without_a_recorded_reply_is_a_request_failure() -> None:
    reply = asyncio.run(ReplayModel([], "m").complete(Conversation([Message("user", ["hi"])]), Generation()))
    assert reply.error_kind == status.REQUEST_REJECTED and "no reply" in (reply.error or "")
    with pytest.raises(DataError, match="holds no run"):
        ReplayModel.from_run(Path("/nonexistent"))


def test_a_run_folder_with_records_of_the_old_layout_resumes_scores_and_reports(
    serve: Any, ref_release: Any, tmp_path: Path
) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    keys = [prompt_key(s) for s in samples]
    script: dict[str, list[Any]] = {k: [_good(r)] for k, r in zip(keys, rows)}
    script[keys[0]] = [_good(rows[1])]  # a wrong box
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    first = evaluate(_config(folder, [server.url], out, limit=8))
    # Rewrite the records as needlepoint wrote them before solvers: judge fields at the top level,
    # turns without role or model.
    path = out / "records.jsonl"
    old = []
    for rec in read_records(path).values():
        flat = {k: v for k, v in rec.items() if k != "scores"} | rec["scores"]
        flat["turns"] = [{k: v for k, v in t.items() if k not in ("role", "model")} for t in rec["turns"]]
        old.append(json.dumps(flat))
    path.write_text("\n".join(old) + "\n")
    asked = len(server.log)
    resumed = evaluate(_config(folder, [server.url], out, report=True))
    assert len(server.log) == asked + 4 and resumed.run_dir == out
    assert resumed.metrics["hits@0.5"] == 11 and resumed.metrics["n"] == 12
    assert first.metrics["hits@0.5"] == 7
    data = blob(out / "report" / "index.html")
    items = {it["id"]: it for it in data["items"]}
    assert set(items) == {s.id for s in samples}
    assert items[samples[0].id]["c"] is False and all(items[s.id]["c"] is True for s in samples[1:])
    mixed = read_records(path)
    flat_record = cast(dict[str, Any], mixed[samples[0].id])  # an old record: its judge fields at the top level
    assert "scores" not in flat_record and flat_record["hit"] is False
    assert mixed[samples[11].id]["scores"]["hit"] is True


def test_solvers_clients_take_the_run_s_client_settings() -> None:
    """The agentic localizer and the RAG embedding client retry and budget as the --model client
    does (make_solver hands them the run's ClientSettings); `client` is no --solver-option."""
    from needlepoint.benchmarks.mc_bench.benchmark import McBench
    from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
    from needlepoint.models.openai_compat import ClientSettings

    run = ClientSettings(RetryPolicy(max_retries=0, max_wait_s=7.0), reencode_images=True, max_request_bytes=12345)
    agentic: Any = make_solver(
        "agentic", McBench(box_format="abs_xyxy"), run, localizer="vlm:org/g", localizer_url=["http://127.0.0.1:9/v1"]
    )
    localizer = agentic.localizer_model
    assert (localizer.retry, localizer.reencode_images, localizer.max_request_bytes) == (run.retry, True, 12345)
    rag: Any = make_solver("rag", MmNiah(), run, embed_model="e", embed_url="http://127.0.0.1:9/v1")
    assert rag.embedder.retry == run.retry
    with pytest.raises(DataError, match=r"^client does not apply to --solver rag; drop it$"):
        make_solver("rag", MmNiah(), run, embed_model="e", embed_url="http://127.0.0.1:9/v1", client="x")
