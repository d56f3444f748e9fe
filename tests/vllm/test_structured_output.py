"""`--structured-output` through a real vLLM: the answer schema goes out as `response_format`
json_schema (never the old guided_json keys), vLLM constrains decoding to it, and every reply of
the tiny random Qwen2.5-VL (as the model, and as the agentic solver's reasoner) then parses as the
answer, with --max-tokens at the schema's length bound (`structured.longest_reply`). The schemas
are bounded (boxschema.py) and the session's
open server runs without free JSON whitespace, as `--serve vllm --structured-output` starts vLLM,
so a model that writes at random must still close its JSON before the token limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from needlepoint.benchmarks.mc_bench import demo as mc_bench
from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.ref_adv import demo as ref_adv
from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.contract.boxschema import image_lists, phrase_item
from needlepoint.core.status import DONE
from needlepoint.core.structured import longest_reply

from .conftest import MODEL_NAME, Servers, needlepoint, read_records

pytestmark = pytest.mark.vllm

LIMIT = 3


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str], dict[str, Any]]]:
    """Each benchmark's demo release, its options, and the schema those options give."""
    root = tmp_path_factory.mktemp("structured-releases")
    ref = ref_adv.write_release(root / "ref_adv_s", ref_adv.make_rows(LIMIT))
    mc, _ = mc_bench.write_release(root / "mc_bench", pairs=LIMIT)
    ref_schema = RefAdv(box_format="abs_xyxy").answer_schema()
    mc_schema = McBench(box_format="norm_1000_xyxy").answer_schema()
    assert ref_schema is not None and mc_schema is not None
    return {
        "ref_adv_s": (ref, ["--box-format", "abs_xyxy", "--prompt-mode", "direct"], ref_schema),
        "mc_bench": (mc, ["--box-format", "norm_1000_xyxy", "--input-mode", "sequence"], mc_schema),
    }


@pytest.mark.parametrize("benchmark", ["ref_adv_s", "mc_bench"])
def test_every_reply_parses_under_the_schema(
    benchmark: str, releases: dict[str, tuple[Path, list[str], dict[str, Any]]], servers: Servers, tmp_path: Path
) -> None:
    data, options, schema = releases[benchmark]
    bound = longest_reply(schema)  # a reply that follows the schema has at most this many bytes, so tokens
    out = tmp_path / "run"
    args = ["eval", benchmark, "--data", str(data), "--model", MODEL_NAME, "--api-url", servers.open.url]
    args += ["--limit", str(LIMIT), "--max-tokens", str(bound), "--temperature", "1", "--seed", "7"]
    proc = needlepoint([*args, "--out", str(out), "--no-progress", "--no-report", "--structured-output", *options])
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(out)
    assert len(records) == LIMIT
    keys = {"bboxes"} if benchmark == "ref_adv_s" else {"image_1", "image_2"}
    for rec in records:
        assert rec["status"] == DONE, rec
        assert rec["parse_error"] is None and not rec["repair_used"], rec
        assert len(rec["turns"]) == 1, rec
        first = rec["turns"][0]
        assert first["finish_reason"] == "stop", first  # the grammar closed the JSON before the token limit
        assert first["usage"]["completion_tokens"] <= bound, first
        value = json.loads(first["reply"])  # the whole reply is the JSON object, nothing around it
        assert set(value) == keys, value
        assert " " not in first["reply"] and "\n" not in first["reply"], first["reply"]  # no free whitespace
    header = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert header["identity"]["structured_output"] is True
    sent = header["sampling_sent"][0]
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": benchmark, "schema": schema, "strict": True},
    }
    assert not any(k.startswith("guided_") for k in sent), sent


def test_the_agentic_reasoner_replies_parse_under_the_phrase_schema(
    releases: dict[str, tuple[Path, list[str], dict[str, Any]]], servers: Servers, tmp_path: Path
) -> None:
    """The agentic solver's reasoner under its phrase schema (at most --max-phrases 2 an image), the
    same server as its `vlm:` localizer, whose requests go without the schema."""
    data = releases["mc_bench"][0]
    schema = image_lists(phrase_item(), 2)
    bound = longest_reply(schema)
    out = tmp_path / "run"
    args = ["eval", "mc_bench", "--data", str(data), "--model", MODEL_NAME, "--api-url", servers.open.url]
    args += ["--solver", "agentic", "--localizer", f"vlm:{MODEL_NAME}", "--localizer-url", servers.open.url]
    args += ["--max-phrases", "2", "--box-format", "abs_xyxy", "--limit", "2", "--max-tokens", str(bound)]
    args += ["--temperature", "1", "--seed", "7", "--out", str(out), "--no-progress", "--no-report", "--structured-output"]
    proc = needlepoint(args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(out)
    assert len(records) == 2
    for rec in records:
        reasoner = [t for t in rec["turns"] if t["role"] == "model"]
        assert len(reasoner) == 1, rec  # no repair turn: the first reply parsed
        assert reasoner[0]["finish_reason"] == "stop" and reasoner[0]["usage"]["completion_tokens"] <= bound, reasoner
        assert set(json.loads(reasoner[0]["reply"])) == {"image_1", "image_2"}
        assert rec["parse_error"] is None, rec
    header = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert header["sampling_sent"][0]["response_format"]["json_schema"]["schema"] == schema
