"""The answer schemas of `--structured-output` are bounded (boxschema.py): every array has maxItems,
every number a minimum and a maximum, every string a maxLength, so that a constrained reply cannot
run on forever; `structured.longest_reply` is the bound; the caps admit every real answer in the
reference data; and `--serve vllm --structured-output` starts vLLM without free JSON whitespace."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import run_cli
from helpers.fake_vllm import fake_env, write_fake_vllm
from helpers.paths import REF_ADV_PREDICTIONS, TEST_DATA

from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.contract.boxschema import (
    ABS_MAX,
    MAX_GROUP,
    MC_MAX_BOXES,
    PHRASE_MAX_CHARS,
    REF_ADV_MAX_BOXES,
    boxes_object,
    image_lists,
    mc_box_item,
    phrase_item,
    ref_adv_schema,
)
from needlepoint.core.geometry import BOX_FORMATS
from needlepoint.core.structured import COMPACT_JSON_FLAGS, FRACTION_DIGITS, longest_reply
from needlepoint.serve.command import ServeSpec, server_command


def _longest(schema: dict[str, Any]) -> Any:
    """The longest value that follows a bounded schema (the widest number, the fullest list)."""
    kind = schema["type"]
    if kind == "object":
        return {k: _longest(v) for k, v in schema["properties"].items()}
    if kind == "array":
        return [_longest(schema["items"]) for _ in range(schema["maxItems"])]
    if kind == "integer":
        return schema["maximum"]
    if kind == "number":  # the most digits xgrammar allows below the maximum 1: "0." and FRACTION_DIGITS
        return float("0." + "9" * FRACTION_DIGITS)
    return "\\u00e9" * schema["maxLength"]  # a backslash escape a character, unescaped once below


def _every_schema() -> list[dict[str, Any]]:
    schemas = []
    for fmt in BOX_FORMATS:
        schemas += [RefAdv(box_format=fmt).answer_schema(), McBench(box_format=fmt).answer_schema()]
        schemas.append(McBench(box_format=fmt, input_mode="merged").answer_schema())
    schemas += [image_lists(phrase_item()), image_lists(phrase_item(), 3)]
    return [s for s in schemas if s is not None]


def _walk(schema: dict[str, Any]) -> list[dict[str, Any]]:
    parts = [schema]
    for sub in schema.get("properties", {}).values():
        parts += _walk(sub)
    if "items" in schema:
        parts += _walk(schema["items"])
    return parts


@pytest.mark.parametrize("schema", _every_schema(), ids=lambda s: ",".join(s["properties"]))
def test_every_answer_schema_is_bounded(schema: dict[str, Any]) -> None:
    for part in _walk(schema):
        kind = part["type"]
        assert kind != "array" or "maxItems" in part, part
        assert kind not in ("integer", "number") or {"minimum", "maximum"} <= set(part), part
        assert kind != "string" or "maxLength" in part, part
        assert kind != "object" or part["additionalProperties"] is False, part
    assert 0 < longest_reply(schema) < 60_000


def test_the_bound_is_the_longest_compact_reply() -> None:
    for fmt in BOX_FORMATS:
        for schema in (ref_adv_schema(fmt), image_lists(mc_box_item(fmt)), boxes_object(mc_box_item(fmt))):
            text = json.dumps(_longest(schema), separators=(",", ":"))
            assert len(text) == longest_reply(schema), fmt  # exact: no reply that follows the schema is longer
    assert longest_reply(ref_adv_schema("abs_xyxy")) == 272
    phrases = image_lists(phrase_item(), 2)
    escaped = json.dumps(_longest(phrases), separators=(",", ":")).replace("\\\\", "\\")
    assert len(escaped) == longest_reply(phrases)  # each character as a 6-byte \uXXXX escape: exact


def test_unbounded_schemas_are_named() -> None:
    for schema, says in (
        ({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}}, "maxItems"),
        ({"type": "integer", "minimum": 1}, "minimum and maximum"),
        ({"type": "string", "minLength": 1}, "maxLength"),
        ({"type": "object", "properties": {}}, "additional properties"),
    ):
        with pytest.raises(ValueError, match=says):
            longest_reply(schema)


def test_coordinates_follow_the_box_format() -> None:
    def coordinate(fmt: str) -> dict[str, Any]:
        items: dict[str, Any] = ref_adv_schema(fmt)["properties"]["bboxes"]["items"]["items"]
        return items

    assert coordinate("abs_xyxy") == {"type": "integer", "minimum": 0, "maximum": ABS_MAX}
    assert coordinate("norm_1000_xyxy") == {"type": "integer", "minimum": 0, "maximum": 1000}
    assert coordinate("norm_1_xyxy") == {"type": "number", "minimum": 0, "maximum": 1}
    assert RefAdv(answer_format="grounding-tokens").answer_schema() is None  # not JSON


def test_the_agentic_schema_caps_each_image_at_max_phrases() -> None:
    from needlepoint.benchmarks.mc_bench.agentic_solver import DEFAULT_MAX_PHRASES

    schema = image_lists(phrase_item(), DEFAULT_MAX_PHRASES)
    assert schema["properties"]["image_1"]["maxItems"] == DEFAULT_MAX_PHRASES
    assert schema["properties"]["image_1"]["items"]["properties"]["phrase"]["maxLength"] == PHRASE_MAX_CHARS


def test_the_caps_admit_every_real_answer() -> None:
    """Ref-Adv-s: Qwen2.5-VL-72B's published pixel boxes; MC-Bench v0.2: its ground truth, as
    boxes per image, per pair (merged canvas), group numbers and pixel coordinates."""
    rows = [json.loads(line) for line in REF_ADV_PREDICTIONS.read_text(encoding="utf-8").splitlines()]
    boxes = [r["pred_box_xyxy_first"] for r in rows if r["pred_box_xyxy_first"]]
    assert len(boxes) > 1000
    assert all(v == int(v) and 0 <= v <= ABS_MAX for b in boxes for v in b)  # whole pixels: the integer schema holds
    coco = json.loads((TEST_DATA / "mc-bench" / "MC-Bench_coco_format.json").read_text(encoding="utf-8"))
    per_image = Counter(a["image_id"] for a in coco["annotations"])
    per_pair = Counter(a["pair_id"] for a in coco["annotations"])
    assert max(per_image.values()) <= MC_MAX_BOXES and max(per_pair.values()) <= 2 * MC_MAX_BOXES
    assert max(a["category_id"] for a in coco["annotations"]) <= MAX_GROUP
    assert max(max(i["width"], i["height"]) for i in coco["images"]) * 2 <= ABS_MAX  # even two side by side
    assert REF_ADV_MAX_BOXES >= 1


def test_the_vllm_command_drops_free_json_whitespace_only_when_asked() -> None:
    spec = ServeSpec("model", "vllm", "m")
    assert server_command(spec, ["vllm", "serve"], 1, compact_json=True)[-2:] == list(COMPACT_JSON_FLAGS)
    assert COMPACT_JSON_FLAGS[0] not in server_command(spec, ["vllm", "serve"], 1)
    own = ServeSpec("model", "vllm", "m", args=("--structured-outputs-config", '{"backend": "guidance"}'))
    cmd = server_command(own, ["vllm", "serve"], 1, compact_json=True)
    assert cmd.count(COMPACT_JSON_FLAGS[0]) == 1 and cmd[-1] == '{"backend": "guidance"}'  # the user's own wins
    assert json.loads(COMPACT_JSON_FLAGS[1]) == {"backend": "xgrammar", "disable_any_whitespace": True}


def test_serve_vllm_with_structured_output_starts_vllm_without_free_whitespace(ref_release: Any, tmp_path: Path) -> None:
    exe, state = write_fake_vllm(tmp_path)
    base = ["eval", "ref_adv_s", "--data", str(ref_release[0]), "--model", "org/m", "--box-format", "abs_xyxy"]
    base += ["--serve", "vllm", "--serve-bin", str(exe), "--max-retries", "0", "--no-report", "--limit", "2"]
    commands = {}
    for name, extra in (("schema", ["--structured-output"]), ("plain", [])):
        out = tmp_path / name
        proc = run_cli([*base, "--out", str(out), *extra], env=fake_env(state))
        assert proc.returncode in (0, 3), proc.stderr
        commands[name] = json.loads((out / "run.json").read_text())["config"]["serve"]["servers"][0]["command"]
    cmd = commands["schema"]
    assert json.loads(cmd[cmd.index(COMPACT_JSON_FLAGS[0]) + 1])["disable_any_whitespace"] is True
    assert COMPACT_JSON_FLAGS[0] not in commands["plain"]
