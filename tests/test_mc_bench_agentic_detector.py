"""MC-Bench's agentic solver with a detector localizer: tiny random Grounding DINO and OWLv2 models
(tests/test_detector.py builds them) box the phrases a simulated reasoner names, through the CLI;
each kept box reaches results_coco.json converted to COCO [x, y, w, h] with the detector's score.
The batcher puts the phrases of several samples into one forward pass. Needs the `agentic` extra
(skipped without it unless NEEDLEPOINT_TEST_MODELS=1); NEEDLEPOINT_TEST_DEVICE picks the device."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_DEVICE as DEVICE
from helpers import run_quiet
from helpers.agentic import REASONER, gt_targets, reasoner_reply
from helpers.detector import BOX_TOL, SCORE_TOL, ForwardLog, write_owl

from needlepoint.benchmarks.mc_bench.agentic import Target, detector_queries, reasoner_prompt
from needlepoint.benchmarks.mc_bench.benchmark import McBench, McSample
from needlepoint.benchmarks.mc_bench.demo import write_release
from needlepoint.benchmarks.mc_bench.scoring import read_results
from needlepoint.cli import main
from needlepoint.contract.base import Dataset
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.store import read_records
from needlepoint.models.detector import Detector
from needlepoint.models.detector_batch import BatchedDetector
from needlepoint.models.simulated import script_key

PHRASES = ["the red square", "a blue circle", "big green square", "the left blue", "red"]


@pytest.fixture(scope="module")
def small_release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, McBench, Dataset[McSample]]:
    folder, _ = write_release(tmp_path_factory.mktemp("mc_agentic_det"), pairs=4)
    bench = McBench(box_format="abs_xyxy")
    return folder, bench, bench.load(folder)


@pytest.fixture(scope="module")
def owlv2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny OWLv2 model folder (test_detector's)."""
    return write_owl(tmp_path_factory.mktemp(f"tiny_{'owlv2'}"), "owlv2")


def plans(bench: McBench, samples: Dataset[McSample]) -> list[list[Target]]:
    """Each sample's GT instances as targets, named with words the tiny tokenizers know."""
    out = []
    for sample in samples:
        targets = [t for t, _ in gt_targets(samples, sample)]
        out.append([Target(image=t["image"], group=t["group"], phrase=PHRASES[k % len(PHRASES)]) for k, t in enumerate(targets)])
    return out


@pytest.mark.parametrize("kind", ["grounding-dino", "owlv2"])
def test_detector_boxes_reach_results_coco_json(
    kind: str, request: pytest.FixtureRequest, serve: Any, small_release: Any, tmp_path: Path
) -> None:
    folder_model = request.getfixturevalue("grounding_dino" if kind == "grounding-dino" else "owlv2")
    folder, bench, samples = small_release
    targets = plans(bench, samples)
    script = {script_key(reasoner_prompt(s)): [reasoner_reply(t)] for s, t in zip(samples, targets)}
    reasoner = serve(script=script, default=None, models=(REASONER,))
    out = tmp_path / "run"
    args = [
        "eval",
        "mc_bench",
        "--data",
        str(folder),
        "--model",
        REASONER,
        "--api-url",
        reasoner.url,
        "--solver",
        "agentic",
        "--localizer",
        f"detector:{folder_model}",
        "--localizer-device",
        DEVICE,
        "--out",
        str(out),
        "--no-progress",
        "--concurrency",
        "1",
    ]
    assert main(args) == 0

    # what the detector answers to each sample's phrases (one sample in flight: the same pass)
    detector = Detector.load(str(folder_model), device=DEVICE)
    expected = []
    for sample, ts in zip(samples, targets):
        detections = detector.detect(detector_queries(sample, ts))
        seen = [0, 0]
        for t in ts:
            d = detections[t["image"]][seen[t["image"]]]
            seen[t["image"]] += 1
            assert d.kept == (d.score >= 0.05)
            if d.kept:
                x1, y1, x2, y2 = d.box
                expected.append(
                    {
                        "image_id": sample.image_ids[t["image"]],
                        "category_id": t["group"],
                        "bbox": [x1, y1, x2 - x1, y2 - y1],
                        "score": d.score,
                    }
                )
    assert expected  # the random models' scores are above 0.05 for most phrases
    written = read_results(out / "results_coco.json")
    assert len(written) == len(expected)
    for w, e in zip(written, expected):
        assert (w["image_id"], w["category_id"]) == (e["image_id"], e["category_id"])
        assert w["bbox"] == pytest.approx(e["bbox"], abs=BOX_TOL) and w["score"] == pytest.approx(e["score"], abs=SCORE_TOL)

    # the record: one detector call per phrase, with its score, box and the pass it was in
    records = read_records(out / "records.jsonl")
    sample, ts = max(zip(samples, targets), key=lambda st: len(st[1]))
    calls = [t for t in records[sample.id]["turns"] if t["role"] == "tool"]
    assert [c["about"]["phrase"] for c in calls] == [t["phrase"] for t in ts] and all(c["tool"] == "detector" for c in calls)
    assert all(c["result"]["pass_phrases"] == len(ts) and set(c["result"]) >= {"box", "score", "kept"} for c in calls)
    header = json.loads((out / "run.json").read_text())
    assert header["model_label"] == f"{REASONER} + {folder_model.name} (agentic)"
    assert header["identity"]["solver.threshold"] == 0.05 and header["identity"]["option.box_format"] == "abs_xyxy"


def test_phrases_of_several_samples_share_one_pass(grounding_dino: Path, small_release: Any) -> None:  # noqa: F811
    _, bench, samples = small_release
    batcher = BatchedDetector(lambda: Detector.load(str(grounding_dino), device=DEVICE, batch_size=64), "tiny", max_rows=64)
    log = ForwardLog(batcher.detector.model)
    targets = plans(bench, samples)
    asked = [(s.images[t["image"]], t["phrase"]) for s, ts in zip(samples, targets) for t in ts]

    async def go() -> list[Any]:
        return await asyncio.gather(*(batcher.locate(image, phrase) for image, phrase in asked))

    found = asyncio.run(go())
    assert batcher.passes == [len(asked)] and len(log.calls) == 1 and log.calls[0]["input_ids"][0] == len(asked)
    assert all(f.rows == len(asked) for f in found)
    # the same answers as one detect() over each image with its phrases
    alone = [batcher.detector.detect(detector_queries(s, ts)) for s, ts in zip(samples, targets)]
    flat = []
    for ts, per_image in zip(targets, alone):
        seen = [0, 0]
        for t in ts:
            flat.append(per_image[t["image"]][seen[t["image"]]])
            seen[t["image"]] += 1
    assert [v for f in found for v in f.detection.box] == pytest.approx([v for d in flat for v in d.box], abs=BOX_TOL)
    assert [f.detection.score for f in found] == pytest.approx([d.score for d in flat], abs=SCORE_TOL)


def test_an_unreadable_image_fails_only_its_own_requests(grounding_dino: Path, small_release: Any, tmp_path: Path) -> None:  # noqa: F811
    """A pass shared by several samples: the request whose image cannot be read gets its DataError,
    the others their boxes from the same pass; a pass holds at most max_rows phrases."""
    _, _, samples = small_release
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg at all")
    batcher = BatchedDetector(lambda: Detector.load(str(grounding_dino), device=DEVICE), "tiny", max_rows=3)
    good = samples[0].images[0]
    asked = [
        (good, "the red square"),
        (ImageRef(key="broken", path=broken), "a blue circle"),
        (good, "red"),
        (good, "big green square"),
    ]

    async def go() -> list[Any]:
        return await asyncio.gather(*(batcher.locate(image, phrase) for image, phrase in asked), return_exceptions=True)

    found = asyncio.run(go())
    assert isinstance(found[1], DataError)
    assert [type(f).__name__ for i, f in enumerate(found) if i != 1] == ["Located"] * 3
    assert batcher.passes == [2, 1]  # three requests in the first pass (one unreadable), the fourth in the next


def test_processes_refuse_a_detector_of_this_process(
    grounding_dino: Path, serve: Any, small_release: Any, tmp_path: Path
) -> None:  # noqa: F811
    folder, _, _ = small_release
    reasoner = serve(script={}, default=None, models=(REASONER,))
    args = ["eval", "mc_bench", "--data", str(folder), "--model", REASONER, "--api-url", reasoner.url, "--solver", "agentic"]
    args += ["--localizer", f"detector:{grounding_dino}", "--localizer-device", DEVICE, "--out", str(tmp_path / "run")]
    rc, err = run_quiet([*args, "--processes", "2"])
    last = err.strip().splitlines()[-1]  # (transformers' loading bars come first)
    assert rc == 2 and "Traceback" not in err and last.startswith("needlepoint: error: --processes runs HTTP clients")
    assert "the solver's detector is a model of this process" in last
    assert not (tmp_path / "run").exists()  # refused before a run folder was kept
