"""The detector model families (models/detector_model.py): tiny random Grounding DINO and OWLv2 models
(tests/helpers/detector.py builds them) answer requests as a run's model, with every box above the
threshold and its real score. Their boxes and scores are compared with transformers' own
post-processing of the same model on the same image; the JSON reply is read by MC-Bench's parser;
an end-to-end run on the real MC-Bench annotations (tests/data/mc-bench, stand-in images) and one on
a Ref-Adv-s release write records and results with the detector's scores. Needs the `models` extra
(skipped without it unless NEEDLEPOINT_TEST_MODELS=1); NEEDLEPOINT_TEST_DEVICE picks the device."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import MC_BENCH_RELEASE, models_extra
from helpers import TEST_DEVICE as DEVICE
from helpers.detector import BOX_TOL, SCORE_TOL, write_owl
from PIL import Image

from needlepoint import api
from needlepoint.benchmarks.mc_bench.parse import PairGeometry, parse_answer
from needlepoint.benchmarks.mc_bench.scoring import read_results
from needlepoint.core.conversation import Conversation, Generation, ImageRef, Message, Reply
from needlepoint.core.errors import DataError
from needlepoint.core.geometry import fitted_size
from needlepoint.core.store import read_records
from needlepoint.models.detector_model import DETECTOR_FAMILIES, DetectorModel, detector_identity, detector_model, sent_image

SIZES = [(80, 50), (40, 60)]  # (width, height): wide, tall
PHRASE = "the red square"


@pytest.fixture(scope="module")
def owlv2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_owl(tmp_path_factory.mktemp("tiny_owlv2_family"), "owlv2")


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[ImageRef]:
    """Two small images with coloured shapes: a PNG (sent as a JPEG of it) and a JPEG (sent as stored)."""
    folder = tmp_path_factory.mktemp("family_images")
    refs = []
    for k, (w, h) in enumerate(SIZES):
        im = Image.new("RGB", (w, h), (240, 240, 240))
        im.paste((200, 30, 30), (5 + k, 5, 25 + k, 20))
        im.paste((30, 30, 200), (w - 20, h - 25, w - 4, h - 6))
        path = folder / (f"im{k}.png" if k == 0 else f"im{k}.jpg")
        im.save(path)
        refs.append(ImageRef(key=path.name, path=path))
    return refs


def _model(family: str, folder: Path, threshold: float | None = None, top1: bool = False) -> DetectorModel:
    return detector_model(family, str(folder), threshold, top1=top1, device=DEVICE)


def _folder(family: str, request: pytest.FixtureRequest) -> Path:
    return Path(request.getfixturevalue("grounding_dino" if family == "grounding-dino" else "owlv2"))


def _ask(model: DetectorModel, parts: list[Any]) -> Reply:
    return asyncio.run(model.complete(Conversation([Message("user", parts)]), Generation()))


def _reference(model: DetectorModel, image: Any, phrase: str) -> list[tuple[list[float], float]]:
    """transformers' own post-processing of the same model on `image` (threshold 0): every box,
    clipped to the image, with its score, highest first."""
    torch, _ = models_extra()
    detector = model.detector.detector
    processor = detector.processor
    width, height = image.size
    with torch.inference_mode():
        if detector.kind == "grounding-dino":
            pixels = processor.image_processor(images=[image], return_tensors="pt")
            text = processor.tokenizer([phrase.lower() + "."], return_tensors="pt")
            outputs = detector.model(
                pixel_values=pixels["pixel_values"].to(DEVICE),
                pixel_mask=pixels["pixel_mask"].to(DEVICE),
                **{k: v.to(DEVICE) for k, v in text.items()},
            )
            outputs.logits, outputs.pred_boxes = outputs.logits.cpu(), outputs.pred_boxes.cpu()
            (result,) = processor.post_process_grounded_object_detection(
                outputs, text["input_ids"], threshold=0.0, text_threshold=0.0, target_sizes=[(height, width)]
            )
        else:
            inputs = processor(text=[[phrase]], images=[image], return_tensors="pt")
            outputs = detector.model(**{k: v.to(DEVICE) for k, v in inputs.items()})
            outputs.logits, outputs.pred_boxes = outputs.logits.cpu(), outputs.pred_boxes.cpu()
            (result,) = processor.image_processor.post_process_object_detection(
                outputs, threshold=0.0, target_sizes=[(height, width)]
            )
    out = []
    for box, score in zip(result["boxes"].tolist(), result["scores"].tolist()):
        x1, y1, x2, y2 = box
        clip = [min(max(x1, 0.0), width), min(max(y1, 0.0), height), min(max(x2, 0.0), width), min(max(y2, 0.0), height)]
        out.append((clip, score))
    return sorted(out, key=lambda bs: -bs[1])


def _same(items: list[dict[str, Any]], expected: list[tuple[list[float], float]]) -> bool:
    return len(items) == len(expected) and all(
        all(math.isclose(a, b, abs_tol=BOX_TOL) for a, b in zip(item["bbox_2d"], box))
        and math.isclose(item["score"], score, abs_tol=SCORE_TOL)
        for item, (box, score) in zip(items, expected)
    )


@pytest.mark.parametrize("family", ["grounding-dino", "owlv2"])
def test_the_reply_holds_the_detectors_boxes_and_scores(
    family: str, request: pytest.FixtureRequest, images: list[ImageRef]
) -> None:
    model = _model(family, _folder(family, request), threshold=0.0)
    assert model.name == str(_folder(family, request)) and model.threshold == 0.0
    for ref in images:
        reply = _ask(model, [PHRASE, ref])
        assert reply.error is None and reply.finish_reason == "stop"
        assert reply.usage == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        items = json.loads(reply.text)["boxes"]
        scores = [item["score"] for item in items]
        assert len(set(scores)) > 1 and scores == sorted(scores, reverse=True)  # real, ranked confidences
        assert len({tuple(item["bbox_2d"]) for item in items}) > 1
        assert _same(items, _reference(model, sent_image(ref), PHRASE)), (family, ref.key)
        width, height = Image.open(ref.path).size  # type: ignore[arg-type]
        assert all(0 <= x1 <= x2 <= width and 0 <= y1 <= y2 <= height for x1, y1, x2, y2 in (i["bbox_2d"] for i in items))
    # another text, other scores: the text reaches the detector
    other = json.loads(_ask(model, ["a blue circle", images[0]]).text)["boxes"]
    assert [i["score"] for i in other] != [i["score"] for i in json.loads(_ask(model, [PHRASE, images[0]]).text)["boxes"]]


@pytest.mark.parametrize("family", ["grounding-dino", "owlv2"])
def test_the_threshold_keeps_the_boxes_strictly_above_it(
    family: str, request: pytest.FixtureRequest, images: list[ImageRef]
) -> None:
    folder = _folder(family, request)
    default = _model(family, folder)
    assert default.threshold == DETECTOR_FAMILIES[family].threshold == {"grounding-dino": 0.25, "owlv2": 0.1}[family]
    assert (
        default.identity()
        == detector_identity(family, None)
        == {
            "family": family,
            "boxes": "above_threshold",
            "threshold": DETECTOR_FAMILIES[family].threshold,
        }
    )
    assert detector_identity(family, 0.3) != detector_identity(family, None)  # another threshold, another run
    every = json.loads(_ask(_model(family, folder, 0.0), [PHRASE, images[0]]).text)["boxes"]
    kept = json.loads(_ask(default, [PHRASE, images[0]]).text)["boxes"]
    assert kept == [i for i in every if i["score"] > default.threshold]
    middle = every[len(every) // 2]["score"]
    at_middle = json.loads(_ask(_model(family, folder, middle), [PHRASE, images[0]]).text)["boxes"]
    assert at_middle == [i for i in every if i["score"] > middle]  # a score equal to the threshold is dropped
    assert 0 < len(at_middle) < len(every)
    nothing = json.loads(_ask(_model(family, folder, 1.0), [PHRASE, images[0]]).text)
    assert nothing == {"boxes": []}
    # top1: the best box whatever its score (Ref-Adv-s scores one box), with no threshold to set
    top = _model(family, folder, top1=True)
    assert json.loads(_ask(top, [PHRASE, images[0]]).text)["boxes"] == every[:1]
    assert top.identity() == detector_identity(family, None, top1=True) == {"family": family, "boxes": "top1"}
    with pytest.raises(DataError, match=r"^--score-threshold does not apply where each image's top box is the answer"):
        _model(family, folder, 0.5, top1=True)


def test_two_images_are_keyed_in_order_and_labels_are_not_read(grounding_dino: Path, images: list[ImageRef]) -> None:
    model = _model("grounding-dino", grounding_dino, 0.0)
    alone = [json.loads(_ask(model, [PHRASE, ref]).text)["boxes"] for ref in images]
    assert alone[0] != alone[1]
    pair = json.loads(_ask(model, ["Image 1:", images[0], "\nImage 2:", images[1], "\n" + PHRASE]).text)
    assert pair == {"image_1": alone[0], "image_2": alone[1]}
    swapped = json.loads(_ask(model, ["Image 1:", images[1], "\nImage 2:", images[0], "\n" + PHRASE]).text)
    assert swapped == {"image_1": alone[1], "image_2": alone[0]}
    # the authors' <image> placeholder and the case of the text change nothing (Grounding DINO lower-cases)
    assert json.loads(_ask(model, ["<image>\nThe Red Square", images[0]]).text)["boxes"] == alone[0]


def test_images_are_seen_as_sent_within_their_max_side(grounding_dino: Path, images: list[ImageRef]) -> None:
    model = _model("grounding-dino", grounding_dino, 0.0)
    full = json.loads(_ask(model, [PHRASE, images[0]]).text)["boxes"]
    small = ImageRef(key=images[0].key, path=images[0].path, max_side=40)
    sent = sent_image(small)
    assert sent.size == fitted_size(*SIZES[0], 40) == (40, 25)
    items = json.loads(_ask(model, [PHRASE, small]).text)["boxes"]
    assert _same(items, _reference(model, sent, PHRASE)) and items != full
    assert all(x2 <= 40 and y2 <= 25 for _, _, x2, y2 in (i["bbox_2d"] for i in items))


def test_mc_bench_reads_the_reply_as_boxes_with_their_scores(grounding_dino: Path, images: list[ImageRef]) -> None:
    model = _model("grounding-dino", grounding_dino, 0.0)
    reply = json.loads(_ask(model, ["Image 1:", images[0], "\nImage 2:", images[1], "\n" + PHRASE]).text)
    geometry = PairGeometry(((80.0, 50.0), (40.0, 60.0)))
    parsed = parse_answer(json.dumps(reply), geometry, "abs_xyxy", merged=False)
    assert parsed.error is None
    expected = [
        {"image": k, "group": 1, "bbox": item["bbox_2d"], "score": item["score"]}
        for k, key in enumerate(("image_1", "image_2"))
        for item in reply[key]
    ]
    assert parsed.answer == expected and len({a["score"] for a in expected}) > 1
    # images sent at a max side: the boxes come back in the stored image's pixels
    small = [ImageRef(key=r.key, path=r.path, max_side=40) for r in images]
    reply = json.loads(_ask(model, ["Image 1:", small[0], "\nImage 2:", small[1], "\n" + PHRASE]).text)
    parsed = parse_answer(json.dumps(reply), PairGeometry(geometry.sizes, max_side=40), "abs_xyxy", merged=False)
    (sx, sy) = (80 / 40, 50 / 25)
    first = reply["image_1"][0]["bbox_2d"]
    assert parsed.answer is not None and parsed.answer[0]["bbox"] == pytest.approx(
        [first[0] * sx, first[1] * sy, first[2] * sx, first[3] * sy]
    )


def test_bad_settings_are_one_sentence(grounding_dino: Path, owlv2: Path, images: list[ImageRef]) -> None:
    with pytest.raises(DataError, match=r"^--score-threshold must be between 0 and 1, not 1.5$"):
        _model("grounding-dino", grounding_dino, 1.5)
    with pytest.raises(
        DataError, match=r"^'yolo' is no detector family; the detector families are grounding-dino, owlv2, owlvit$"
    ):
        _model("yolo", grounding_dino)
    with pytest.raises(
        DataError, match=r"is a owlv2 model, not a grounding-dino one; pass --model-family owlv2 or a grounding-dino model$"
    ):
        _model("grounding-dino", owlv2)
    with pytest.raises(DataError, match=r"^--detector-batch must be at least 1, not 0$"):
        detector_model("owlv2", str(owlv2), batch_size=0, device=DEVICE)
    model = _model("owlv2", owlv2)
    with pytest.raises(DataError, match=r"this request has no image$"):
        _ask(model, [PHRASE])
    with pytest.raises(DataError, match=r"this request's message has none$"):
        _ask(model, ["Image 1:", images[0]])
    missing = ImageRef(key="gone.jpg", path=images[0].path.parent / "gone.jpg")  # type: ignore[union-attr]
    with pytest.raises(DataError, match=r"^image gone.jpg cannot be read"):  # the sample's input error, as a client's
        _ask(model, [PHRASE, missing])


# --- end to end through needlepoint.api.evaluate -----------------------------------------------------

N_SAMPLES = 4


@pytest.fixture(scope="module")
def mc_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real release file (tests/data/mc-bench) with stand-in images, of the annotated sizes and
    formats, for the first N_SAMPLES descriptions: a grey field with a red and a blue rectangle."""
    folder = tmp_path_factory.mktemp("mc_family")
    shutil.copy(MC_BENCH_RELEASE, folder / MC_BENCH_RELEASE.name)
    data = json.loads(MC_BENCH_RELEASE.read_text(encoding="utf-8"))
    wanted = {i for d in data["descriptions"][:N_SAMPLES] for i in d["images_id"]}
    for k, im in enumerate(i for i in data["images"] if i["id"] in wanted):
        path = folder / "mc-bench_images" / im["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        w, h = im["width"], im["height"]
        picture = Image.new("RGB", (w, h), (200, 200, 200))
        picture.paste((200, 30, 30), (w // 8 + 7 * k, h // 6, w // 2, h // 2))
        picture.paste((30, 30, 200), (w // 2, h // 2, w - w // 10, h - h // 5 - 3 * k))
        picture.save(path)
    return folder


@pytest.mark.parametrize(
    "options",
    [{"box_format": "abs_xyxy", "input_mode": "sequence"}, {"model_family": "grounding-dino"}],
    ids=["benchmark-prompt", "family-prompt"],
)
def test_an_mc_bench_run_records_scored_boxes(
    options: dict[str, Any], grounding_dino: Path, mc_release: Path, tmp_path: Path
) -> None:
    """The benchmark's own prompt (its `Image N:` labels and instructions are text the detector
    reads, minus the labels) or the family's (the bare text): either way every box with its score."""
    model = _model("grounding-dino", grounding_dino, 0.0)
    result = api.evaluate(
        benchmark="mc_bench",
        data=mc_release,
        model=model,
        options=options,
        limit=N_SAMPLES,
        out=tmp_path / "run",
        show_progress=False,
        report=False,
    )
    assert not result.failed
    records = read_records(result.run_dir / "records.jsonl")
    assert len(records) == N_SAMPLES
    written = []
    for record in records.values():
        (turn,) = record["turns"]
        reply = json.loads(turn["reply"])
        assert set(reply) == {"image_1", "image_2"}
        assert turn.get("usage") == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        answer = record["answer"]
        assert [(a["image"], a["bbox"], a["score"]) for a in answer] == [
            (k, i["bbox_2d"], i["score"]) for k, key in enumerate(("image_1", "image_2")) for i in reply[key]
        ]
        written += answer
    assert len({a["score"] for a in written}) > 10  # every box with its own confidence, not a constant 1.0
    results = read_results(result.run_dir / "results_coco.json")
    assert len(results) == len(written)
    assert sorted(r["score"] for r in results) == pytest.approx(sorted(a["score"] for a in written))


def test_a_ref_adv_run_scores_the_top_box(
    grounding_dino: Path, ref_release: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    folder, rows = ref_release
    model = _model("grounding-dino", grounding_dino, top1=True)
    result = api.evaluate(
        benchmark="ref_adv_s",
        data=folder,
        model=model,
        options={"box_format": "abs_xyxy"},
        out=tmp_path / "run",
        show_progress=False,
        report=False,
    )
    assert not result.failed
    records = read_records(result.run_dir / "records.jsonl")
    assert len(records) == len(rows)
    every = _model("grounding-dino", grounding_dino, 0.0)
    for sample in result.benchmark.load(folder):
        (turn,) = records[sample.id]["turns"]
        (item,) = json.loads(turn["reply"])["boxes"]
        assert records[sample.id]["answer"] == [item["bbox_2d"]]
        ranked = json.loads(asyncio.run(every.complete(result.benchmark.prompt(sample), Generation())).text)["boxes"]
        assert len(ranked) > 1 and _same([item], [(ranked[0]["bbox_2d"], ranked[0]["score"])])  # the best of them all


@pytest.mark.parametrize("family", ["grounding-dino", "owlv2"])
def test_an_answer_does_not_depend_on_the_requests_sharing_its_pass(
    family: str, request: pytest.FixtureRequest, images: list[ImageRef]
) -> None:
    """Requests of several samples (texts of different lengths, images of different sizes) share a
    pass; each gets the boxes it gets alone (Grounding DINO pads no image: one size a pass)."""
    model = _model(family, _folder(family, request), 0.0)
    asked = [("red", images[0]), ("the big green square on the left", images[1]), ("a blue circle", images[0])]

    async def together() -> list[Reply]:
        return await asyncio.gather(*(model.complete(Conversation([Message("user", [t, r])]), Generation()) for t, r in asked))

    shared = asyncio.run(together())
    assert model.detector.passes == [3]
    for (text, ref), reply in zip(asked, shared):
        alone = _ask(model, [text, ref])
        expected = [(i["bbox_2d"], i["score"]) for i in json.loads(alone.text)["boxes"]]
        assert _same(json.loads(reply.text)["boxes"], expected), (family, text)


def test_the_command_line_runs_a_detector_family_in_this_process(grounding_dino: Path, tmp_path: Path) -> None:
    """`needlepoint eval --model-family grounding-dino --model FOLDER`: no server, the detector's
    scored boxes recorded, its threshold in the run identity (another threshold is another run);
    the detector flags refused without a detector family, and a server refused with one."""
    from helpers import one_sentence, run_quiet

    from needlepoint.benchmarks.mc_bench import demo as mc_demo

    data, _, _ = mc_demo.build(tmp_path / "data")
    base = ["eval", "mc_bench", "--data", str(data), "--model", str(grounding_dino), "--model-family", "grounding-dino"]
    base += ["--limit", "2", "--no-progress", "--no-report", "--detector-device", DEVICE]
    runs = []
    for threshold in (None, "0.3"):
        out = tmp_path / f"run-{threshold}"
        rc, err = run_quiet([*base, "--out", str(out), *(["--score-threshold", threshold] if threshold else [])])
        assert rc == 0, err
        header = json.loads((out / "run.json").read_text(encoding="utf-8"))
        settings = header["identity"]["model_settings"]
        assert settings["family"] == "grounding-dino" and settings["threshold"] == (0.25 if threshold is None else 0.3)
        records = read_records(out / "records.jsonl")
        assert len(records) == 2 and all(r["status"] == "done" for r in records.values())
        scores = [b["score"] for r in records.values() for b in r["answer"] or []]
        assert all(s > settings["threshold"] for s in scores)  # kept: strictly above the threshold
        runs.append(header["hash"])
    assert runs[0] != runs[1]
    rc, err = run_quiet([*base, "--out", str(tmp_path / "x"), "--api-url", "http://127.0.0.1:9/v1"])
    assert rc == 2 and "runs the detector in this process" in one_sentence(err)
    plain = ["eval", "mc_bench", "--data", str(data), "--model", "m", "--api-url", "http://127.0.0.1:9/v1"]
    rc, err = run_quiet([*plain, "--box-format", "abs_xyxy", "--score-threshold", "0.3", "--out", str(tmp_path / "y")])
    assert rc == 2 and "--score-threshold applies to a detector family" in one_sentence(err)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
