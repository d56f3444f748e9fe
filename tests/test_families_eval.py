"""`needlepoint eval ... --model-family NAME` end to end against a simulated OpenAI-compatible
server on 127.0.0.1 (tests/conftest.py `serve`), its replies scripted per prompt in the family's
own syntax: Ref-Adv-s with InternVL's replies (tokens kept and stripped) scores Acc@0.5 exactly as
the boxes give it, a reply in Qwen2-VL's tokens gets a repair turn in InternVL's syntax; MC-Bench
with PaliGemma (one merged picture, every box group 1) scores through the official scorer; what
the requests carry for Qwen3-VL (its prompt before the image), Florence-2 (special tokens kept)
and Ferret (its system message)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import records, run_quiet, scripted_ref_release

from needlepoint.benchmarks.mc_bench.benchmark import McBench, McSample
from needlepoint.benchmarks.mc_bench.scoring import score_results
from needlepoint.benchmarks.ref_adv import RefAdv
from needlepoint.benchmarks.ref_adv.parse import repair_text
from needlepoint.contract.boxoptions import BoxOptions
from needlepoint.core.geometry import xyxy_to_xywh
from needlepoint.families import family
from needlepoint.models.simulated import script_key


def iou(a: list[float], b: list[float]) -> float:
    """IoU of two xyxy boxes, written out here so that the expectation does not lean on the code tested."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = w * h if w > 0 and h > 0 else 0.0
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if inter > 0 else 0.0


def user_text(bench: Any, sample: Any) -> str:
    """The text the simulated server finds a sample's replies by: its user message's text."""
    conv = bench.prompt(sample)
    return str(next(m for m in conv.messages if m.role == "user").text)


def eval_args(bench: str, data: Path, url: str, out: Path, *extra: str) -> list[str]:
    args = ["eval", bench, "--data", str(data), "--model", "org/m", "--api-url", url, "--no-progress"]
    return [*args, "--max-retries", "0", "--out", str(out), "--no-report", *extra]


def internvl_numbers(row: dict[str, Any], shift: float = 0.0) -> list[int]:
    """The row's target on InternVL's 0-1000 grid, moved right by `shift` of its width (a miss)."""
    x1, y1, x2, y2 = row["solution"]
    w, h = float(row["width"]), float(row["height"])
    dx = shift * (x2 - x1)
    return [round((x1 + dx) / w * 1000), round(y1 / h * 1000), round((x2 + dx) / w * 1000), round(y2 / h * 1000)]


def test_ref_adv_with_internvl_scores_its_replies_exactly(tmp_path: Path, serve: Any) -> None:
    """InternVL's replies with their tokens (`<ref>..</ref><box>[[..]]</box>`, issue #227's format) and as
    vLLM returns them by default (tokens stripped: `target[[..]]`), some moved off their target: Acc@0.5
    is the hits of the boxes as InternVL's evaluator reads them (/1000 of each side)."""
    data, rows, _, _ = scripted_ref_release(tmp_path, n=8)
    bench = RefAdv(model_family="internvl")
    samples = bench.load(data)
    script: dict[str, list[Any]] = {}
    hits = 0
    for i, (sample, row) in enumerate(zip(samples, rows, strict=True)):
        numbers = internvl_numbers(row, shift=0.6 if i % 3 == 2 else 0.0)
        box = "[[{}, {}, {}, {}]]".format(*numbers)
        reply = f"<ref>target</ref><box>{box}</box>" if i % 2 == 0 else f"target{box}"
        script[user_text(bench, sample)] = [reply]
        w, h = float(row["width"]), float(row["height"])
        read = [numbers[0] / 1000 * w, numbers[1] / 1000 * h, numbers[2] / 1000 * w, numbers[3] / 1000 * h]
        hits += iou(read, [float(v) for v in row["solution"]]) >= 0.5
    assert 0 < hits < len(rows)  # the moved boxes miss, the others hit
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    rc, err = run_quiet(eval_args("ref_adv_s", data, server.url, out, "--model-family", "internvl"))
    assert rc == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["acc@0.5"] == hits / len(rows)
    recs = records(out)
    assert all(r["parse_error"] is None and r["repair_used"] is False for r in recs)
    header = json.loads((out / "run.json").read_text())
    assert header["identity"]["option.model_family"] == "internvl"
    assert header["identity"]["option.answer_format"] == "internvl"
    # InternVL's own prompt, as its evaluator asks (the image first), greedy with 100 new tokens
    body = server.bodies()[0]
    content = body["messages"][0]["content"]
    assert [p["type"] for p in content] == ["image_url", "text"]
    assert content[1]["text"].startswith(
        "Please provide the bounding box coordinate of the region this sentence describes: <ref>"
    )
    assert body["temperature"] == 0.0 and body["max_tokens"] == 100


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [s for v in value for s in _strings(v)] if isinstance(value, list) else []


def test_a_reply_in_qwen2_tokens_gets_internvls_repair_turn(tmp_path: Path, serve: Any) -> None:
    """A reply in Qwen2-VL's grounding tokens to an InternVL run is no InternVL answer (wrong_syntax, not
    numbers); the repair turn asks for InternVL's `<box>[[x1, y1, x2, y2]]</box>` and the repaired reply
    scores."""
    data, rows, _, _ = scripted_ref_release(tmp_path, n=2)
    bench = RefAdv(model_family="internvl")
    samples = bench.load(data)
    first = internvl_numbers(rows[0])
    qwen2 = "<|object_ref_start|>target<|object_ref_end|><|box_start|>({},{}),({},{})<|box_end|>".format(*first)
    script = {
        user_text(bench, samples[0]): [qwen2, "<ref>target</ref><box>[[{}, {}, {}, {}]]</box>".format(*first)],
        user_text(bench, samples[1]): [qwen2],  # never repaired: a parse error, no box
    }
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    rc, err = run_quiet(eval_args("ref_adv_s", data, server.url, out, "--model-family", "internvl"))
    assert rc == 0, err
    by_id = {r["id"]: r for r in records(out)}
    repaired, failed = by_id[samples[0].id], by_id[samples[1].id]
    assert repaired["repair_used"] is True and repaired["parse_error"] is None and repaired["scores"]["hit"] is True
    repair = repair_text(BoxOptions.from_flags(model_family="internvl"))
    assert "<box>[[x1, y1, x2, y2]]</box>" in repair and "0-1000" in repair
    assert repair in _strings(repaired["turns"][1])
    assert failed["repair_used"] is True and failed["parse_error"] == "wrong_syntax" and failed["answer"] is None
    assert failed["scores"]["hit"] is False
    # the repair turn went to the server after the first reply
    second = [b for b in server.bodies() if len(b["messages"]) == 3]
    assert len(second) == 2 and all(b["messages"][2]["content"] == repair for b in second)


def paligemma_reply(sample: McSample, truth: Any) -> tuple[str, list[dict[str, Any]]]:
    """PaliGemma's answer to `detect ...` on the merged picture, every target of the pair as four
    <locNNNN> (y first, round(v * 1023) of the canvas, as big_vision encodes boxes) and its label, ` ; `
    between detections (Google's docs); and the COCO results it must give: each box read back (/1023),
    in the image holding its centre, group 1 (PaliGemma numbers no groups)."""
    (w1, h1), (w2, h2) = sample.geometry.sizes
    band = sample.geometry.band
    cw, ch = w1 + band + w2, max(h1, h2)
    parts, results = [], []
    for k, image_id in enumerate(sample.image_ids):
        dx = 0.0 if k == 0 else w1 + band
        w, h = sample.geometry.sizes[k]
        for b in truth.boxes:
            if b.image_id != image_id:
                continue
            x, y, bw, bh = b.bbox
            locs = [
                round(y / ch * 1023),
                round((x + dx) / cw * 1023),
                round((y + bh) / ch * 1023),
                round((x + bw + dx) / cw * 1023),
            ]
            parts.append("".join(f"<loc{v:04d}>" for v in locs) + " target")
            read = [locs[1] / 1023 * cw - dx, locs[0] / 1023 * ch, locs[3] / 1023 * cw - dx, locs[2] / 1023 * ch]
            read = [min(max(read[0], 0.0), w), min(read[1], h), min(max(read[2], 0.0), w), min(read[3], h)]
            results.append({"image_id": image_id, "category_id": 1, "bbox": xyxy_to_xywh(read), "score": 1.0})
    # no target: nothing detected (constructed: PaliGemma's docs print no empty detection; `none` is the
    # answer the family's repair turn asks for)
    return (" ; ".join(parts) if parts else "none"), results


def test_mc_bench_with_paligemma_scores_through_the_official_scorer(tmp_path: Path, serve: Any) -> None:
    from needlepoint.benchmarks.mc_bench.demo import write_release

    folder, _ = write_release(tmp_path / "mc")
    bench = McBench(model_family="paligemma")
    assert bench.input_mode == "merged"
    dataset = bench.load(folder)
    truth = dataset.truth
    script, expected = {}, []
    for sample in dataset:
        reply, results = paligemma_reply(sample, truth)
        script[script_key(bench.prompt(sample))] = [reply]
        expected += results
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    rc, err = run_quiet(eval_args("mc_bench", folder, server.url, out, "--model-family", "paligemma"))
    assert rc == 0, err
    recs = records(out)
    assert all(r["parse_error"] is None for r in recs)
    assert {b["group"] for r in recs for b in r["answer"] or []} == {1}
    metrics = json.loads((out / "metrics.json").read_text())
    want = score_results(truth, expected, [s.id for s in dataset])
    assert metrics["official"]["ap50"] == pytest.approx(want["official"]["ap50"], abs=1e-12)
    assert metrics["official"]["acc"] == want["official"]["acc"]
    assert metrics["official"]["acc"] == 1.0  # every positive image boxed, nothing on the negatives
    # the pairs asking for two groups lose group 2's AP: the board says "groups as 1"
    assert any(b.category_id == 2 for b in truth.boxes) and metrics["official"]["ap50"] < 1.0
    # the request: one merged picture, then PaliGemma's own prompt, greedy with 48 new tokens
    bodies = server.bodies()  # in the order they arrived, which concurrency leaves open
    assert sorted(b["messages"][0]["content"][1]["text"] for b in bodies) == sorted("\ndetect " + s.text for s in dataset)
    for body in bodies:
        content = body["messages"][0]["content"]
        assert [p["type"] for p in content] == ["image_url", "text"]
        assert body["temperature"] == 0.0 and body["max_tokens"] == 48
    assert json.loads((out / "run.json").read_text())["identity"]["option.input_mode"] == "merged"


@pytest.fixture
def two_cases(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    data, rows, _, _ = scripted_ref_release(tmp_path, n=2)
    return data, rows


def run_family(tmp_path: Path, serve: Any, data: Path, name: str, reply: str) -> tuple[Any, Path]:
    server = serve(default=reply)
    out = tmp_path / name
    rc, err = run_quiet(eval_args("ref_adv_s", data, server.url, out, "--model-family", name))
    assert rc == 0, err
    return server, out


def test_qwen3_vl_sends_its_prompt_before_the_image(tmp_path: Path, serve: Any, two_cases: Any) -> None:
    data, rows = two_cases
    reply = '```json\n[{"bbox_2d": [100, 100, 400, 400], "label": "target"}]\n```'
    server, out = run_family(tmp_path, serve, data, "qwen3-vl", reply)
    captions = {RefAdv(model_family="qwen3-vl").load(data)[i].caption for i in range(2)}
    for body in server.bodies():
        content = body["messages"][0]["content"]
        assert [p["type"] for p in content] == ["text", "image_url"]
        text = content[0]["text"]
        assert text in {
            f'Locate every object that matches the description "{c}" in the image. Report bbox coordinates in JSON format.'
            for c in captions
        }
        assert "<image>" not in text
    recs = records(out)
    assert all(r["parse_error"] is None for r in recs)
    # 0-1000 of the image (Qwen3-VL's relative coordinates)
    by_id = {r["id"]: r for r in recs}
    for sample in RefAdv(model_family="qwen3-vl").load(data):
        w, h = sample.width, sample.height
        assert by_id[sample.id]["answer"] == [pytest.approx([0.1 * w, 0.1 * h, 0.4 * w, 0.4 * h])]


def test_florence2_asks_the_server_to_keep_special_tokens(tmp_path: Path, serve: Any, two_cases: Any) -> None:
    data, _ = two_cases
    server, out = run_family(tmp_path, serve, data, "florence-2", "</s><s>target<loc_100><loc_100><loc_399><loc_399></s>")
    bodies = server.bodies()
    assert len(bodies) == 2
    for body in bodies:
        assert body["skip_special_tokens"] is False
        assert body["messages"][-1]["content"][-1]["text"].startswith("Locate the phrases in the caption: ")
    assert all(r["parse_error"] is None for r in records(out))


def test_ferret_sends_its_system_message(tmp_path: Path, serve: Any, two_cases: Any) -> None:
    data, _ = two_cases
    server, out = run_family(tmp_path, serve, data, "ferret", "the target [100, 100, 400, 400].")
    system = family("ferret").system
    assert system is not None and "Image size: 1000x1000." in system
    for body in server.bodies():
        assert body["messages"][0] == {"role": "system", "content": system}
        assert body["messages"][1]["role"] == "user"
        assert body["messages"][1]["content"][-1]["text"].startswith("What is the location of ")
    recs = records(out)
    assert all(r["parse_error"] is None for r in recs)
    # a plain run sends no system message
    plain = serve(default='{"bboxes": [[1, 2, 3, 4]]}')
    rc, err = run_quiet(eval_args("ref_adv_s", data, plain.url, tmp_path / "plain", "--box-format", "abs_xyxy"))
    assert rc == 0, err
    assert all(b["messages"][0]["role"] == "user" for b in plain.bodies())


def test_the_users_flags_override_the_familys_decoding(tmp_path: Path, serve: Any, two_cases: Any) -> None:
    """InternVL's evaluator decodes greedily with 100 new tokens; `--max-tokens` and `--temperature` given on
    the command line win."""
    data, _ = two_cases
    server = serve(default="target[[100, 100, 400, 400]]")
    out = tmp_path / "run"
    flags = ["--model-family", "internvl", "--max-tokens", "50", "--temperature", "0.3"]
    rc, err = run_quiet(eval_args("ref_adv_s", data, server.url, out, *flags))
    assert rc == 0, err
    assert [(b["max_tokens"], b["temperature"]) for b in server.bodies()] == [(50, 0.3), (50, 0.3)]
