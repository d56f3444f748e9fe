"""MC-Bench end to end on the real annotations: `needlepoint eval mc_bench` against a simulated
model that answers from the ground truth, in both input modes, with a model's mistakes, on subsets,
and the command line's refusals; then `needlepoint score mc_bench` on what the run wrote.

The release folder is the real `mc-bench_v0.2_val.json` with stand-in images of the annotated
sizes for the first N_SAMPLES descriptions only (the loader does not need the other images to
exist: a missing file only fails its own sample). Each stand-in is one flat colour that encodes
its file's number (samples share files: 525 file names are used by more than one image id, 1,180
ids in all), so the requests of different samples hash differently and a decoded request tells which
file it carries.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import MC_BENCH_RELEASE, run_cli
from helpers.images import rgb_at
from PIL import Image

from needlepoint.benchmarks.mc_bench.benchmark import BAND, REPAIR_TEXT, McBench
from needlepoint.benchmarks.mc_bench.groundtruth import GroundTruth, GtSample, load_groundtruth
from needlepoint.benchmarks.mc_bench.scoring import read_results, score_results
from needlepoint.cli import main
from needlepoint.models.simulated import request_key, script_key

RELEASE = MC_BENCH_RELEASE
N_SAMPLES = 300  # descriptions 0..299 get images; the runs use --limit N_SAMPLES or less
FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "bmp": "BMP"}

Script = dict[str, list[Any]]
FILE_NUMBERS: dict[str, int] = {}  # file name -> the number its stand-in's colour encodes (set by `release`)


# --- the release folder and the simulated model's answers ---------------------------------------


def colour(number: int) -> tuple[int, int, int]:
    """The flat colour of a stand-in image: three base-16 digits of its file's number, 16 levels
    apart, so JPEG's rounding never makes two numbers alike (numbers below 4096)."""
    return (16 * (number % 16) + 8, 16 * (number // 16 % 16) + 8, 16 * (number // 256 % 16) + 8)


def number_of_colour(rgb: tuple[int, ...]) -> int:
    r, g, b = (round((c - 8) / 16) for c in rgb[:3])
    return r + 16 * g + 256 * b


def file_numbers(images: list[dict[str, Any]]) -> dict[str, int]:
    """A number per distinct file name, in order of first appearance in the release's images."""
    out: dict[str, int] = {}
    for im in images:
        out.setdefault(im["file_name"], len(out))
    return out


def file_number(gt: GroundTruth, image_id: int) -> int:
    """The number whose colour the stand-in of `image_id` has."""
    return FILE_NUMBERS[gt.image_by_id[image_id].file_name]


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real release file, with stand-in images for the first N_SAMPLES descriptions (in the
    format their file names say; JPEGs also carry the number in a comment)."""
    folder = tmp_path_factory.mktemp("mc_release")
    shutil.copy(RELEASE, folder / RELEASE.name)
    data = json.loads(RELEASE.read_text(encoding="utf-8"))
    wanted = {i for d in data["descriptions"][:N_SAMPLES] for i in d["images_id"]}
    numbers = file_numbers(data["images"])
    FILE_NUMBERS.update(numbers)
    for im in data["images"]:
        if im["id"] not in wanted or (folder / "mc-bench_images" / im["file_name"]).exists():
            continue
        path = folder / "mc-bench_images" / im["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        fmt = FORMATS[path.suffix[1:].lower()]
        number = numbers[im["file_name"]]
        extra = {"quality": 90, "comment": f"stand-in number {number}".encode()} if fmt == "JPEG" else {}
        Image.new("RGB", (im["width"], im["height"]), colour(number)).save(path, fmt, **extra)
    return folder


@pytest.fixture(scope="module")
def gt(release: Path) -> GroundTruth:
    return load_groundtruth(release / RELEASE.name)


def gt_items(gt: GroundTruth, sample: GtSample) -> list[tuple[int, int, list[float]]]:
    """(position in the pair, group, [x1, y1, x2, y2]) of every GT box of a sample, in file order."""
    position = {image_id: k for k, image_id in enumerate(sample.image_ids)}
    return [
        (position[b.image_id], b.category_id, [b.bbox[0], b.bbox[1], b.bbox[0] + b.bbox[2], b.bbox[1] + b.bbox[3]])
        for b in gt.boxes
        if b.image_id in position
    ]


def size(gt: GroundTruth, image_id: int) -> tuple[float, float]:
    im = gt.image_by_id[image_id]
    return im.width, im.height


def sequence_answer(gt: GroundTruth, sample: GtSample, items: list[tuple[int, int, list[float]]] | None = None) -> str:
    """The spec's per-image JSON in norm_1000_xyxy (fenced, as models write it)."""
    answer: dict[str, list[dict[str, Any]]] = {"image_1": [], "image_2": []}
    for position, group, (x1, y1, x2, y2) in gt_items(gt, sample) if items is None else items:
        w, h = size(gt, sample.image_ids[position])
        box = [x1 / w * 1000, y1 / h * 1000, x2 / w * 1000, y2 / h * 1000]
        answer[f"image_{position + 1}"].append({"group": group, "bbox_2d": box})
    return "```json\n" + json.dumps(answer) + "\n```"


def merged_answer(gt: GroundTruth, sample: GtSample, items: list[tuple[int, int, list[float]]] | None = None) -> str:
    """The merged-mode JSON in abs_xyxy on the canvas: image 2's boxes shifted by w1 + BAND."""
    dx = size(gt, sample.image_ids[0])[0] + BAND
    boxes = []
    for position, group, (x1, y1, x2, y2) in gt_items(gt, sample) if items is None else items:
        shift = dx if position == 1 else 0
        boxes.append({"group": group, "bbox_2d": [x1 + shift, y1, x2 + shift, y2]})
    return json.dumps({"boxes": boxes})


def scripted(gt: GroundTruth, bench: McBench, release: Path, limit: int) -> tuple[Script, dict[str, GtSample]]:
    """The perfect answer to each of the first `limit` samples under its script key, and the
    sample of each key."""
    answer = merged_answer if bench.input_mode == "merged" else sequence_answer
    script, by_key = {}, {}
    for s in bench.load(release)[:limit]:
        key = script_key(bench.prompt(s))
        by_key[key] = gt.sample_by_id[s.id]
        script[key] = [answer(gt, gt.sample_by_id[s.id])]
    assert len(script) == limit, "two samples share a script key: the stand-in images are not distinct"
    return script, by_key


@pytest.fixture(scope="module")
def sequence_script(gt: GroundTruth, release: Path) -> tuple[Script, dict[str, GtSample]]:
    return scripted(gt, McBench(box_format="norm_1000_xyxy", input_mode="sequence"), release, N_SAMPLES)


def eval_args(data: Path, url: str, run: Path, *extra: str, report: bool = False) -> list[str]:
    return [
        "eval",
        "mc_bench",
        "--data",
        str(data),
        "--model",
        "sim/mc-bench",
        "--api-url",
        url,
        "--out",
        str(run),
        "--no-progress",
        "--max-retries",
        "0",
        *([] if report else ["--no-report"]),
        *extra,
    ]


def records_of(run: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, (run / "records.jsonl").read_text().splitlines())}


def gt_results(gt: GroundTruth, sample_ids: list[str]) -> list[dict[str, Any]]:
    """Every GT box of the samples as its own prediction, own group, score 1.0."""
    images = {i for s in sample_ids for i in gt.sample_by_id[s].image_ids}
    return [
        {"image_id": b.image_id, "category_id": b.category_id, "bbox": list(b.bbox), "score": 1.0}
        for b in gt.boxes
        if b.image_id in images
    ]


def assert_same_results(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert (g["image_id"], g["category_id"], g["score"]) == (e["image_id"], e["category_id"], e["score"])
        assert g["bbox"] == pytest.approx(e["bbox"], abs=1e-6)


def assert_scores_equal(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Two metrics blocks agree: numbers to 1e-12, everything else exactly."""
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        if isinstance(v, dict):
            assert_scores_equal(got[k], v)
        elif isinstance(v, float):
            assert got[k] == pytest.approx(v, abs=1e-12), k
        else:
            assert got[k] == v, k


def decoded_images(body: dict[str, Any]) -> list[Image.Image]:
    """The images of a request's first user message, decoded from their data URLs."""
    content = body["messages"][0]["content"]
    urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert all(u.startswith("data:image/jpeg;base64,") for u in urls)
    return [Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))) for u in urls]


def one_sentence_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("needlepoint: error: ") and "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# --- sequence mode: a perfect model -----------------------------------------------------------------


def test_sequence_mode_perfect_answers(
    serve: Callable[..., Any],
    release: Path,
    gt: GroundTruth,
    sequence_script: tuple[Script, dict[str, GtSample]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    script, by_key = sequence_script
    server = serve(script=script, default=None)
    run = tmp_path / "run"
    args = eval_args(
        release,
        server.url,
        run,
        "--box-format",
        "norm_1000_xyxy",
        "--input-mode",
        "sequence",
        "--limit",
        str(N_SAMPLES),
        "--json",
    )
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    metrics = json.loads((run / "metrics.json").read_text())
    assert printed == metrics
    ids = [str(i) for i in range(N_SAMPLES)]

    # the requests: one per sample, both images in pair order, labelled
    assert len(server.requests) == N_SAMPLES
    for _, body in server.requests[:40]:
        sample = by_key[request_key(body["messages"])]
        content = body["messages"][0]["content"]
        assert [p["type"] for p in content] == ["text", "image_url", "text", "image_url", "text"]
        assert (content[0]["text"], content[2]["text"]) == ("Image 1:", "\nImage 2:")
        assert f'Description: "{sample.text}"' in content[4]["text"]
        assert "normalised to 0-1000" in content[4]["text"]
        images = decoded_images(body)
        assert [im.size for im in images] == [size(gt, i) for i in sample.image_ids]
        assert [number_of_colour(rgb_at(im, (im.width // 2, im.height // 2))) for im in images] == [
            file_number(gt, i) for i in sample.image_ids
        ]

    # the records: every answer parsed on the first turn, every GT box back
    records = records_of(run)
    assert sorted(records, key=int) == ids
    for sid, rec in records.items():
        n_gt = len(gt_items(gt, gt.sample_by_id[sid]))
        assert (rec["status"], rec["parse_error"], rec["repair_used"], rec["scores"]["boxes"]) == ("done", None, False, n_gt)

    # the metrics: corrected perfect; official has the id-0 artefact (annotation 0 is sample 0's)
    assert metrics["corrected"]["ap50"] == pytest.approx(1.0, abs=1e-9)
    assert metrics["corrected"]["acc"] == 1.0
    assert metrics["corrected"]["unassigned_groups"] == 0
    assert metrics["official"]["acc"] == 1.0
    assert 0 in {b.id for b in gt.subset(ids).boxes}
    assert 0.95 < metrics["official"]["ap50"] < 1.0
    assert metrics["counts"]["samples"] == N_SAMPLES
    assert metrics["counts"]["gt_boxes"] == metrics["counts"]["predictions"] == len(gt.subset(ids).boxes)
    assert metrics["parse_errors"] == {}
    # --limit bounds what is requested; `samples` counts the whole release (a run never shrinks)
    assert metrics["run"] == {
        "samples": len(gt.samples),
        "requested": N_SAMPLES,
        "answered": N_SAMPLES,
        "failed": 0,
        "failed_by_kind": {},
        "not_requested": len(gt.samples) - N_SAMPLES,
        "failed_ids": [],
        "skipped": [],
    }

    # the exported results file: valid COCO results, the GT boxes, and it re-scores to the run's metrics
    results = read_results(run / "results_coco.json")
    assert_same_results(results, gt_results(gt, ids))
    rescored = score_results(gt, results, ids)
    for block in ("official", "corrected", "analyses", "counts"):
        assert_scores_equal(metrics[block], rescored[block])

    # `needlepoint score` on the run folder prints the numbers of metrics.json: it must score the
    # run's samples (here --limit 300), not all 2,000 of the annotation file
    done = run_cli(["score", "mc_bench", "--predictions", str(run), "--data", str(release), "--json"])
    assert done.returncode == 0, done.stderr
    scored = json.loads(done.stdout)
    assert scored["counts"]["samples"] == N_SAMPLES, "score on a run folder scored other samples than the run's"
    assert_scores_equal(scored["official"], metrics["official"])
    assert_scores_equal(scored["corrected"], metrics["corrected"])


# --- merged mode: one canvas per request ------------------------------------------------------------


def test_merged_mode_perfect_answers(
    serve: Callable[..., Any], release: Path, gt: GroundTruth, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = McBench(box_format="abs_xyxy", input_mode="merged")
    script, by_key = scripted(gt, bench, release, N_SAMPLES)
    server = serve(script=script, default=None)
    run = tmp_path / "run"
    args = eval_args(
        release, server.url, run, "--box-format", "abs_xyxy", "--input-mode", "merged", "--limit", str(N_SAMPLES), "--json"
    )
    assert main(args) == 0
    metrics = json.loads(capsys.readouterr().out)

    assert len(server.requests) == N_SAMPLES
    for n, (_, body) in enumerate(server.requests):
        sample = by_key[request_key(body["messages"])]
        content = body["messages"][0]["content"]
        assert [p["type"] for p in content] == ["image_url", "text"]
        assert "two images side by side" in content[1]["text"] and "pixels of the whole picture" in content[1]["text"]
        (canvas,) = decoded_images(body)
        (w1, h1), (w2, h2) = (size(gt, i) for i in sample.image_ids)
        assert canvas.size == (w1 + BAND + w2, max(h1, h2))
        if n < 40:  # the pixels: image 1 left, white band, image 2 right, top-aligned on white
            px = canvas.convert("RGB")
            assert number_of_colour(rgb_at(px, (int(w1) // 2, int(h1) // 2))) == file_number(gt, sample.image_ids[0])
            assert min(rgb_at(px, (int(w1) + BAND // 2, 0))) > 235
            assert number_of_colour(rgb_at(px, (int(w1 + BAND + w2 // 2), int(h2) // 2))) == file_number(gt, sample.image_ids[1])
            if abs(h1 - h2) >= 16:  # below the shorter image: white (away from JPEG's 16-pixel blocks)
                shorter_x = int(w1) // 2 if h1 < h2 else int(w1 + BAND + w2 // 2)
                assert min(rgb_at(px, (shorter_x, int(max(h1, h2)) - 1))) > 235

    records = records_of(run)
    assert all(r["parse_error"] is None and not r["repair_used"] for r in records.values())
    ids = [str(i) for i in range(N_SAMPLES)]
    results = read_results(run / "results_coco.json")
    assert_same_results(results, gt_results(gt, ids))  # canvas boxes mapped back to each image
    assert metrics["corrected"]["ap50"] == pytest.approx(1.0, abs=1e-9)
    assert metrics["corrected"]["acc"] == 1.0 and metrics["official"]["acc"] == 1.0
    assert_scores_equal(metrics["official"], score_results(gt, results, ids)["official"])
    assert metrics["official"]["ap50"] < 1.0  # the id-0 artefact


# --- a model's mistakes -----------------------------------------------------------------------------


def test_mistakes_in_merged_mode(
    serve: Callable[..., Any], release: Path, gt: GroundTruth, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Samples 0..29, merged, abs_xyxy. Sample 3 (two groups): groups swapped. Sample 2: an extra
    box inside the white band, nearer image 2. Sample 5: an extra box right of the canvas. Sample
    6: prose first, the JSON after the repair turn. Sample 8 (positive): an empty answer. Sample
    10 (positive): an empty reply, twice."""
    limit = 30
    bench = McBench(box_format="abs_xyxy", input_mode="merged")
    script, by_key = scripted(gt, bench, release, limit)
    key = {s.id: k for k, s in by_key.items()}
    sample = gt.sample_by_id
    ids = [str(i) for i in range(limit)]
    expected: dict[str, list[tuple[int, int, list[float]]]] = {sid: gt_items(gt, sample[sid]) for sid in ids}

    assert {g for _, g, _ in expected["3"]} == {1, 2}
    swapped = [(p, 3 - g, b) for p, g, b in expected["3"]]
    script[key["3"]] = [merged_answer(gt, sample["3"], swapped)]
    expected["3"] = swapped

    (w1, h1), (w2, h2) = (size(gt, i) for i in sample["2"].image_ids)
    band_box = [w1 + 12, 5, w1 + 19, 40]  # centre w1 + 15.5: in the band, nearer image 2
    answer = json.loads(script[key["2"]][0])
    answer["boxes"].append({"group": 1, "bbox_2d": band_box})
    script[key["2"]] = [json.dumps(answer)]
    expected["2"] = [*expected["2"], (1, 1, [0.0, 5.0, 0.0, 40.0])]  # clipped to image 2's left edge

    (w1, h1), (w2, h2) = (size(gt, i) for i in sample["5"].image_ids)
    canvas_w = w1 + BAND + w2
    answer = json.loads(script[key["5"]][0])
    answer["boxes"].append({"group": 1, "bbox_2d": [canvas_w + 10, 10, canvas_w + 60, 60]})
    script[key["5"]] = [json.dumps(answer)]
    expected["5"] = [*expected["5"], (1, 1, [w2, 10.0, w2, 60.0])]  # clipped to the canvas: image 2's right edge

    prose = "Both images show several objects; the ones the description refers to are the golfers."
    script[key["6"]] = [prose, script[key["6"]][0]]

    assert expected["8"] and expected["10"]
    script[key["8"]] = ['{"boxes": []}']
    expected["8"] = []
    script[key["10"]] = [""]
    expected["10"] = []

    server = serve(script=script, default=None)
    run = tmp_path / "run"
    options = ["--box-format", "abs_xyxy", "--input-mode", "merged", "--limit", str(limit), "--json"]
    assert main(eval_args(release, server.url, run, *options, report=True)) == 0  # with the HTML report
    metrics = json.loads(capsys.readouterr().out)
    records = records_of(run)
    page = (run / "report" / "index.html").read_text(encoding="utf-8")  # the HTML report of the run
    assert gt.sample_by_id["3"].text in page or json.dumps(gt.sample_by_id["3"].text)[1:-1] in page
    # every image is on the page: drawn small, or (the run's end links what its drafts did not draw)
    # shown from its own file in the release
    drawn, linked = len(list((run / "report" / "thumbs").glob("*.jpg"))), page.count("mc-bench_images/")
    assert drawn + linked >= 2 * limit

    # the records
    for sid in ids:
        rec = records[sid]
        boxes = [(b["image"], b["group"], b["bbox"]) for b in rec["answer"] or []]
        assert len(boxes) == len(expected[sid]) == rec["scores"]["boxes"], sid
        for (p, g, b), (ep, eg, eb) in zip(boxes, expected[sid], strict=True):
            assert (p, g) == (ep, eg) and b == pytest.approx(eb, abs=1e-9), sid
    assert records["6"]["repair_used"] is True and records["6"]["parse_error"] is None
    assert [t["reply"] for t in records["6"]["turns"]][0] == prose
    repair_request = next(
        body for _, body in server.requests if request_key(body["messages"]) == key["6"] and len(body["messages"]) == 3
    )
    assert [m["role"] for m in repair_request["messages"]] == ["user", "assistant", "user"]
    assert repair_request["messages"][1]["content"] == prose and repair_request["messages"][2]["content"] == REPAIR_TEXT
    assert records["8"]["parse_error"] is None and records["8"]["answer"] == [] and not records["8"]["repair_used"]
    assert (records["10"]["parse_error"], records["10"]["repair_used"], records["10"]["answer"]) == ("empty_response", True, None)
    assert metrics["parse_errors"] == {"empty_response": 1}
    others = set(ids) - {"6", "10"}
    assert not any(records[s]["repair_used"] for s in others)

    # the results file holds exactly the expected boxes, and the metrics are theirs
    want = [
        {"image_id": sample[sid].image_ids[p], "category_id": g, "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]], "score": 1.0}
        for sid in ids
        for p, g, b in expected[sid]
    ]
    results = read_results(run / "results_coco.json")
    assert_same_results(results, want)
    rescored = score_results(gt, want, ids)
    for block in ("official", "corrected", "analyses"):
        assert_scores_equal(metrics[block], rescored[block])

    # the metrics move the right way: the two empty answers cost Acc, the extra boxes cost AP, the
    # swapped groups cost the official AP of group 2 but not the corrected one (per-sample assignment)
    perfect = score_results(gt, gt_results(gt, ids), ids)
    assert perfect["corrected"]["acc"] == 1.0 and perfect["corrected"]["ap50"] == pytest.approx(1.0, abs=1e-12)
    assert metrics["corrected"]["acc"] == metrics["official"]["acc"] == (limit - 2) / limit
    assert metrics["corrected"]["ap50"] < 1.0 and metrics["official"]["ap50"] < perfect["official"]["ap50"]
    assert metrics["corrected"]["ap50_per_group"]["2"] == pytest.approx(1.0, abs=1e-12)
    assert metrics["official"]["ap50_per_group"]["2"] < 1.0
    unswapped = [r for r in want if r["image_id"] not in sample["3"].image_ids] + gt_results(gt, ["3"])
    assert score_results(gt, unswapped, ids)["corrected"]["ap50"] == pytest.approx(metrics["corrected"]["ap50"], abs=1e-12)
    assert metrics["analyses"]["mean_boxes_per_sample"] == pytest.approx(len(want) / limit)


# --- subsets ----------------------------------------------------------------------------------------


def test_styles_referring_evaluates_only_referring(
    serve: Callable[..., Any],
    release: Path,
    gt: GroundTruth,
    sequence_script: tuple[Script, dict[str, GtSample]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    script, by_key = sequence_script
    server = serve(script=script, default=None)
    run = tmp_path / "run"
    limit = 20
    args = eval_args(
        release, server.url, run, "--box-format", "norm_1000_xyxy", "--styles", "Referring", "--limit", str(limit), "--json"
    )
    assert main(args) == 0
    metrics = json.loads(capsys.readouterr().out)
    referring = [s.id for s in gt.samples if s.style == "Referring"][:limit]
    assert int(referring[-1]) < N_SAMPLES
    assert sorted(by_key[request_key(body["messages"])].id for _, body in server.requests) == sorted(referring)
    assert sorted(records_of(run), key=int) == referring
    assert metrics["counts"]["samples"] == limit
    assert set(metrics["official"]["by_style"]) == set(metrics["analyses"]["by_style"]) == {"Referring"}
    assert metrics["analyses"]["by_style"]["Referring"]["samples"] == limit
    assert metrics["corrected"]["acc"] == 1.0 and metrics["corrected"]["ap50"] == pytest.approx(1.0, abs=1e-9)
    assert_scores_equal(metrics["official"], score_results(gt, gt_results(gt, referring), referring)["official"])


def test_subset_without_group_2_reports_regrouping_none(
    serve: Callable[..., Any],
    release: Path,
    gt: GroundTruth,
    sequence_script: tuple[Script, dict[str, GtSample]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = serve(script=sequence_script[0], default=None)
    run = tmp_path / "run"
    assert not [b for b in gt.subset(["0", "1", "2"]).boxes if b.category_id == 2]
    assert main(eval_args(release, server.url, run, "--box-format", "norm_1000_xyxy", "--limit", "3")) == 0
    out = capsys.readouterr().out
    assert "official regrouping: none" in out and "MC-Bench (%" in out
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["official"]["regrouping"] == "none"
    assert metrics["corrected"]["acc"] == 1.0


def test_missing_image_fails_only_its_sample(
    serve: Callable[..., Any],
    release: Path,
    gt: GroundTruth,
    sequence_script: tuple[Script, dict[str, GtSample]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Only the first N_SAMPLES descriptions have images: the 45th Referring sample (318) has none.
    The run loads (no image is opened up front), that sample alone is an input error, the rest go on."""
    server = serve(script=sequence_script[0], default=None)
    run = tmp_path / "run"
    referring = [s.id for s in gt.samples if s.style == "Referring"][:45]
    assert int(referring[-2]) < N_SAMPLES <= int(referring[-1])
    args = eval_args(
        release, server.url, run, "--box-format", "norm_1000_xyxy", "--styles", "Referring", "--limit", "45", "--json"
    )
    assert main(args) == 3  # some samples failed: the documented exit code
    captured = capsys.readouterr()
    metrics = json.loads(captured.out)
    assert "--retry-failed" in captured.err
    assert len(server.requests) == 44
    rec = records_of(run)[referring[-1]]
    assert (rec["status"], rec["parse_error"], rec["scores"]["boxes"]) == ("input_error", "input_error", 0)
    assert gt.image_by_id[gt.sample_by_id[referring[-1]].image_ids[0]].file_name in rec["error"]
    assert metrics["run"]["failed_ids"] == [referring[-1]] and metrics["counts"]["samples"] == 44  # scored: the answered samples


def thumbnail_size(width: float, height: float, side: int) -> tuple[int, int]:
    """The size Pillow's `thumbnail((side, side))` gives an image (what --max-image-side sends)."""
    im = Image.new("1", (int(width), int(height)))
    im.thumbnail((side, side))
    return im.size


@pytest.mark.parametrize("mode", ["sequence", "merged"])
def test_downscaled_images_abs_boxes_map_back(
    serve: Callable[..., Any], release: Path, gt: GroundTruth, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    """--max-image-side with abs_xyxy: the model sees the downscaled images and can only answer in
    their pixels; the parser must scale those boxes back to the annotated size (norm_* formats need
    no scaling)."""
    limit, side = 12, 256
    bench = McBench(box_format="abs_xyxy", input_mode=mode, max_image_side=side)
    script, sent = {}, {}
    for s in bench.load(release)[:limit]:
        sample = gt.sample_by_id[s.id]
        key = script_key(bench.prompt(s))
        if mode == "sequence":  # each image in its own sent pixels
            sent[key] = [thumbnail_size(*size(gt, i), side) for i in sample.image_ids]
            answer: dict[str, list[Any]] = {"image_1": [], "image_2": []}
            for p, g, (x1, y1, x2, y2) in gt_items(gt, sample):
                (w, h), (sw, sh) = size(gt, sample.image_ids[p]), sent[key][p]
                answer[f"image_{p + 1}"].append({"group": g, "bbox_2d": [x1 * sw / w, y1 * sh / h, x2 * sw / w, y2 * sh / h]})
            text = json.dumps(answer)
        else:  # in the sent canvas's pixels
            (cw, ch) = canvas_size(gt, sample)
            sent[key] = [thumbnail_size(cw, ch, side)]
            (sw, sh) = sent[key][0]
            boxes = json.loads(merged_answer(gt, sample))["boxes"]
            for box in boxes:
                x1, y1, x2, y2 = box["bbox_2d"]
                box["bbox_2d"] = [x1 * sw / cw, y1 * sh / ch, x2 * sw / cw, y2 * sh / ch]
            text = json.dumps({"boxes": boxes})
        script[key] = [text]
    server = serve(script=script, default=None)
    run = tmp_path / mode
    args = eval_args(
        release,
        server.url,
        run,
        "--box-format",
        "abs_xyxy",
        "--input-mode",
        mode,
        "--max-image-side",
        str(side),
        "--limit",
        str(limit),
        "--json",
    )
    assert main(args) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert len(server.requests) == limit
    for _, body in server.requests:  # the model saw the sizes its answers assume
        assert [im.size for im in decoded_images(body)] == sent[request_key(body["messages"])]
    assert metrics["corrected"]["ap50"] == pytest.approx(1.0, abs=1e-9), mode
    assert metrics["corrected"]["acc"] == 1.0


def canvas_size(gt: GroundTruth, sample: GtSample) -> tuple[float, float]:
    (w1, h1), (w2, h2) = (size(gt, i) for i in sample.image_ids)
    return w1 + BAND + w2, max(h1, h2)


# --- scoring files ----------------------------------------------------------------------------------


def test_score_results_with_unknown_image_id_is_one_sentence(
    tmp_path: Path, release: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "results.json"
    bad.write_text(
        json.dumps(
            [
                {"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5},
                {"image_id": 99999, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5},
            ]
        )
    )
    assert main(["score", "mc_bench", "--predictions", str(bad), "--data", str(release)]) == 2
    one_sentence_error(capsys, "99999", "image id")
    done = run_cli(["score", "mc_bench", "--predictions", str(bad), "--data", str(release)])
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_score_empty_results_list(tmp_path: Path, release: Path, gt: GroundTruth, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "results.json"
    empty.write_text("[]")
    assert main(["score", "mc_bench", "--predictions", str(empty), "--data", str(release), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    negatives = metrics["counts"]["negative_samples"]
    assert metrics["counts"]["samples"] == 2000 and metrics["counts"]["predictions"] == 0
    assert metrics["official"]["ap50"] == metrics["corrected"]["ap50"] == 0.0
    assert metrics["official"]["acc"] == metrics["corrected"]["acc"] == negatives / 2000
    assert metrics["official"]["regrouping"]["relabel"] == []  # nothing predicted to relabel on pair (505, 504)
    assert main(["score", "mc_bench", "--predictions", str(empty), "--data", str(release)]) == 0  # the tables too
    assert "MC-Bench (%" in capsys.readouterr().out


# --- prompt file and refusals -----------------------------------------------------------------------


def test_prompt_file_is_used_verbatim(
    serve: Callable[..., Any], release: Path, gt: GroundTruth, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = 'Custom instruction. Find: <<{text}>>\nReply like {"image_1": [], "image_2": []} and keep {braces} as they are.'
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(template, encoding="utf-8")
    server = serve(default='{"image_1": [], "image_2": []}')
    run = tmp_path / "run"
    args = eval_args(release, server.url, run, "--box-format", "abs_xyxy", "--prompt-file", str(prompt), "--limit", "2", "--json")
    assert main(args) == 0
    metrics = json.loads(capsys.readouterr().out)
    texts = sorted([p["text"] for p in body["messages"][0]["content"] if p["type"] == "text"] for _, body in server.requests)
    want = sorted(["Image 1:", "\nImage 2:", "\n" + template.replace("{text}", gt.sample_by_id[s].text)] for s in ("0", "1"))
    assert texts == want
    # a run without a single box writes an empty results list (the authors' script cannot read []) and says so
    assert metrics["counts"]["predictions"] == 0 and json.loads((run / "results_coco.json").read_text()) == []
    assert any("no boxes" in n for n in metrics["notes"])


def test_refusals_are_one_sentence(
    serve: Callable[..., Any], release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = serve(default='{"image_1": [], "image_2": []}')
    no_text = tmp_path / "prompt.txt"
    no_text.write_text("Box the objects as JSON.", encoding="utf-8")
    args = eval_args(
        release, server.url, tmp_path / "r1", "--box-format", "abs_xyxy", "--prompt-file", str(no_text), "--limit", "1"
    )
    assert main(args) == 2
    one_sentence_error(capsys, "{text}")

    assert main(eval_args(release, server.url, tmp_path / "r2", "--limit", "1")) == 2
    one_sentence_error(capsys, "box-format")

    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(RELEASE, bare / RELEASE.name)
    assert main(eval_args(bare, server.url, tmp_path / "r3", "--box-format", "abs_xyxy", "--limit", "1")) == 2
    one_sentence_error(capsys, "mc-bench_images")
    assert server.requests == []
