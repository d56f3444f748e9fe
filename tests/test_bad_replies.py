"""No reply from a server can stop, poison or crash a run: an absurd number, JSON nested thousands
deep, NaN and Infinity literals, lone surrogates in values and keys. Each run below gets such
replies from a real local server, for the default solver on all three benchmarks and for
MC-Bench's agentic reasoner; every run completes, writes its metrics and report, counts the
replies it cannot read as parse errors, and never records `internal_error` (a fault in
needlepoint itself)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import small_niah

from needlepoint.benchmarks.mc_bench.agentic import parse_targets, reasoner_prompt
from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.mc_bench.demo import write_release as write_mc_release
from needlepoint.benchmarks.mc_bench.parse import OutOfRange, PairGeometry, group_number, parse_answer
from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.judge import judge
from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.benchmarks.ref_adv.demo import make_rows
from needlepoint.benchmarks.ref_adv.demo import write_release as write_ref_release
from needlepoint.cli import main
from needlepoint.core import status
from needlepoint.core.jsonfind import MAX_DEPTH, find_json, loads
from needlepoint.core.records import Record
from needlepoint.core.store import read_records
from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer, script_key
from needlepoint.run.evaluate import evaluate
from needlepoint.solvers.calls import CALLS_DIR, read_logs, sample_name

FENCE = "`" * 3
DEEP_ARRAY = "[" * 5000 + "]" * 5000
DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000
BOX = "[100, 100, 400, 400]"

# name -> (reply, the parse error MC-Bench's default solver must record, or None: any outcome but a crash)
HOSTILE: dict[str, tuple[str, str | None]] = {
    "group 1e300": (
        f'{FENCE}json\n{{"image_1": [{{"group": 1e300, "bbox_2d": {BOX}}}], "image_2": []}}\n{FENCE}',
        status.BAD_SCHEMA,
    ),
    "group of 30 digits": (
        f'{{"image_1": [{{"group": "group 123456789012345678901234567890", "bbox_2d": {BOX}}}], "image_2": []}}',
        status.BAD_SCHEMA,
    ),
    "image of 5000 digits": (f'[{{"image": "{"1" * 5000}", "group": 1, "bbox_2d": {BOX}}}]', status.BAD_SCHEMA),
    "integer literal of 5000 digits": (f'{{"image_1": [{{"group": {"9" * 5000}, "bbox_2d": {BOX}}}]}}', status.NO_JSON_FOUND),
    "huge integers in a box": (
        '{"image_1": [{"group": 1, "bbox_2d": [1, 2, 123456789012345678901234567890, 400]}], "image_2": []}',
        None,
    ),
    "NaN and Infinity": ('{"image_1": [{"group": NaN, "bbox_2d": [1, 2, Infinity, 400], "score": NaN}], "image_2": []}', None),
    "1e308 box and score": (
        '{"image_1": [{"group": 1, "bbox_2d": [1e300, 2, 1e308, 400], "score": 1e308}], "image_2": []}',
        None,
    ),
    "surrogates in keys and values": (
        f'{{"image_1": [{{"group": 1, "bbox_2d": {BOX}, "label": "\\ud800", "\\udfff": "\\udc00x"}}], "image_2": []}}',
        None,
    ),
    "5000 deep array": (DEEP_ARRAY, status.NO_JSON_FOUND),
    "5000 deep object in prose": ("The answer is " + DEEP_OBJECT, status.NO_JSON_FOUND),
    "5000 deep in a fenced block": (f"{FENCE}json\n{DEEP_ARRAY}\n{FENCE}", status.NO_JSON_FOUND),
    "depth hidden behind a quote": ('"' + DEEP_ARRAY, status.NO_JSON_FOUND),
    "a raw lone surrogate": ("\ud800 boxes \udfff", status.NO_JSON_FOUND),
}
REPLIES = [reply for reply, _ in HOSTILE.values()]


def _assert_no_internal_error(out: Path, n: int) -> dict[str, Record]:
    records = read_records(out / "records.jsonl")
    assert len(records) == n
    assert not [r["id"] for r in records.values() if r["status"] == status.INTERNAL_ERROR], [
        r.get("error") for r in records.values() if r["status"] == status.INTERNAL_ERROR
    ]
    assert all(r["status"] == status.DONE for r in records.values())
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["status"] == "complete"
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics
    assert (out / "report" / "index.html").read_text(encoding="utf-8")  # written, and valid UTF-8
    return records


def _run(serve: Any, benchmark: str, data: Path, options: dict[str, Any], script: dict[str, list[Any]], out: Path) -> None:
    server = serve(script=script, default=None)
    evaluate(
        benchmark=benchmark,
        data=data,
        model=SIMULATED_MODEL_NAME,
        api_urls=server.url,
        options=options,
        out=out,
        max_retries=0,
        show_progress=False,
    )
    assert len(server.requests) >= len(script)


# --- the parse layer ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        DEEP_ARRAY,
        DEEP_OBJECT,
        "x " + DEEP_OBJECT,
        f"{FENCE}json\n{DEEP_ARRAY}\n{FENCE}",
        '"' + DEEP_ARRAY,
        '"""' + "[" * 200_000,
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    ],
)
def test_deep_json_is_no_json(text: str) -> None:
    with pytest.raises(LookupError):
        find_json(text)


def test_json_at_the_depth_limit_and_beside_deep_prose_is_found() -> None:
    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert find_json(ok) is not None
    assert find_json(f"{FENCE}json\n{DEEP_ARRAY}\n{FENCE}\n{FENCE}json\n[1, 2]\n{FENCE}") == [1, 2]
    with pytest.raises(ValueError):
        loads(DEEP_ARRAY * 4)
    with pytest.raises(ValueError):
        loads(DEEP_ARRAY.encode() * 4)
    assert loads(b'{"a": [1]}') == {"a": [1]}


@pytest.mark.parametrize("value", [1e300, 2**31, -(2**40), "group 123456789012345678901234567890", "1" * 5000, 10**30])
def test_absurd_group_numbers_are_out_of_range(value: Any) -> None:
    with pytest.raises(OutOfRange):
        group_number(value)


@pytest.mark.parametrize(
    "value, want",
    [
        (2, 2),
        (2.0, 2),
        ("group 3", 3),
        ("007", 7),
        (float("nan"), None),
        (1.5, None),
        (True, None),
        ("none", None),
        (None, None),
        (2**31 - 1, 2**31 - 1),
    ],
)
def test_group_numbers(value: Any, want: int | None) -> None:
    assert group_number(value) == want


def test_mc_bench_parse_makes_absurd_numbers_a_parse_error() -> None:
    geometry = PairGeometry(sizes=((640.0, 480.0), (640.0, 480.0)))
    for name, (reply, error) in HOSTILE.items():
        parsed = parse_answer(reply, geometry, "norm_1000_xyxy", merged=False)
        if error is not None:
            assert parsed.error == error, name
        for box in parsed.answer or []:
            assert 1 <= box["group"] < 2**31, name


def test_reasoner_parse_makes_absurd_numbers_a_parse_error() -> None:
    assert parse_targets('{"image_1": [{"group": 1e300, "phrase": "a"}]}').error == status.BAD_SCHEMA
    assert parse_targets('{"image_1": [{"group": "g 123456789012345678901", "phrase": "a"}]}').error == status.BAD_SCHEMA
    assert parse_targets('[{"image": "' + "2" * 5000 + '", "phrase": "a"}]').error == status.BAD_SCHEMA
    assert parse_targets(DEEP_ARRAY).error == status.NO_JSON_FOUND
    assert parse_targets('{"image_1": [{"group": NaN, "phrase": "a"}]}').answer == [{"image": 0, "group": 1, "phrase": "a"}]


def test_mm_niah_judge_survives_hostile_replies() -> None:
    for reply in [*REPLIES, "9" * 5000]:
        for answer in (3, [1, 2], "red"):
            assert 0.0 <= judge(reply, answer).score <= 1.0
    assert judge("0" * 4999 + "3", 3).score == 1.0  # a number past int()'s digit limit is read, not refused


# --- whole runs: the default solver on the three benchmarks ------------------------------------------


def test_mc_bench_run_survives_hostile_replies(serve: Any, tmp_path: Path) -> None:
    folder, _ = write_mc_release(tmp_path / "data", pairs=len(HOSTILE))
    options: dict[str, Any] = {"box_format": "norm_1000_xyxy", "input_mode": "sequence"}
    bench = McBench(**options)
    samples = bench.load(folder)
    names = list(HOSTILE)
    script = {script_key(bench.prompt(s)): [HOSTILE[names[i]][0]] * 2 for i, s in enumerate(samples)}  # the repair turn too
    out = tmp_path / "run"
    _run(serve, "mc_bench", folder, options, script, out)
    records = _assert_no_internal_error(out, len(samples))
    for i, s in enumerate(samples):
        want = HOSTILE[names[i]][1]
        if want is not None:
            rec = records[s.id]
            assert rec["parse_error"] == want and rec["repair_used"], names[i]
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert sum(metrics["parse_errors"].values()) >= sum(1 for _, e in HOSTILE.values() if e is not None)


def test_ref_adv_run_survives_hostile_replies(serve: Any, tmp_path: Path) -> None:
    rows = make_rows(len(HOSTILE))
    folder = write_ref_release(tmp_path / "data", rows)
    options: dict[str, Any] = {"box_format": "abs_xyxy", "prompt_mode": "direct"}
    bench = RefAdv(**options)
    samples = bench.load(folder)
    # Ref-Adv-s replies name boxes under "bbox_2d" in a list: the same hostile values, in its shape
    replies = [r.replace('"image_1": ', '"boxes": ') for r in REPLIES]
    script = {script_key(bench.prompt(s)): [replies[i % len(replies)]] * 2 for i, s in enumerate(samples)}
    out = tmp_path / "run"
    _run(serve, "ref_adv_s", folder, options, script, out)
    _assert_no_internal_error(out, len(samples))
    assert (out / "predictions_ref_adv.jsonl").read_text(encoding="utf-8")


def test_mm_niah_run_survives_hostile_replies(serve: Any, tmp_path: Path) -> None:
    folder, options, _ = small_niah(tmp_path / "data")
    bench = MmNiah(**options)
    samples = bench.load(folder)
    replies = [*REPLIES, "9" * 5000, "[" + "9" * 5000 + "]"]
    script = {script_key(bench.prompt(s)): [replies[i % len(replies)]] for i, s in enumerate(samples)}
    out = tmp_path / "run"
    _run(serve, "mm_niah", folder, options, script, out)
    _assert_no_internal_error(out, len(samples))


# --- the agentic solver's reasoner -------------------------------------------------------------------

REASONER, LOCALIZER = "sim/reasoner", "sim/localizer"
SURROGATE_PHRASE = '{"image_1": [{"group": 1, "phrase": "\\ud800 the shape"}], "image_2": []}'
REASONER_REPLIES = {
    "group 1e300": ('{"image_1": [{"group": 1e300, "phrase": "the shape"}], "image_2": []}', status.BAD_SCHEMA),
    "group of 30 digits": ('{"image_1": [{"group": "group 123456789012345678901234567890", "phrase": "a"}]}', status.BAD_SCHEMA),
    "5000 deep": (DEEP_ARRAY, status.NO_JSON_FOUND),
    "5000 deep in a fence": (f"{FENCE}json\n{DEEP_OBJECT}\n{FENCE}", status.NO_JSON_FOUND),
    "integer literal of 5000 digits": ('{"image_1": [{"group": ' + "7" * 5000 + ', "phrase": "a"}]}', status.NO_JSON_FOUND),
    "surrogate in a phrase": (SURROGATE_PHRASE, None),
    "surrogate in a key, NaN group": ('{"image_2": [{"group": NaN, "phrase": "the \\udfff", "\\ud801": 1}]}', None),
}


def _agentic(folder: Path, reasoner: str, localizer: str, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "mc_bench",
        "--data",
        str(folder),
        "--model",
        REASONER,
        "--api-url",
        reasoner,
        "--solver",
        "agentic",
        "--localizer",
        f"vlm:{LOCALIZER}",
        "--localizer-url",
        localizer,
        "--box-format",
        "norm_1000_xyxy",
        "--out",
        str(out),
        "--no-progress",
        "--max-retries",
        "0",
        *extra,
    ]


def test_agentic_reasoner_replies_never_make_an_internal_error(serve: Any, tmp_path: Path) -> None:
    """The reasoner names absurd groups, nests JSON 5,000 deep, puts lone surrogates in phrases and
    keys; the localizer first fails every call (so the partial cache of a surrogate phrase is
    written), then answers: the run ends complete, the report written, nothing `internal_error`."""
    folder, _ = write_mc_release(tmp_path / "data", pairs=len(REASONER_REPLIES))
    samples = McBench(box_format="norm_1000_xyxy").load(folder)
    names = list(REASONER_REPLIES)
    script = {script_key(reasoner_prompt(s)): [REASONER_REPLIES[names[i]][0]] * 2 for i, s in enumerate(samples)}
    reasoner = serve(script=script, default=None, models=(REASONER,))
    broken = serve(default=None, models=(LOCALIZER,), failing=True)
    out = tmp_path / "run"
    assert main(_agentic(folder, reasoner.url, broken.url, out)) == 3  # the localizer's failures: retryable
    records = read_records(out / "records.jsonl")
    assert len(records) == len(samples)
    assert not [r for r in records.values() if r["status"] == status.INTERNAL_ERROR], [r.get("error") for r in records.values()]
    surrogate = samples[names.index("surrogate in a phrase")]
    assert records[surrogate.id]["status"] == status.BACKEND_ERROR
    failed = [r for r in records.values() if r["status"] in status.FAILED]
    kept = read_logs(out / CALLS_DIR)  # each failed sample keeps its answered calls, and only those
    assert set(kept) == {sample_name(str(r["id"])) for r in failed} and len(failed) >= 2

    localizer = serve(default='{"bbox_2d": [100, 100, 400, 400]}', models=(LOCALIZER,))
    asked = len(reasoner.requests)
    assert main(_agentic(folder, reasoner.url, localizer.url, out, "--retry-failed")) == 0
    assert len(reasoner.requests) == asked  # the saved reasoner turns were reused, not paid again
    records = _assert_no_internal_error(out, len(samples))
    for i, s in enumerate(samples):
        want = REASONER_REPLIES[names[i]][1]
        if want is not None:
            assert records[s.id]["parse_error"] == want and records[s.id]["repair_used"], names[i]
    rec = records[surrogate.id]
    assert rec["parse_error"] is None and [n["phrase"] for n in rec["solver"]["targets"]] == ["\ud800 the shape"]
    page = (out / "report" / "index.html").read_text(encoding="utf-8")
    assert "\ufffd the shape" in page


# --- the HTTP answer itself ----------------------------------------------------------------------------


class _DeepServer(SimulatedServer):
    """Answers every chat request with a body nested 5,000 deep: a 200 chat completion carrying the
    deep value beside its message, or a 400 error body made of it (every other request)."""

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        await super()._chat(request)  # answered as usual (recorded before), the answer dropped
        if len(self.requests) % 2:
            body = '{"choices": [{"message": {"content": "x"}, "extra": ' + DEEP_ARRAY + "}]}"
            return web.Response(text=body, content_type="application/json")
        return web.Response(status=400, text='{"error": ' + DEEP_ARRAY + "}", content_type="application/json")


def test_an_answer_body_nested_5000_deep_is_a_failed_request(tmp_path: Path) -> None:
    rows = make_rows(4)
    folder = write_ref_release(tmp_path / "data", rows)
    server = _DeepServer(default=None, models=(SIMULATED_MODEL_NAME,), keep_requests=True).start()
    try:
        result = evaluate(
            benchmark="ref_adv_s",
            data=folder,
            model=SIMULATED_MODEL_NAME,
            api_urls=server.url,
            options={"box_format": "abs_xyxy"},
            out=tmp_path / "run",
            max_retries=0,
            show_progress=False,
        )
    finally:
        server.stop()
    records = read_records(tmp_path / "run" / "records.jsonl")
    kinds = sorted(r["status"] for r in records.values())
    assert status.INTERNAL_ERROR not in kinds and set(kinds) == {status.BACKEND_ERROR, status.REQUEST_REJECTED}, kinds
    assert result.metrics is not None


def test_merge_writes_records_with_lone_surrogates(serve: Any, tmp_path: Path) -> None:
    """Shards whose records hold a parsed phrase with a lone surrogate merge into one folder (the
    merged records written by the store's writer), its report included."""
    from needlepoint.run.merge import merge

    folder, _ = write_mc_release(tmp_path / "data", pairs=4)
    samples = McBench(box_format="norm_1000_xyxy").load(folder)
    reasoner = serve(default=SURROGATE_PHRASE, models=(REASONER,))
    localizer = serve(default='{"bbox_2d": [100, 100, 400, 400]}', models=(LOCALIZER,))
    shards = [tmp_path / f"s{k}" for k in (1, 2)]
    for k, out in enumerate(shards, 1):
        assert main(_agentic(folder, reasoner.url, localizer.url, out, "--shard", f"{k}/2", "--no-report")) == 0
    merged = tmp_path / "merged"
    merge(shards, merged)
    records = read_records(merged / "records.jsonl")
    assert len(records) == len(samples)
    assert {n["phrase"] for r in records.values() for n in r["solver"]["targets"]} == {"\ud800 the shape"}
    assert "\ufffd the shape" in (merged / "report" / "index.html").read_text(encoding="utf-8")


# --- a reply without text: one rule in every benchmark (core/status.py) ------------------------------


def _null_content_run(serve: Any, tmp_path: Path, benchmark: str) -> tuple[dict[str, Record], list[str]]:
    """A run of `benchmark` whose first sample's replies have `content: null` (and no thinking),
    the second's `content: null` beside a reasoning model's thinking, the third's white space."""
    if benchmark == "mm_niah":
        folder, options, _ = small_niah(tmp_path / "data")
        bench: Any = MmNiah(**options)
    elif benchmark == "mc_bench":
        folder, _ = write_mc_release(tmp_path / "data", pairs=3)
        options = {"box_format": "norm_1000_xyxy", "input_mode": "sequence"}
        bench = McBench(**options)
    else:
        folder = write_ref_release(tmp_path / "data", make_rows(3))
        options = {"box_format": "abs_xyxy", "prompt_mode": "direct"}
        bench = RefAdv(**options)
    samples = list(bench.load(folder))[:3]
    answers: list[Any] = [{"text": None}, {"text": None, "reasoning": "let me think about"}, " \n "]
    script = {script_key(bench.prompt(s)): [answers[i]] * 2 for i, s in enumerate(samples)}
    out = tmp_path / "run"
    _run(serve, benchmark, folder, options, script, out)
    return read_records(out / "records.jsonl"), [s.id for s in samples]


@pytest.mark.parametrize("benchmark", ["mm_niah", "mc_bench", "ref_adv_s"])
def test_a_reply_without_text_is_empty_response_or_no_content_everywhere(serve: Any, tmp_path: Path, benchmark: str) -> None:
    records, ids = _null_content_run(serve, tmp_path, benchmark)
    assert records[ids[0]]["parse_error"] == status.EMPTY_RESPONSE  # content null, no thinking
    assert records[ids[1]]["parse_error"] == status.NO_CONTENT  # content null, the thinking ran out
    assert records[ids[2]]["parse_error"] == status.EMPTY_RESPONSE  # white space only
    assert all(records[i]["status"] == status.DONE and records[i].get("answer") in (None, []) for i in ids[:3])
