"""MC-Bench's agentic baseline, the pure part: the reasoner's prompt and the reading of its replies,
the served localizer's prompt and box, and the answer built from located targets, scored by the
official and corrected protocols and exported as `results_coco.json` on a generated release."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from needlepoint.benchmarks.mc_bench.agentic import (
    REASONER_REPAIR_TEXT,
    Target,
    answer_from_detections,
    assemble_answer,
    detector_queries,
    localizer_prompt,
    localizer_request,
    parse_localizer_reply,
    parse_localizer_target,
    parse_targets,
    reasoner_prompt,
)
from needlepoint.benchmarks.mc_bench.benchmark import REPAIR_TEXT, McBench, McSample
from needlepoint.benchmarks.mc_bench.demo import write_release
from needlepoint.benchmarks.mc_bench.scoring import read_results, score_results
from needlepoint.contract.base import Dataset
from needlepoint.core.conversation import ImageRef
from needlepoint.core.geometry import model_frame, xywh_to_xyxy
from needlepoint.core.records import Record
from needlepoint.models.detector import Detection


def T(image: int, group: int, phrase: str) -> Target:
    return Target(image=image, group=group, phrase=phrase)


REASONER_REPLIES: list[tuple[str, str, Any]] = [
    (
        "the schema asked for, fenced",
        '```json\n{"image_1": [{"group": 1, "phrase": "the red mug on the left"}, {"group": 1, "phrase": "the red mug by the sink"}],'
        ' "image_2": [{"group": 2, "phrase": "the blue mug"}]}\n```',
        [T(0, 1, "the red mug on the left"), T(0, 1, "the red mug by the sink"), T(1, 2, "the blue mug")],
    ),
    (
        "prose around the fence, image 2 first",
        'Both images show a kitchen. Only the second has a kettle.\n```json\n{"image_2": [{"group": 1, "phrase": "the steel kettle"}],'
        ' "image_1": []}\n```\nLet me know if you need more.',
        [T(1, 1, "the steel kettle")],
    ),
    ("no instance in either image: a valid answer", '```json\n{"image_1": [], "image_2": []}\n```', []),
    ("an empty list", "[]", []),
    ("an empty object", "Nothing matches. {}", []),
    ("null and 'none' for an image", '{"image_1": null, "image_2": "None"}', []),
    (
        "keys spelled 'Image 1', groups as strings, a bare phrase",
        '{"Image 1": [{"group": "group 2", "phrase": "the cat"}], "Image 2": ["the dog under the table"]}',
        [T(0, 2, "the cat"), T(1, 1, "the dog under the table")],
    ),
    (
        "other phrase keys, group missing, an extra bbox ignored",
        '{"img1": [{"description": "the tallest man"}], "img2": [{"group": 1.0, "label": "the boy in red", "bbox_2d": [1, 2, 3, 4]}]}',
        [T(0, 1, "the tallest man"), T(1, 1, "the boy in red")],
    ),
    (
        "one image given as a single object",
        '{"image_1": {"group": 1, "phrase": "the only tree"}, "image_2": []}',
        [T(0, 1, "the only tree")],
    ),
    (
        "a flat list with image numbers",
        '[{"image": 2, "group": 1, "phrase": "the left sock"}, {"image": "image 1", "group": 1, "phrase": "the right sock"}]',
        [T(0, 1, "the right sock"), T(1, 1, "the left sock")],
    ),
    ("a wrapper key", '{"targets": {"image_1": [{"group": 1, "phrase": "a lamp"}], "image_2": []}}', [T(0, 1, "a lamp")]),
    (
        "a group with a list of phrases",
        '{"image_1": [{"group": 3, "phrases": ["the red apple", "the green apple"]}]}',
        [T(0, 3, "the red apple"), T(0, 3, "the green apple")],
    ),
    ("group 0 read as group 1", '{"image_1": [{"group": 0, "phrase": "a bird"}]}', [T(0, 1, "a bird")]),
    ("phrases padded with spaces", '{"image_2": [{"group": 1, "phrase": "  a bus \\n"}]}', [T(1, 1, "a bus")]),
    ("an empty reply", "   \n", "empty_response"),
    ("prose only", "Neither image contains a matching object.", "no_json_found"),
    ("broken JSON", '```json\n{"image_1": [{"group": 1, "phrase": "a cup"}\n```', "no_json_found"),
    ("boxes instead of phrases", '{"image_1": [{"group": 1, "bbox_2d": [10, 20, 30, 40]}], "image_2": []}', "bad_schema"),
    ("an empty phrase", '{"image_1": [{"group": 1, "phrase": "  "}]}', "bad_schema"),
    ("a number where a target should be", '{"image_1": [7]}', "bad_schema"),
    ("a fenced JSON string", '```json\n"the red car"\n```', "bad_schema"),
    ("a flat list without image numbers", '[{"group": 1, "phrase": "a chair"}]', "image_not_given"),
]


@pytest.mark.parametrize("reply,expected", [(r, e) for _, r, e in REASONER_REPLIES], ids=[n for n, _, _ in REASONER_REPLIES])
def test_reasoner_replies(reply: str, expected: Any) -> None:
    parsed = parse_targets(reply)
    if isinstance(expected, str):
        assert parsed.error == expected and parsed.answer is None
    else:
        assert parsed.error is None and parsed.answer == expected


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[McBench, Dataset[McSample]]:
    """A generated MC-Bench release (the demo set: all styles, negatives, two-group samples)."""
    folder, _ = write_release(tmp_path_factory.mktemp("mc_release"), pairs=12)
    bench = McBench(box_format="norm_1000_xyxy")
    return bench, bench.load(folder)


def test_reasoner_prompt_sends_the_pair_as_sequence_mode_does(release: tuple[McBench, Dataset[McSample]]) -> None:
    bench, samples = release
    sample = samples[3]
    ours = reasoner_prompt(sample).messages
    end_to_end = bench.prompt(sample).messages
    assert len(ours) == 1 and ours[0].role == "user"
    assert ours[0].parts[:4] == end_to_end[0].parts[:4] == ["Image 1:", sample.images[0], "\nImage 2:", sample.images[1]]
    text = ours[0].parts[4]
    assert isinstance(text, str)
    # the description and the task sentence are the end-to-end prompt's; no coordinates are asked for
    assert text.startswith(
        f'\nDescription: "{sample.text}"\nFind every object in Image 1 and Image 2 that the description refers to.'
    )
    assert "put every object in group 1" in text and "{coordinates}" not in text and "bbox" not in text
    assert '{"image_1": [{"group": 1, "phrase": "the red car on the left"}], "image_2": []}' in text
    assert REASONER_REPAIR_TEXT == REPAIR_TEXT


def test_localizer_prompt_is_one_image_and_its_phrase() -> None:
    image = ImageRef(key="pair001_1.jpg", path=Path("pair001_1.jpg"))
    conv = localizer_prompt('the "big" dog', image, "norm_1000_xyxy")
    (message,) = conv.messages
    assert message.role == "user" and message.parts[0] == image and len(message.images) == 1
    text = message.text
    assert 'described as "the "big" dog"' in text
    assert "normalised to 0-1000 over the width and height of the image" in text
    assert "in pixels of the image" in localizer_prompt("a cat", image, "abs_xyxy").messages[0].text


LOCALIZER_REPLIES: list[tuple[str, str, str, Any]] = [
    (
        "Qwen2.5-VL's fenced list with a label",
        "abs_xyxy",
        '```json\n[\n\t{"bbox_2d": [40, 30, 120, 90], "label": "the red car"}\n]\n```',
        [40.0, 30.0, 120.0, 90.0],
    ),
    ("the schema asked for, 0-1000", "norm_1000_xyxy", '{"bbox_2d": [100, 200, 500, 1000]}', [40.0, 60.0, 200.0, 300.0]),
    ("0-1 floats in prose", "norm_1_xyxy", 'The dog is here: {"bbox": [0.25, 0.5, 0.75, 1.0]}', [100.0, 150.0, 300.0, 300.0]),
    (
        "several boxes: the first is kept",
        "abs_xyxy",
        '[{"bbox_2d": [1, 2, 30, 40]}, {"bbox_2d": [100, 100, 200, 200]}]',
        [1.0, 2.0, 30.0, 40.0],
    ),
    ("a bare box, corners swapped and beyond the image", "abs_xyxy", "[450, 320, 10, 20]", [10.0, 20.0, 400.0, 300.0]),
    ("no box", "abs_xyxy", '{"bbox_2d": []}', "no_bbox_found"),
    ("prose only", "abs_xyxy", "I cannot find that object.", "no_bbox_found"),
    ("empty", "abs_xyxy", "", "empty_response"),
]


@pytest.mark.parametrize(
    "box_format,reply,expected", [(f, r, e) for _, f, r, e in LOCALIZER_REPLIES], ids=[n for n, _, _, _ in LOCALIZER_REPLIES]
)
def test_localizer_replies(box_format: Any, reply: str, expected: Any) -> None:
    parsed = parse_localizer_reply(reply, box_format, (400.0, 300.0))
    if isinstance(expected, str):
        assert parsed.error == expected
    else:
        assert parsed.error is None and parsed.answer == expected


def test_localizer_pixels_of_a_downscaled_image_are_scaled_back() -> None:
    seen = model_frame(800, 600, 400)  # sent at 400 x 300
    assert seen == (400, 300)
    parsed = parse_localizer_reply('{"bbox_2d": [10, 20, 110, 220]}', "abs_xyxy", (800.0, 600.0), seen)
    assert parsed.answer == [20.0, 40.0, 220.0, 440.0]


def perfect(dataset: Dataset[McSample], sample: McSample) -> tuple[list[Target], list[list[float]], list[float]]:
    """A reasoner naming every GT instance with its group, and a localizer boxing each exactly."""
    assert dataset.truth is not None
    targets, boxes, scores = [], [], []
    for position, image_id in enumerate(sample.image_ids):
        for b in dataset.truth.boxes:
            if b.image_id == image_id:
                targets.append(T(position, b.category_id, f"object {b.id}"))
                boxes.append(xywh_to_xyxy(b.bbox))
                scores.append(0.5 + b.id / 1000)
    return targets, boxes, scores


def test_a_perfect_agent_scores_one_under_both_protocols(release: tuple[McBench, Dataset[McSample]], tmp_path: Path) -> None:
    bench, samples = release
    assert samples.truth is not None
    records: list[Record] = []
    for sample in samples:
        targets, boxes, scores = perfect(samples, sample)
        parsed = assemble_answer(targets, boxes, scores)
        assert [b["phrase"] for b in parsed.answer] == [t["phrase"] for t in targets]
        records.append({"id": sample.id, "answer": parsed.answer, "scores": bench.judge(sample, parsed)})
    judged = [r["scores"] for r in records]
    assert sum(j["boxes"] for j in judged) == len(samples.truth.boxes) > 0
    assert any(j["groups"] == 2 for j in judged) and any(j["boxes"] == 0 for j in judged)  # two-group and negative samples

    # Sample 0 holds the GT box with annotation id 0, which the official evaluator never matches:
    # without it, a perfect answer is 1.0 under both protocols.
    metrics = bench.score(samples[1:], records[1:])
    for protocol in ("official", "corrected"):
        assert metrics[protocol]["acc"] == 1.0 and metrics[protocol]["ap50"] == 1.0, protocol
    assert metrics["counts"]["predictions"] == sum(j["boxes"] for j in judged[1:])

    # With it, the official number is the evaluator's own on the ground truth given as predictions.
    metrics = bench.score(samples, records)
    gt_as_results = [
        {"image_id": b.image_id, "category_id": b.category_id, "bbox": list(b.bbox), "score": 0.5 + b.id / 1000}
        for b in samples.truth.boxes
    ]
    direct = score_results(samples.truth, gt_as_results, [s.id for s in samples])
    assert metrics["corrected"]["ap50"] == metrics["corrected"]["acc"] == 1.0
    assert metrics["official"]["ap50"] == direct["official"]["ap50"] < 1.0

    # results_coco.json: every box in COCO xywh with its group and the localizer's score
    (path,) = bench.export(tmp_path, samples, records, "reasoner + localizer", metrics)
    written = read_results(path)
    expected = sorted((b.image_id, b.category_id, [float(v) for v in b.bbox], 0.5 + b.id / 1000) for b in samples.truth.boxes)
    assert sorted((r["image_id"], r["category_id"], r["bbox"], r["score"]) for r in written) == expected
    assert json.loads(path.read_text()) == written


def test_a_wrong_group_and_an_unlocated_target(release: tuple[McBench, Dataset[McSample]]) -> None:
    bench, samples = release
    sample = next(s for s in samples[1:] if len(perfect(samples, s)[0]) >= 2)
    targets, boxes, _ = perfect(samples, sample)
    missing: list[list[float] | None] = [None, *boxes[1:]]
    parsed = assemble_answer(targets, missing)
    assert len(parsed.answer) == len(targets) - 1 and all(b["score"] == 1.0 for b in parsed.answer)
    assert parsed.answer[0]["phrase"] == targets[1]["phrase"]
    metrics = bench.score(samples.with_samples([sample]), [{"id": sample.id, "answer": parsed.answer}])
    assert metrics["corrected"]["ap50"] < 1.0 and metrics["counts"]["predictions"] == len(targets) - 1
    with pytest.raises(ValueError):
        assemble_answer(targets, boxes[:-1])


def test_localizer_requests_and_boxes_per_target(tmp_path: Path) -> None:
    """The localizer sees a target's own image as the run sends it (here downscaled to 200 px a
    side); its pixel boxes are read back in the annotated size."""
    folder, _ = write_release(tmp_path, pairs=2)
    bench = McBench(box_format="abs_xyxy", max_image_side=200)
    sample = bench.load(folder)[0]
    target = T(1, 1, "the second square")
    (message,) = localizer_request(sample, target, "abs_xyxy").messages
    assert message.parts[0] == sample.images[1] and message.parts[0].max_side == 200
    assert '"the second square"' in message.text
    width, height = sample.geometry.sizes[1]
    assert (width, height) == (360.0, 360.0)
    parsed = parse_localizer_target(sample, target, '{"bbox_2d": [10, 20, 110, 120]}', "abs_xyxy")
    assert parsed.answer == [18.0, 36.0, 198.0, 216.0]  # sent at 200 x 200
    assert parse_localizer_target(sample, target, "no box", "abs_xyxy").error == "no_bbox_found"


def test_detections_become_the_answer_in_target_order(release: tuple[McBench, Dataset[McSample]]) -> None:
    _, samples = release
    sample = samples[0]
    targets = [T(1, 1, "b first"), T(0, 2, "a only"), T(1, 1, "b second"), T(1, 3, "b third")]
    queries = detector_queries(sample, targets)
    assert queries == [(sample.images[0], ["a only"]), (sample.images[1], ["b first", "b second", "b third"])]
    detections = [
        [Detection((1.0, 2.0, 3.0, 4.0), 0.9, True)],
        [
            Detection((5.0, 6.0, 7.0, 8.0), 0.3, True),
            Detection((9.0, 9.0, 10.0, 10.0), 0.01, False),
            Detection((11.0, 12.0, 13.0, 14.0), 0.05, True),
        ],
    ]
    parsed = answer_from_detections(targets, detections)
    assert parsed.answer == [
        {"image": 1, "group": 1, "bbox": [5.0, 6.0, 7.0, 8.0], "score": 0.3, "phrase": "b first"},
        {"image": 0, "group": 2, "bbox": [1.0, 2.0, 3.0, 4.0], "score": 0.9, "phrase": "a only"},
        {"image": 1, "group": 3, "bbox": [11.0, 12.0, 13.0, 14.0], "score": 0.05, "phrase": "b third"},
    ]
    assert detector_queries(sample, []) == [(sample.images[0], []), (sample.images[1], [])]
    assert answer_from_detections([], [[], []]).answer == []
