"""MC-Bench scoring: the authors' reference values, equality with pycocotools, the official
protocol's artefacts (present in official mode, gone in corrected mode), and input errors."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import MC_BENCH_RELEASE, extra_module

from needlepoint.benchmarks.mc_bench.cocoeval import Detections, match, precision
from needlepoint.benchmarks.mc_bench.corrected import relabel_groups
from needlepoint.benchmarks.mc_bench.groundtruth import GroundTruth, groundtruth_from_json, load_groundtruth
from needlepoint.benchmarks.mc_bench.official import regroup_images
from needlepoint.benchmarks.mc_bench.scoring import detections, read_results, score_results, write_results
from needlepoint.contract.base import DataError

RELEASE = MC_BENCH_RELEASE
DATA = RELEASE.parent
COCO_FILE = DATA / "MC-Bench_coco_format.json"
AREAS = ("all", "small", "medium", "large")


@pytest.fixture(scope="module")
def gt() -> GroundTruth:
    return load_groundtruth(RELEASE)


def all_gt(gt: GroundTruth) -> list[dict[str, Any]]:
    """Every GT box as its own prediction, own group, score 1.0."""
    return [{"image_id": b.image_id, "category_id": b.category_id, "bbox": list(b.bbox), "score": 1.0} for b in gt.boxes]


def random_results(gt: GroundTruth, seed: int) -> list[dict[str, Any]]:
    """A hostile results list: tied scores, shifted and exact boxes, extra categories, boxes on
    images without GT, zero-width and negative boxes, and one cell with more than 100 detections."""
    rng = random.Random(seed)
    out = []
    for b in gt.boxes:
        if rng.random() < 0.15:
            continue
        x, y, w, h = b.bbox
        j = rng.choice([0, 0, 2, 10, 40])
        box = [x + rng.uniform(-j, j), y + rng.uniform(-j, j), w * rng.uniform(0.7, 1.3), h * rng.uniform(0.9, 1.1)]
        if rng.random() < 0.3:
            box = [round(v) for v in box]
        cat = b.category_id if rng.random() < 0.9 else rng.choice([1, 2, 3, 12, 8, 9])
        out.append(
            {"image_id": b.image_id, "category_id": cat, "bbox": box, "score": round(rng.random(), rng.choice([1, 1, 2, 6]))}
        )
        if rng.random() < 0.1:
            out.append(
                {"image_id": b.image_id, "category_id": b.category_id, "bbox": list(b.bbox), "score": rng.choice([0.5, 1.0])}
            )
    for _ in range(300):
        im = rng.choice(gt.images)
        box = [rng.uniform(0, 300), rng.uniform(0, 300), rng.uniform(1, 200), rng.uniform(1, 200)]
        out.append({"image_id": im.id, "category_id": rng.randint(1, 4), "bbox": box, "score": rng.choice([0.1, 0.5, 0.9])})
    for _ in range(130):  # image 1, group 1: the box with annotation id 0
        out.append(
            {"image_id": 1, "category_id": 1, "bbox": [236 + rng.uniform(-30, 30), 210, 74, 193], "score": rng.choice([0.3, 0.6])}
        )
    out.append({"image_id": 1, "category_id": 1, "bbox": [236, 210, 0, 193], "score": 0.7})
    b = gt.boxes[-1]
    x, y, w, h = b.bbox
    out.append({"image_id": b.image_id, "category_id": 1, "bbox": [x + w, y, -w, h], "score": 0.7})  # negative area
    out.append({"image_id": b.image_id, "category_id": 1, "bbox": [x + w, y + h, -w, -h], "score": 0.7})  # positive area
    rng.shuffle(out)
    return out


def pycocotools_precision(coco_gt: dict[str, Any], results: list[dict[str, Any]]) -> np.ndarray:
    """pycocotools' precision at IoU 0.5 and maxDets 100, as (area, category, recall)."""
    coco_mod = extra_module("pycocotools.coco")
    eval_mod = extra_module("pycocotools.cocoeval")
    with contextlib.redirect_stdout(io.StringIO()):
        coco = coco_mod.COCO()
        coco.dataset = copy.deepcopy(coco_gt)
        coco.createIndex()
        ev = eval_mod.COCOeval(coco, coco.loadRes(copy.deepcopy(results)), "bbox")
        ev.evaluate()
        ev.accumulate()
    precision: np.ndarray = ev.eval["precision"][0, :, :, :, 2].transpose(2, 1, 0)
    return precision


def our_precision(gt: GroundTruth, results: list[dict[str, Any]], id0_artefact: bool = True) -> np.ndarray:
    m = match(
        gt.arrays,
        detections(results, gt),
        [im.id for im in gt.images],
        [c for c, _ in gt.categories],
        AREAS,
        id0_artefact=id0_artefact,
    )
    return precision(m)


# --- ground truth -------------------------------------------------------------------------------


def test_coco_layout_equals_the_authors_file(gt: GroundTruth) -> None:
    coco = json.loads(COCO_FILE.read_text())
    ours = gt.to_coco()
    assert [im["id"] for im in ours["images"]] == [im["id"] for im in coco["images"]]
    assert ours["images"] == coco["images"]
    assert ours["annotations"] == coco["annotations"]
    assert ours["categories"] == coco["categories"]


def test_coco_file_is_accepted_as_ground_truth(gt: GroundTruth) -> None:
    from_coco = load_groundtruth(COCO_FILE)
    assert from_coco.to_coco() == gt.to_coco()
    assert [s.image_ids for s in from_coco.samples] == [s.image_ids for s in gt.samples]
    results = read_results(DATA / "perturbed_noswap_result.json")
    a, b = score_results(gt, results), score_results(from_coco, results)
    # The COCO file names no prompt styles, so only the release file gives per-style figures.
    assert b["official"].pop("by_style") == {} and set(a["official"].pop("by_style")) == {"Referring", "Comparison", "Reasoning"}
    assert a["official"] == b["official"] and a["corrected"] == b["corrected"]
    assert b["analyses"]["by_style"] == {}  # the COCO file has no prompt styles


def test_ground_truth_facts(gt: GroundTruth) -> None:
    assert (len(gt.samples), len(gt.images), len(gt.boxes)) == (2000, 4000, 3203)
    styles = [s.style for s in gt.samples]
    assert (styles.count("Referring"), styles.count("Comparison"), styles.count("Reasoning")) == (346, 810, 844)
    assert regroup_images(gt)[-1] == 505 and gt.pair_image_id(505) == 504


def test_subset_keeps_order_and_ids(gt: GroundTruth) -> None:
    sub = gt.subset(["7", "3", "252"])
    assert [s.id for s in sub.samples] == ["3", "7", "252"]
    assert [im.id for im in sub.images] == [6, 7, 14, 15, 504, 505]
    assert {b.image_id for b in sub.boxes} <= {6, 7, 14, 15, 504, 505}
    with pytest.raises(DataError, match="sample id '9999' is not in"):
        gt.subset(["9999"])


# --- reference values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "ap50", "acc"),
    [
        ("dummy_result.json", 0.007176440403952977, 0.1445),
        ("all-gt", 0.99072033335085, 1.0),
        ("perturbed_noswap_result.json", 0.6562401387740078, 0.8585),
    ],
)
def test_official_reference_values(gt: GroundTruth, name: str, ap50: float, acc: float) -> None:
    results = all_gt(gt) if name == "all-gt" else read_results(DATA / name)
    official = score_results(gt, results)["official"]
    assert official["ap50"] == pytest.approx(ap50, abs=1e-12, rel=0)
    assert official["acc"] == pytest.approx(acc, abs=1e-12, rel=0)
    assert official["regrouping"]["image_id"] == 505 and official["regrouping"]["pair_image_id"] == 504


# --- equality with pycocotools ------------------------------------------------------------------


@pytest.mark.parametrize("case", ["perturbed", "dummy", "random-0", "subset-1", "subset-2", "subset-3", "subset-4"])
def test_cocoeval_equals_pycocotools(gt: GroundTruth, case: str) -> None:
    if case == "perturbed":
        results = read_results(DATA / "perturbed_noswap_result.json")
    elif case == "dummy":
        results = read_results(DATA / "dummy_result.json")
    else:
        seed = int(case.split("-")[1])
        if case.startswith("subset"):
            rng = random.Random(seed)
            gt = gt.subset(rng.sample([s.id for s in gt.samples], 300) + ["0", "252"])
        results = random_results(gt, seed)
    ref = pycocotools_precision(gt.to_coco(), results)
    ours = our_precision(gt, results)
    assert ref.shape == ours.shape
    assert np.array_equal(ref, ours)  # bit for bit, every area range, category and recall point
    for a in range(len(AREAS)):
        for k in range(ref.shape[1]):
            valid = ref[a, k][ref[a, k] > -1]
            if valid.size:
                assert float(np.mean(valid)) == float(np.mean(ours[a, k]))


def test_id0_flag_off_equals_pycocotools_with_ids_from_1(gt: GroundTruth) -> None:
    sub = gt.subset([s.id for s in gt.samples[:400]])
    coco = sub.to_coco()
    for a in coco["annotations"]:
        a["id"] += 1
    results = random_results(sub, 5)
    assert np.array_equal(pycocotools_precision(coco, results), our_precision(sub, results, id0_artefact=False))


# --- corrected protocol -------------------------------------------------------------------------


def test_corrected_perfect_answer_scores_one(gt: GroundTruth) -> None:
    out = score_results(gt, all_gt(gt))
    corrected, analyses = out["corrected"], out["analyses"]
    assert corrected["ap50"] == pytest.approx(1.0, abs=1e-12)
    assert corrected["acc"] == 1.0
    assert all(v == 1.0 for v in corrected["ap50_per_group"].values())
    assert corrected["unassigned_groups"] == 0
    assert analyses["group_agnostic_ap50"] == 1.0
    for style in analyses["by_style"].values():
        assert style["acc"] == 1.0 and style["ap50"] == pytest.approx(1.0, abs=1e-12)
    for size in analyses["ap50_by_size"].values():
        assert size == pytest.approx(1.0, abs=1e-12)
    assert analyses["mean_boxes_per_negative_sample"] == 0.0
    assert out["counts"]["positive_samples"] == 1714  # 1709 flagged, 6 negatives with boxes, 1 positive without


def test_corrected_is_invariant_to_renumbering_groups(gt: GroundTruth) -> None:
    results = read_results(DATA / "perturbed_noswap_result.json")
    rng = random.Random(3)
    labels: dict[str, dict[int, int]] = {}
    renumbered = []
    for r in results:
        sample = gt.image_by_id[r["image_id"]].sample_id
        if sample not in labels:
            new = rng.sample([1, 2, 3, 4, 5, 6, 7, 9, 12, 11], 10)
            labels[sample] = dict(zip([1, 2, 3, 4, 5, 6, 7, 9, 12, 11], new, strict=True))
        renumbered.append({**r, "category_id": labels[sample][r["category_id"]]})
    a, b = score_results(gt, results), score_results(gt, renumbered)
    assert a["corrected"] == b["corrected"]
    assert a["analyses"] == b["analyses"]
    assert a["official"]["ap50"] != b["official"]["ap50"]  # the official protocol does not repair this


def test_unassigned_groups_take_unused_ids(gt: GroundTruth) -> None:
    two = next(s for s in gt.samples if {b.category_id for b in gt.boxes if b.image_id in s.image_ids} == {1, 2})
    negative = next(s for s in gt.samples if not any(b.image_id in s.image_ids for b in gt.boxes))
    boxes = [b for b in gt.boxes if b.image_id in two.image_ids]
    results = [{"image_id": b.image_id, "category_id": {1: 5, 2: 3}[b.category_id], "bbox": list(b.bbox)} for b in boxes]
    results.append({"image_id": two.image_ids[0], "category_id": 9, "bbox": [0, 0, 5, 5]})  # a third group
    results += [{"image_id": negative.image_ids[1], "category_id": c, "bbox": [0, 0, 5, 5]} for c in (4, 2)]
    cats, unassigned = relabel_groups(gt, detections(results, gt))
    expected = [b.category_id for b in boxes] + [3, 1, 2]  # free ids in first-box order
    assert cats.tolist() == expected and unassigned == 3


# --- the official protocol's artefacts, and their absence in corrected mode --------------------


def test_stale_regrouping_only_last_pair_is_regrouped(gt: GroundTruth) -> None:
    """Swapped groups on a sample other than (504, 505) are not repaired officially."""
    sample = next(
        s for s in gt.samples if s.id != "252" and {b.category_id for b in gt.boxes if b.image_id in s.image_ids} == {1, 2}
    )
    results = all_gt(gt)
    for r in results:
        if r["image_id"] in sample.image_ids:
            r["category_id"] = 3 - r["category_id"]
    out = score_results(gt, results)
    assert out["official"]["regrouping"]["image_id"] == 505
    assert out["official"]["ap50"] < 0.99072033335085
    assert out["official"]["ap50_per_group"]["2"] < 1.0
    assert out["corrected"]["ap50"] == pytest.approx(1.0, abs=1e-12)


def test_chained_relabel_merges_swapped_groups(gt: GroundTruth) -> None:
    """On (504, 505) groups 1 and 2 swapped: 1->2 then 2->1 leaves both as group 1."""
    results = all_gt(gt)
    for r in results:
        if r["image_id"] in (504, 505) and r["category_id"] in (1, 2):
            r["category_id"] = 3 - r["category_id"]
    out = score_results(gt, results)
    assert out["official"]["regrouping"]["relabel"] == [[1, 2], [2, 1], [3, 3], [4, 4]]
    assert out["official"]["ap50_per_group"]["2"] < 1.0  # group 2's boxes ended in group 1
    assert out["corrected"]["ap50"] == pytest.approx(1.0, abs=1e-12)


def test_annotation_id_0_counts_as_a_miss_officially(gt: GroundTruth) -> None:
    only = gt.subset(["0"])  # image 1 holds the box with annotation id 0
    results = all_gt(only)
    out = score_results(gt, results, ["0"])
    assert [b.id for b in only.boxes] == [0]
    assert out["official"]["ap50"] == 0.0
    assert out["corrected"]["ap50"] == pytest.approx(1.0, abs=1e-12)  # 1 / (1 + np.spacing(1)): COCO's arithmetic


def test_no_group_2_box_reports_regrouping_none(gt: GroundTruth) -> None:
    out = score_results(gt, all_gt(gt.subset(["0", "1"])), ["0", "1"])
    assert out["official"]["regrouping"] == "none"
    assert out["official"]["acc"] == 1.0


def test_empty_results_are_scored(gt: GroundTruth) -> None:
    out = score_results(gt, [])
    negatives = out["counts"]["negative_samples"]
    assert out["official"]["ap50"] == 0.0 and out["corrected"]["ap50"] == 0.0
    assert out["official"]["acc"] == out["corrected"]["acc"] == negatives / 2000
    assert out["official"]["regrouping"]["relabel"] == []
    assert out["analyses"]["mean_boxes_per_sample"] == 0.0


# --- bad input ----------------------------------------------------------------------------------


def test_prediction_on_unknown_image_is_a_data_error(gt: GroundTruth) -> None:
    results = [
        {"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1]},
        {"image_id": 99999, "category_id": 1, "bbox": [0, 0, 1, 1]},
    ]
    with pytest.raises(DataError, match=r"prediction 1 names image id 99999, which is not in the ground truth"):
        score_results(gt, results)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"a": 1}', "is not a JSON list of predictions"),
        ('[{"image_id": 1, "category_id": 1}]', "prediction 0 .* has bbox None"),
        ('[{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3]}]', "has bbox \\[1, 2, 3\\]"),
        (
            '[{"image_id": 1, "category_id": true, "bbox": [1, 2, 3, 4]}]',
            "category_id \\(the group\\) is True, not a whole number",
        ),
        ('[{"image_id": "1", "category_id": 1, "bbox": [1, 2, 3, 4]}]', "has image_id '1'"),
        ('[{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "score": "high"}]', "has score 'high'"),
        ("[{", "is not valid JSON"),
    ],
)
def test_bad_results_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        read_results(path)


def test_missing_results_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        read_results(tmp_path / "nope.json")


def test_results_round_trip_and_empty_write(gt: GroundTruth, tmp_path: Path) -> None:
    results = [
        {"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4]},
        {"image_id": 2, "category_id": 2, "bbox": [1.5, 2, 3, 4], "score": 0.5},
    ]
    write_results(tmp_path / "r.json", results)
    assert read_results(tmp_path / "r.json") == [{**results[0], "score": 1.0}, results[1]]
    with pytest.raises(DataError, match="no boxes at all"):
        write_results(tmp_path / "empty.json", [])
    assert not (tmp_path / "empty.json").exists()


def _release() -> dict[str, Any]:
    release: dict[str, Any] = json.loads(RELEASE.read_text())
    return release


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["descriptions"][3].pop("images_id"), r"descriptions\[3\] has no field 'images_id'"),
        (lambda d: d["descriptions"][0].update(text_style="Other"), r"descriptions\[0\] field 'text_style' is 'Other'"),
        (lambda d: d["annotations"][5].update(bbox=[1, 2, 3]), r"annotations\[5\] field 'bbox'"),
        (lambda d: d["annotations"][5].update(category_id=9), r"annotations\[5\] field 'category_id' is 9"),
        (lambda d: d["annotations"][5].update(iscrowd=1), r"annotations\[5\] field 'iscrowd' is 1"),
        (lambda d: d["annotations"][5].update(image_id=10**6), r"annotations\[5\] field 'image_id' is 1000000"),
        (lambda d: d["annotations"][6].update(id=0), r"annotations\[6\] field 'id' repeats id 0"),
        (lambda d: d["images"][2].update(file_name="../../etc/passwd"), r"images\[2\] field 'file_name'"),
        (lambda d: d["images"][2].update(file_name="/abs/x.jpg"), r"images\[2\] field 'file_name'"),
        (lambda d: d["images"][2].update(height="tall"), r"images\[2\] field 'height' is 'tall'"),
        (lambda d: d.pop("categories"), r"field 'categories' is missing"),
    ],
)
def test_bad_ground_truth(edit: Any, message: str) -> None:
    data = _release()
    edit(data)
    with pytest.raises(DataError, match=f"^gt.json: {message}"):
        groundtruth_from_json(data, "gt.json")


def test_missing_ground_truth_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_groundtruth(tmp_path / "missing.json")


def test_detections_container_is_empty_safe() -> None:
    assert len(Detections.empty()) == 0
