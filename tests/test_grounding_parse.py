"""`--answer-format grounding-tokens`: Qwen2-VL's `<|box_start|>(x1,y1),(x2,y2)<|box_end|>` replies
for MC-Bench and Ref-Adv-s. A table of real-looking replies; the same boxes scoring exactly alike
in grounding tokens and in JSON on the real MC-Bench annotations; the SFT builder's writer read
back by the parser; the refusals, the run identity, the leaderboard label, and the repair turn
in the same syntax against the simulated server."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from helpers import MC_BENCH_RELEASE, one_sentence, prompt_key, records, run_quiet, scripted_ref_release

from needlepoint.benchmarks.mc_bench.benchmark import (
    FINETUNED_PROMPT,
    GROUNDING_REPAIR_TEXT,
    GROUNDING_SEQUENCE_PROMPT,
    REPAIR_TEXT,
    SEQUENCE_PROMPT,
    McBench,
    McSample,
    _grounding_template,
    results_from_records,
)
from needlepoint.benchmarks.mc_bench.groundtruth import load_groundtruth
from needlepoint.benchmarks.mc_bench.parse import PairGeometry, parse_answer, parse_grounding_answer
from needlepoint.benchmarks.mc_bench.scoring import score_results
from needlepoint.benchmarks.mc_bench.sft.answers import grounding_answer, json_answer
from needlepoint.benchmarks.mc_bench.sft.draw import AnswerBox
from needlepoint.benchmarks.ref_adv import RefAdv
from needlepoint.benchmarks.ref_adv.parse import repair_text
from needlepoint.contract.boards import Run, answer_label
from needlepoint.contract.boxoptions import BoxOptions
from needlepoint.contract.grounding import format_image_line
from needlepoint.core import status
from needlepoint.core.errors import DataError
from needlepoint.families.syntaxes import QWEN2

GEOMETRY = PairGeometry(((640.0, 480.0), (500.0, 1000.0)))
B, E, RS, RE = "<|box_start|>", "<|box_end|>", "<|object_ref_start|>", "<|object_ref_end|>"


def absolute(image: int, box: tuple[float, float, float, float]) -> list[float]:
    """A 0-1000 box of image 0 or 1 of GEOMETRY in pixels, clipped as geometry.to_absolute does."""
    w, h = GEOMETRY.sizes[image]
    x1, y1, x2, y2 = box
    return [
        min(max(x1, 0), 1000) / 1000 * w,
        min(max(y1, 0), 1000) / 1000 * h,
        min(x2, 1000) / 1000 * w,
        min(y2, 1000) / 1000 * h,
    ]


# (reply, expected (image, group, 0-1000 box) items or a parse error)
MC_REPLIES: list[tuple[str, Any]] = [
    # the builder's own lines
    (
        f"Image 1: {RS}group 1{RE}{B}(72,140),(395,612){E}\nImage 2: none",
        [(0, 1, (72, 140, 395, 612))],
    ),
    # spaces everywhere, two groups on one line, several boxes after one label
    (
        f"Image 1 : {RS} group 2 {RE} {B}( 10 , 20 ) , ( 30 , 40 ){E}{B}(50,60),(70,80){E}\n"
        f"Image 2:  {RS}group 1{RE}{B}(1,2),(3,4){E}",
        [(0, 2, (10, 20, 30, 40)), (0, 2, (50, 60, 70, 80)), (1, 1, (1, 2, 3, 4))],
    ),
    # missing closing tokens (the model stopped them, or a server cut them)
    (
        f"Image 1: {RS}group 1{B}(100,100),(200,200)\nImage 2: {RS}group 1{RE}{B}(5,5),(6,6)",
        [(0, 1, (100, 100, 200, 200)), (1, 1, (5, 5, 6, 6))],
    ),
    # floats, and a box beyond 1000 (clipped to the image, as in JSON)
    (f"Image 1: none\nImage 2: {B}(100.5,200.25),(1200,1500.0){E}", [(1, 1, (100.5, 200.25, 1200, 1500))]),
    # the tokens stripped by the server (vLLM's default skip_special_tokens)
    (
        "Image 1: group 1(72,140),(395,612)(400,400),(500,500)\nImage 2: none",
        [(0, 1, (72, 140, 395, 612)), (0, 1, (400, 400, 500, 500))],
    ),
    # prose around, a label that names no group (group 1), lower-case image names
    (
        f"Sure! Here are the boxes.\nimage 2: {RS}the red cup{RE}{B}(1,1),(9,9){E}\nHope this helps.",
        [(1, 1, (1, 1, 9, 9))],
    ),
    # three images named: the third's boxes are dropped, as JSON's image_3 key is
    (
        f"Image 1: {B}(1,1),(2,2){E}\nImage 2: none\nImage 3: {RS}group 1{RE}{B}(3,3),(4,4){E}",
        [(0, 1, (1, 1, 2, 2))],
    ),
    # an empty answer on purpose
    ("Image 1: none\nImage 2: none", []),
    ("None of the objects is in either image.", []),
    # group 0 counts as group 1, as in JSON
    (f"Image 1: {RS}group 0{RE}{B}(1,1),(2,2){E}", [(0, 1, (1, 1, 2, 2))]),
    # errors
    ("", status.EMPTY_RESPONSE),
    ("   \n", status.EMPTY_RESPONSE),
    (
        '{"image_1": [{"group": 1, "bbox_2d": [1, 2, 3, 4]}], "image_2": []}',
        status.WRONG_SYNTAX,
    ),  # JSON under the token syntax: never read as it
    ("I cannot see the images.", status.NO_GROUNDING_FOUND),
    (f"Image 1: {B}(1,2){E}", status.BAD_GROUNDING),
    (f"Image 1: {B}[1, 2, 3, 4]{E}", status.BAD_GROUNDING),
    (f"Image 1: {RS}group 99999999999999999999{RE}{B}(1,1),(2,2){E}", status.BAD_GROUNDING),
    (f"{RS}group 1{RE}{B}(1,1),(2,2){E}", status.IMAGE_NOT_GIVEN),
]


@pytest.mark.parametrize(("reply", "expected"), MC_REPLIES)
def test_mc_bench_reads_real_looking_replies(reply: str, expected: Any) -> None:
    parsed = parse_grounding_answer(reply, GEOMETRY, merged=False, syntax=QWEN2, box_format="norm_1000_xyxy")
    if isinstance(expected, str):
        assert parsed.error == expected and parsed.answer is None
        return
    assert parsed.error is None
    got = [(b["image"], b["group"], b["bbox"]) for b in parsed.answer]
    assert got == [(image, group, pytest.approx(absolute(image, box))) for image, group, box in expected]


def test_merged_mode_puts_each_box_in_the_image_holding_its_centre() -> None:
    geometry = PairGeometry(((100.0, 100.0), (100.0, 100.0)), band=20)  # canvas 220 x 100
    parsed = parse_grounding_answer(
        f"{RS}group 2{RE}{B}(0,0),(100,500){E}{B}(600,0),(1000,1000){E}",
        geometry,
        merged=True,
        syntax=QWEN2,
        box_format="norm_1000_xyxy",
    )
    assert [(b["image"], b["group"]) for b in parsed.answer] == [(0, 2), (1, 2)]
    assert parsed.answer[1]["bbox"] == pytest.approx([12.0, 0.0, 100.0, 100.0])


def test_the_builders_writer_and_the_parser_agree() -> None:
    """The SFT answer writer formats with the same module the parser reads: what a model is
    trained to write parses back to the boxes it was trained on."""
    sizes = ((640.0, 480.0), (500.0, 1000.0))
    boxes = ((AnswerBox(1, 11, (64.0, 48.0, 320.0, 240.0)), AnswerBox(2, 12, (0.0, 0.0, 64.0, 96.0))), ())
    text = grounding_answer(boxes, sizes)
    assert text.splitlines()[1] == "Image 2: none"
    assert text.startswith(f"Image 1: {QWEN2.label('group 1')}{QWEN2.write([100, 100, 500, 500])}")
    parsed = parse_grounding_answer(text, GEOMETRY, merged=False, syntax=QWEN2, box_format="norm_1000_xyxy")
    assert [(b["image"], b["group"], b["bbox"]) for b in parsed.answer] == [
        (0, 1, pytest.approx([64.0, 48.0, 320.0, 240.0])),
        (0, 2, pytest.approx([0.0, 0.0, 64.0, 96.0])),
    ]
    json_parsed = parse_answer(json_answer(boxes, sizes, "norm_1000_xyxy"), GEOMETRY, "norm_1000_xyxy", merged=False)
    assert json_parsed.answer == parsed.answer
    assert format_image_line(2, [(1, [])]) == "Image 2: none"
    assert [b.group for b in QWEN2.read(text).boxes] == [1, 2]


def _noisy_items(gt: Any, sample: Any, rng: random.Random) -> list[tuple[int, int, list[int]]]:
    """A model's answer to a sample: each GT box in 0-1000 integers, jittered, some dropped, some
    in the wrong group, and a stray box now and then."""
    position = {image_id: k for k, image_id in enumerate(sample.image_ids)}
    items = []
    for b in gt.boxes:
        if b.image_id not in position or rng.random() < 0.2:
            continue
        im = gt.image_by_id[b.image_id]
        x, y, w, h = b.bbox
        box = [(x) / im.width * 1000, y / im.height * 1000, (x + w) / im.width * 1000, (y + h) / im.height * 1000]
        box = [round(v + rng.uniform(-40, 40)) for v in box]
        group = b.category_id if rng.random() < 0.85 else b.category_id + 1
        items.append((position[b.image_id], group, box))
    if rng.random() < 0.3:
        items.append((rng.randrange(2), 1, [100, 100, 300, 300]))
    return items


def test_grounding_tokens_score_exactly_like_the_same_boxes_in_json() -> None:
    """On the real MC-Bench annotations (first 400 descriptions), replies in grounding tokens and
    replies in the eval prompt's JSON that hold the same boxes give the same parsed answers, the
    same COCO results and the same official and corrected metrics."""
    gt = load_groundtruth(MC_BENCH_RELEASE)
    rng = random.Random(11)
    samples, json_records, token_records = [], [], []
    for gs in gt.samples[:400]:
        sizes = tuple((float(gt.image_by_id[i].width), float(gt.image_by_id[i].height)) for i in gs.image_ids)
        geometry = PairGeometry(sizes)  # type: ignore[arg-type]
        sample = McSample(gs.id, gs.text, gs.style, gs.image_ids, (None, None), geometry)  # type: ignore[arg-type]
        items = _noisy_items(gt, gs, rng)
        as_json = {f"image_{k + 1}": [{"group": g, "bbox_2d": box} for p, g, box in items if p == k] for k in range(2)}
        lines = []
        for k in range(2):
            groups = sorted({g for p, g, _ in items if p == k})
            lines.append(format_image_line(k + 1, [(g, [box for p, gg, box in items if p == k and gg == g]) for g in groups]))
        from_json = parse_answer("```json\n" + json.dumps(as_json) + "\n```", geometry, "norm_1000_xyxy", merged=False)
        from_tokens = parse_grounding_answer(
            "Here you go:\n" + "\n".join(lines), geometry, merged=False, syntax=QWEN2, box_format="norm_1000_xyxy"
        )
        # the same boxes, in group order per image rather than reply order
        assert sorted(map(json.dumps, from_tokens.answer)) == sorted(map(json.dumps, from_json.answer))
        samples.append(sample)
        json_records.append({"id": gs.id, "answer": from_json.answer})
        token_records.append({"id": gs.id, "answer": from_tokens.answer})
    ids = [s.id for s in samples]
    key = lambda r: (r["image_id"], r["category_id"], r["bbox"])  # noqa: E731
    results_json = sorted(results_from_records(samples, json_records), key=key)  # type: ignore[arg-type]
    results_tokens = sorted(results_from_records(samples, token_records), key=key)  # type: ignore[arg-type]
    assert results_tokens == results_json
    metrics_json = score_results(gt, results_json, ids)
    assert score_results(gt, results_tokens, ids) == metrics_json
    assert 0 < metrics_json["official"]["ap50"] < 1  # a score that the noise moved, not a trivial one


REF_REPLIES: list[tuple[str, Any]] = [
    (f"{RS}the cup on the left{RE}{B}(100,200),(300,400){E}", [(100, 200, 300, 400)]),
    (f"The object is at {B}(100, 200), (300, 400) and also {B}(0,0),(10,10){E}.", [(100, 200, 300, 400), (0, 0, 10, 10)]),
    ("the cup on the left(100,200),(300,400)", [(100, 200, 300, 400)]),
    (f"{B}(100.7,200.2),(1300,999){E}", [(100.7, 200.2, 1300, 999)]),
    ("", status.EMPTY_RESPONSE),
    ('{"bboxes": [[1, 2, 3, 4]]}', status.WRONG_SYNTAX),
    (f"{B}(1,2),(3){E}", status.BAD_GROUNDING),
]


@pytest.mark.parametrize(("reply", "expected"), REF_REPLIES)
def test_ref_adv_reads_real_looking_replies(tmp_path: Path, reply: str, expected: Any) -> None:
    data, rows, _, _ = scripted_ref_release(tmp_path, n=1)
    bench = RefAdv(answer_format="grounding-tokens")
    sample = bench.load(data)[0]
    parsed = bench.parse(sample, reply)
    if isinstance(expected, str):
        assert parsed.error == expected
        return
    w, h = sample.width, sample.height
    want = [
        [min(x1, 1000) / 1000 * w, min(y1, 1000) / 1000 * h, min(x2, 1000) / 1000 * w, min(y2, 1000) / 1000 * h]
        for x1, y1, x2, y2 in expected
    ]
    assert parsed.answer == [pytest.approx(b) for b in want]
    # the same boxes in JSON score alike
    json_reply = json.dumps({"bboxes": [list(b) for b in expected]})
    assert RefAdv(box_format="norm_1000_xyxy").parse(sample, json_reply).answer == parsed.answer


def test_box_options_are_checked_together_and_keep_the_run_identity() -> None:
    """The box flags fold into one checked value; the identity it gives is the one runs recorded
    before (the frame and the answer format only off their defaults), so older runs resume."""
    assert BoxOptions.from_flags("abs_xyxy").identity() == {"box_format": "abs_xyxy", "max_image_side": None}
    qwen = BoxOptions.from_flags("abs_xyxy", abs_frame="qwen-smart-resize", max_image_side=768)
    assert qwen.identity() == {
        "box_format": "abs_xyxy",
        "max_image_side": 768,
        "abs_frame": "qwen-smart-resize",
        "abs_frame_factor": 28,
        "abs_frame_min_pixels": 3136,
        "abs_frame_max_pixels": 1003520,
    }
    tokens = BoxOptions.from_flags(answer_format="grounding-tokens")
    assert tokens.syntax is not None and tokens.require("x") == "norm_1000_xyxy"
    assert tokens.identity() == {"box_format": "norm_1000_xyxy", "max_image_side": None, "answer_format": "grounding-tokens"}
    with pytest.raises(DataError, match="needs --box-format abs_xyxy, not norm_1_xyxy"):
        BoxOptions.from_flags("norm_1_xyxy", abs_frame="qwen-smart-resize")
    with pytest.raises(DataError, match="--box-format is required for my_bench"):
        BoxOptions.from_flags().require("my_bench")
    assert RefAdv(box_format="abs_xyxy", max_image_side=768).identity() == {
        "box_format": "abs_xyxy",
        "prompt_mode": "direct",
        "repair_on_length_only": False,
        "max_image_side": 768,
    }
    assert McBench(box_format="norm_1000_xyxy", answer_format="grounding-tokens").identity() == {
        "box_format": "norm_1000_xyxy",
        "input_mode": "sequence",
        "template": _grounding_template(GROUNDING_SEQUENCE_PROMPT, QWEN2, "norm_1000_xyxy"),
        "styles": None,
        "max_image_side": None,
        "answer_format": "grounding-tokens",
    }


def test_grounding_tokens_imply_norm_1000_and_refuse_another_box_format() -> None:
    assert McBench(answer_format="grounding-tokens").boxes.box_format == "norm_1000_xyxy"
    assert RefAdv(answer_format="grounding-tokens", box_format="norm_1000_xyxy").boxes.box_format == "norm_1000_xyxy"
    for cls in (McBench, RefAdv):
        with pytest.raises(DataError, match="drop --box-format abs_xyxy"):
            cls(answer_format="grounding-tokens", box_format="abs_xyxy")
        with pytest.raises(DataError, match="--answer-format 'xml' is unknown"):
            cls(answer_format="xml", box_format="abs_xyxy")


def test_the_command_line_refuses_a_contradicting_box_format(tmp_path: Path) -> None:
    for bench in ("mc_bench", "ref_adv_s"):
        args = ["eval", bench, "--data", str(tmp_path), "--model", "m", "--api-url", "http://127.0.0.1:9/v1"]
        rc, err = run_quiet([*args, "--answer-format", "grounding-tokens", "--box-format", "norm_1_xyxy"])
        assert rc == 2
        assert "grounding-tokens reads Qwen2-VL's 0-1000 boxes; drop --box-format norm_1_xyxy" in one_sentence(err)


def test_identity_prompt_and_repair_turn() -> None:
    json_bench, tokens = McBench(box_format="norm_1000_xyxy"), McBench(answer_format="grounding-tokens")
    assert "answer_format" not in json_bench.identity()  # older runs keep their identity
    assert tokens.identity()["answer_format"] == "grounding-tokens"
    assert json_bench.template == SEQUENCE_PROMPT and "<|box_start|>(x1,y1),(x2,y2)<|box_end|>" in tokens.template
    assert json_bench.followup(None, None, None) == REPAIR_TEXT  # type: ignore[arg-type]
    repair = _grounding_template(GROUNDING_REPAIR_TEXT, QWEN2, "norm_1000_xyxy")
    assert tokens.followup(None, None, None) == repair  # type: ignore[arg-type]
    assert "<|box_start|>(x1,y1),(x2,y2)<|box_end|>" in repair
    paper = McBench(answer_format="grounding-tokens", prompt_wording="finetuned-baseline")
    assert paper.template == FINETUNED_PROMPT == "Output the bounding boxes of {text}"
    assert paper.identity()["template"] != tokens.identity()["template"]
    with pytest.raises(DataError, match="--prompt-wording 'x' is unknown"):
        McBench(box_format="abs_xyxy", prompt_wording="x")


def test_the_leaderboard_label_names_the_answer_format(tmp_path: Path) -> None:
    def run(identity: dict[str, Any]) -> Run:
        return Run(tmp_path, {"identity": identity, "config": {"options": {}}}, {})

    assert answer_label("sequence", run({"option.input_mode": "sequence"})) == "sequence"
    assert answer_label("sequence", run({"option.answer_format": "grounding-tokens"})) == "sequence, grounding-tokens"
    assert answer_label("direct", run({"option.answer_format": "json"})) == "direct"


def _strings(value: Any) -> list[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [s for v in value for s in _strings(v)] if isinstance(value, list) else []


def test_ref_adv_repair_turn_in_the_same_syntax(tmp_path: Path, serve: Any) -> None:
    """A reply in JSON to the grounding prompt gets the grounding repair turn, and the second
    reply in tokens is scored."""
    data, rows, _, _ = scripted_ref_release(tmp_path, n=2)
    bench = RefAdv(answer_format="grounding-tokens")
    samples = bench.load(data)
    keys = [prompt_key(s, bench) for s in samples]
    assert "<|box_start|>" in keys[0]

    def tokens(row: dict[str, Any]) -> str:
        x1, y1, x2, y2 = row["solution"]
        w, h = float(row["width"]), float(row["height"])
        return QWEN2.label("target") + QWEN2.write(
            [round(x1 / w * 1000), round(y1 / h * 1000), round(x2 / w * 1000), round(y2 / h * 1000)]
        )

    script = {keys[0]: ['{"bboxes": [[1, 2, 3, 4]]}', tokens(rows[0])], keys[1]: [tokens(rows[1])]}
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    args = ["eval", "ref_adv_s", "--data", str(data), "--model", "org/m", "--api-url", server.url, "--no-progress"]
    rc, err = run_quiet([*args, "--answer-format", "grounding-tokens", "--max-retries", "0", "--out", str(out), "--no-report"])
    assert rc == 0, err
    by_id = {r["id"]: r for r in records(out)}
    first, second = by_id[samples[0].id], by_id[samples[1].id]
    assert first["repair_used"] is True and first["parse_error"] is None and first["scores"]["hit"] is True
    assert repair_text(BoxOptions.from_flags(answer_format="grounding-tokens")) in _strings(
        first["turns"][1]
    )  # the repair turn as the record keeps it
    assert second["repair_used"] is False and second["scores"]["hit"] is True
    header = json.loads((out / "run.json").read_text())
    assert header["identity"]["option.answer_format"] == "grounding-tokens"
