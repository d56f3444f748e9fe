"""`--structured-output` (structured.py) against the simulated server: each request body carries
the answer's JSON schema as `response_format` json_schema (never vLLM's old guided_json keys);
the schema is the main model's only (the agentic localizer's requests go without); the setting is
part of the run identity, and the leaderboard shows such runs as their own rows ("+ schema")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers import one_sentence, ref_eval_args, run_quiet, scripted_ref_release, small_niah
from helpers.agentic import FMT, agentic_args, scripts

from needlepoint.benchmarks.mc_bench.agentic_solver import DEFAULT_MAX_PHRASES
from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.mc_bench.demo import write_release
from needlepoint.contract.boxschema import image_lists, mc_box_item, phrase_item, ref_adv_schema
from needlepoint.report.leaderboard import build_boards, read_run


def _header(out: Path) -> dict[str, Any]:
    header: dict[str, Any] = json.loads((out / "run.json").read_text(encoding="utf-8"))
    return header


def test_request_bodies_carry_the_answer_schema(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=4)
    server = serve(script=script)
    out = tmp_path / "schema"
    rc, err = run_quiet(ref_eval_args(data, server.url, out, "--no-report", "--structured-output", model="sim-model"))
    assert rc in (0, 3), err
    bodies = server.bodies()
    assert len(bodies) >= 4
    for body in bodies:  # the repair turns too: the same question, the same shape
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "ref_adv_s", "schema": ref_adv_schema("abs_xyxy"), "strict": True},
        }
        assert not any(k.startswith("guided_") or k == "structured_outputs" for k in body)
    header = _header(out)
    assert header["identity"]["structured_output"] is True and header["config"]["structured_output"] is True
    assert header["sampling_sent"][0]["response_format"]["json_schema"]["schema"] == ref_adv_schema("abs_xyxy")

    plain = tmp_path / "plain"
    rc, err = run_quiet(ref_eval_args(data, server.url, plain, "--no-report", model="sim-model"))
    assert rc in (0, 3), err
    assert "response_format" not in server.bodies()[-1] and "structured_output" not in _header(plain)["identity"]
    assert _header(plain)["hash"] != header["hash"]  # another protocol, another run

    rows = [r for b in build_boards([read_run(out), read_run(plain)]) for r in b.rows]
    labels = {r.labels[0] for r in rows}
    assert labels == {"sim-model + schema", "sim-model"}  # two rows, never one


def test_mc_bench_schema_follows_the_input_mode(tmp_path: Path) -> None:
    assert McBench(box_format="norm_1000_xyxy").answer_schema() == image_lists(mc_box_item("norm_1000_xyxy"))
    merged = McBench(box_format="norm_1000_xyxy", input_mode="merged").answer_schema()
    assert merged is not None and list(merged["properties"]) == ["boxes"]
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Find {text}", encoding="utf-8")
    assert McBench(box_format="norm_1000_xyxy", prompt_file=str(prompt)).answer_schema() is None


def test_agentic_reasoner_gets_the_phrase_schema_and_the_localizer_none(serve: Any, tmp_path: Path) -> None:
    from helpers.agentic import LOCALIZER, REASONER

    folder, _ = write_release(tmp_path / "mc", pairs=3)
    bench = McBench(box_format=FMT)
    reasoner_script, localizer_script = scripts(bench, bench.load(folder))
    reasoner = serve(script=reasoner_script, default=None, models=(REASONER,))
    localizer = serve(script=localizer_script, default=None, models=(LOCALIZER,))
    rc, err = run_quiet([*agentic_args(folder, reasoner.url, localizer.url, tmp_path / "run"), "--structured-output"])
    assert rc == 0, err
    assert reasoner.bodies() and localizer.bodies()
    for body in reasoner.bodies():
        assert body["response_format"]["json_schema"]["schema"] == image_lists(phrase_item(), DEFAULT_MAX_PHRASES)
    assert all("response_format" not in body for body in localizer.bodies())


def test_benchmark_without_json_answers_refuses_the_flag(serve: Any, tmp_path: Path) -> None:
    data, _, script = small_niah(tmp_path)
    server = serve(script=script)
    out = tmp_path / "run"
    args = ["eval", "mm_niah", "--data", str(data), "--model", "sim-model", "--api-url", server.url, "--out", str(out)]
    rc, err = run_quiet([*args, "--no-progress", "--structured-output"])
    assert rc == 2 and "has none (its answers are not JSON); drop --structured-output" in one_sentence(err)
    assert not out.exists() and not server.log


def test_extra_body_response_format_and_the_flag_conflict(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=2)
    server = serve(script=script)
    extra = ["--extra-body", '{"response_format": {"type": "json_object"}}', "--structured-output"]
    rc, err = run_quiet(ref_eval_args(data, server.url, tmp_path / "run", "--no-report", *extra, model="sim-model"))
    assert rc == 2 and "pass one of them" in one_sentence(err)
