"""The detector localizer: tiny randomly initialised Grounding DINO, OWLv2 and OWL-ViT models built from
configs on the CPU, saved in the Hugging Face folder layout with tokenizers written here (a BERT
`vocab.txt`, a CLIP BPE vocabulary and merges), and loaded back as a user's model would be.

The boxes and scores `Detector` returns are compared with transformers' own post-processing of the
same model on the same inputs (transformers 5 scales OWLv2 boxes by the padded square, as the
model sees it). Needs the `models` extra (torch, transformers). Without it these tests are skipped,
unless NEEDLEPOINT_TEST_MODELS=1 says they must run, in which case they fail with what to install.
"""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_DEVICE, models_extra
from helpers.detector import BOX_TOL, OWL_TEXT_LEN, SCORE_TOL, WORDS, ForwardLog, write_owl
from PIL import Image

from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.records import Record
from needlepoint.models.detector import DEFAULT_THRESHOLD, Detection, Detector

DEVICE = TEST_DEVICE
"""Where the tiny models run: the CPU, or e.g. `cuda` on a machine with a GPU (the numbers compared
are computed on the same device)."""
SIZES = [(80, 50), (40, 60), (64, 64)]  # (width, height): wide, tall, square


def _images() -> list[Any]:
    """Three small images of different sizes and shapes, with coloured shapes on them."""
    out = []
    for k, (w, h) in enumerate(SIZES):
        im = Image.new("RGB", (w, h), (240, 240, 240))
        im.paste((200, 30, 30), (5 + k, 5, 25 + k, 20))
        im.paste((30, 30, 200), (w - 20, h - 25, w - 4, h - 6))
        out.append(im)
    return out


QUERIES = [["the red square", "a blue circle"], ["big green square"], ["left", "the red circle on the right", "blue"]]


@pytest.fixture(scope="module", params=["owlv2", "owlvit"])
def owl(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return request.param, write_owl(tmp_path_factory.mktemp(f"tiny_{request.param}"), request.param)


def _clip(box: Any, width: int, height: int) -> list[float]:
    x1, y1, x2, y2 = (float(v) for v in box)
    return [min(max(x1, 0.0), width), min(max(y1, 0.0), height), min(max(x2, 0.0), width), min(max(y2, 0.0), height)]


def _same(detection: Detection, box: list[float], score: float) -> bool:
    return all(math.isclose(a, b, abs_tol=BOX_TOL) for a, b in zip(detection.box, box)) and math.isclose(
        detection.score, score, abs_tol=SCORE_TOL
    )


def test_grounding_dino_batches_every_phrase_of_every_image_into_one_pass(grounding_dino: Path) -> None:
    torch, _ = models_extra()
    detector = Detector.load(str(grounding_dino), device=DEVICE)
    assert detector.kind == "grounding-dino" and detector.threshold == DEFAULT_THRESHOLD == 0.05
    log = ForwardLog(detector.model)
    images = _images()
    got = detector.detect(list(zip(images, QUERIES)))
    assert [len(d) for d in got] == [len(q) for q in QUERIES]
    (call,) = log.calls  # six (image, phrase) rows, one pass
    assert call["pixel_values"][0] == call["input_ids"][0] == 6 and call["pixel_mask"][0] == 6

    # transformers' own post-processing of the same rows: per row, the best box, in pixels
    processor = detector.processor
    rows = [(images[i], p) for i, q in enumerate(QUERIES) for p in q]
    pixels = processor.image_processor(images=[im for im, _ in rows], return_tensors="pt")
    text = processor.tokenizer([p.lower() + "." for _, p in rows], padding=True, return_tensors="pt")
    with torch.inference_mode():
        outputs = detector.model(
            pixel_values=pixels["pixel_values"].to(DEVICE),
            pixel_mask=pixels["pixel_mask"].to(DEVICE),
            **{k: v.to(DEVICE) for k, v in text.items()},
        )
    outputs.logits, outputs.pred_boxes = outputs.logits.cpu(), outputs.pred_boxes.cpu()
    sizes = [(im.size[1], im.size[0]) for im, _ in rows]
    post = processor.post_process_grounded_object_detection(
        outputs, text["input_ids"], threshold=0.0, text_threshold=0.0, target_sizes=sizes
    )
    flat = [d for per_image in got for d in per_image]
    for (im, _), result, detection in zip(rows, post, flat):
        best = int(result["scores"].argmax())
        assert _same(detection, _clip(result["boxes"][best], *im.size), float(result["scores"][best]))
        assert detection.kept == (detection.score >= 0.05)
        x1, y1, x2, y2 = detection.box
        assert 0 <= x1 <= x2 <= im.size[0] and 0 <= y1 <= y2 <= im.size[1]

    # two rows a pass: the same six answers, in three passes
    log.calls.clear()
    detector.batch_size = 2
    again = detector.detect(list(zip(images, QUERIES)))
    assert [c["input_ids"][0] for c in log.calls] == [2, 2, 2]
    assert [len(d) for d in again] == [len(q) for q in QUERIES]


def test_owl_sends_an_image_once_with_its_phrases_as_queries(owl: tuple[str, Path]) -> None:
    torch, _ = models_extra()
    kind, folder = owl
    detector = Detector.load(str(folder), device=DEVICE)
    assert detector.kind == kind
    log = ForwardLog(detector.model)
    images = _images()
    got = detector.detect(list(zip(images, QUERIES)))
    assert [len(d) for d in got] == [len(q) for q in QUERIES]
    (call,) = log.calls  # three images, each with three queries (the longest list), in one pass
    assert call["pixel_values"][0] == 3 and call["input_ids"] == (9, OWL_TEXT_LEN)

    # each phrase alone through the processor and transformers' post-processing: its best box
    for im, phrases, detections in zip(images, QUERIES, got):
        for phrase, detection in zip(phrases, detections):
            inputs = detector.processor(text=[[phrase]], images=[im], return_tensors="pt")
            with torch.inference_mode():
                outputs = detector.model(**{k: v.to(DEVICE) for k, v in inputs.items()})
            outputs.logits, outputs.pred_boxes = outputs.logits.cpu(), outputs.pred_boxes.cpu()
            (result,) = detector.processor.image_processor.post_process_object_detection(
                outputs, threshold=0.0, target_sizes=[(im.size[1], im.size[0])]
            )
            best = int(result["scores"].argmax())
            assert _same(detection, _clip(result["boxes"][best], *im.size), float(result["scores"][best])), (kind, phrase)


def test_the_threshold_keeps_a_score_equal_to_it(grounding_dino: Path) -> None:
    images = _images()
    first = Detector.load(str(grounding_dino), device=DEVICE).detect([(images[0], ["the red square"])])[0][0]
    at = Detector.load(str(grounding_dino), device=DEVICE, threshold=first.score).detect([(images[0], ["the red square"])])[0][0]
    above = math.nextafter(first.score, 1.0)
    over = Detector.load(str(grounding_dino), device=DEVICE, threshold=above).detect([(images[0], ["the red square"])])[0][0]
    assert at.kept and not over.kept
    assert at.box == over.box == first.box and over.score == first.score  # the box and score are kept for the record
    assert over.to_json() == {"box": list(first.box), "score": first.score, "kept": False}


def test_image_files_and_async_calls(owl: tuple[str, Path], tmp_path: Path) -> None:
    kind, folder = owl
    detector = Detector.load(str(folder), device=DEVICE)
    images = _images()
    refs = []
    for k, im in enumerate(images):
        path = tmp_path / f"im{k}.png"
        im.save(path)
        refs.append(ImageRef(key=path.name, path=path))
    from_files = asyncio.run(detector.adetect([(refs[1], ["blue"]), (refs[0], []), (refs[2], ["red", "a circle"])]))
    direct = detector.detect([(images[1], ["blue"]), (images[0], []), (images[2], ["red", "a circle"])])
    assert [len(d) for d in from_files] == [1, 0, 2]
    assert from_files == direct
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    with pytest.raises(DataError, match=r"^image bad.jpg cannot be decoded"):
        detector.detect([(ImageRef(key="bad.jpg", path=bad), ["red"])])


def test_devices_and_bad_settings(grounding_dino: Path, tmp_path: Path) -> None:
    torch, transformers = models_extra()
    assert Detector.load(str(grounding_dino)).device == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(
            DataError, match=r"^--localizer-device cuda: torch sees no CUDA GPU on this machine; use --localizer-device cpu$"
        ):
            Detector.load(str(grounding_dino), device="cuda")
    with pytest.raises(DataError, match=r"^--detector-threshold must be between 0 and 1, not 1.5$"):
        Detector.load(str(grounding_dino), device=DEVICE, threshold=1.5)
    with pytest.raises(DataError, match=r"^cannot load the detector .*nothing-here.*; pass a local folder with the config"):
        Detector.load(str(tmp_path / "nothing-here"))
    bert = transformers.BertModel(
        transformers.BertConfig(
            vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
        )
    )
    with pytest.raises(
        DataError, match=r"^not-a-detector is a bert model; the detector localizer runs Grounding DINO, OWLv2, OWL-ViT$"
    ):
        Detector("not-a-detector", bert, None, device="cpu")


def test_missing_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # an import of torch now fails
    with pytest.raises(DataError) as err:
        Detector.load("IDEA-Research/grounding-dino-base")
    assert str(err.value) == (
        "--localizer detector: needs torch and transformers (torch is missing); install them with pip install -e '.[agentic]'"
    )


def test_a_detected_box_reaches_results_coco_json(grounding_dino: Path, tmp_path: Path) -> None:
    """Phrases of a generated MC-Bench release through the detector and into the authors' results
    format: each kept box, converted to COCO [x, y, w, h] of its image with the detector's score."""
    from needlepoint.benchmarks.mc_bench.agentic import Target, answer_from_detections, detector_queries
    from needlepoint.benchmarks.mc_bench.benchmark import McBench
    from needlepoint.benchmarks.mc_bench.demo import write_release
    from needlepoint.benchmarks.mc_bench.scoring import read_results

    folder, _ = write_release(tmp_path / "release", pairs=3)
    bench = McBench(box_format="abs_xyxy")
    samples = bench.load(folder)
    detector = Detector.load(str(grounding_dino), device=DEVICE)
    plans = [
        [Target(image=1, group=1, phrase="the red square"), Target(image=0, group=2, phrase="a blue circle")],
        [],
        [Target(image=1, group=1, phrase="big green square")],
    ]
    queries = [q for s, targets in zip(samples, plans) for q in detector_queries(s, targets)]
    log = ForwardLog(detector.model)
    detections = detector.detect(queries)  # three samples' phrases: one pass
    assert len(log.calls) == 1 and log.calls[0]["input_ids"][0] == 3
    records: list[Record] = []
    for k, (sample, targets) in enumerate(zip(samples, plans)):
        parsed = answer_from_detections(targets, detections[2 * k : 2 * k + 2])
        records.append({"id": sample.id, "answer": parsed.answer, "scores": bench.judge(sample, parsed)})
    (path,) = bench.export(tmp_path, samples, records, "reasoner + tiny detector", {})
    expected = []
    for sample, targets, pair in zip(samples, plans, [detections[i : i + 2] for i in range(0, 6, 2)]):
        seen = [0, 0]
        for t in targets:
            d = pair[t["image"]][seen[t["image"]]]
            seen[t["image"]] += 1
            assert d.kept  # scores of this random model are far above 0.05
            x1, y1, x2, y2 = d.box
            width, height = sample.geometry.sizes[t["image"]]
            assert 0 <= x1 <= x2 <= width and 0 <= y1 <= y2 <= height
            expected.append(
                {
                    "image_id": sample.image_ids[t["image"]],
                    "category_id": t["group"],
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "score": d.score,
                }
            )
    assert read_results(path) == expected
