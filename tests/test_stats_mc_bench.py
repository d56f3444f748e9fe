"""MC-Bench intervals: the fast AP50 (match once, weighted accumulation) equals the scorers' full
COCO-style evaluation on the whole set, official and corrected, per style too."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from helpers import MC_BENCH_RELEASE

from needlepoint.benchmarks.mc_bench.groundtruth import GroundTruth, load_groundtruth
from needlepoint.benchmarks.mc_bench.resample import McResampler
from needlepoint.benchmarks.mc_bench.scoring import score_results
from needlepoint.stats import bootstrap_interval


@pytest.fixture(scope="module")
def gt() -> GroundTruth:
    return load_groundtruth(MC_BENCH_RELEASE)


def _results(gt: GroundTruth, seed: int) -> list[dict[str, Any]]:
    """Answers of a middling model: most GT boxes found with jitter, some in the wrong group, tied
    and rounded scores, false boxes (on negatives too), and one crowded cell past maxDets."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for b in gt.boxes:
        if rng.random() < 0.2:
            continue
        x, y, w, h = b.bbox
        j = rng.choice([0, 3, 15, 60])
        box = [x + rng.uniform(-j, j), y + rng.uniform(-j, j), w * rng.uniform(0.6, 1.3), h * rng.uniform(0.8, 1.2)]
        cat = b.category_id if rng.random() < 0.85 else rng.choice([1, 2, 3, 5])
        out.append({"image_id": b.image_id, "category_id": cat, "bbox": box, "score": round(rng.random(), rng.choice([1, 2, 6]))})
    for _ in range(400):
        im = rng.choice(gt.images)
        box = [rng.uniform(0, 300), rng.uniform(0, 300), rng.uniform(1, 200), rng.uniform(1, 200)]
        out.append({"image_id": im.id, "category_id": rng.randint(1, 3), "bbox": box, "score": rng.choice([0.2, 0.5, 1.0])})
    for _ in range(110):  # image 1, group 1 holds the box with annotation id 0 (the official artefact)
        out.append({"image_id": 1, "category_id": 1, "bbox": [236 + rng.uniform(-30, 30), 210, 74, 193], "score": 0.5})
    rng.shuffle(out)
    return out


def _expected(metrics: dict[str, Any]) -> dict[str, Any]:
    out = {
        "official/acc": metrics["official"]["acc"],
        "official/ap50": metrics["official"]["ap50"],
        "corrected/acc": metrics["corrected"]["acc"],
        "corrected/ap50": metrics["corrected"]["ap50"],
    }
    for style, block in metrics["official"]["by_style"].items():
        out[f"official/by_style/{style}/acc"] = block["acc"]
        out[f"official/by_style/{style}/ap50"] = block["ap50"]
    for style, block in metrics["analyses"]["by_style"].items():
        out[f"analyses/by_style/{style}/acc"] = block["acc"]
        out[f"analyses/by_style/{style}/ap50"] = block["ap50"]
    return out


@pytest.mark.parametrize("seed, share", [(1, 1.0), (2, 0.3), (3, 0.05)])
def test_fast_ap50_equals_the_full_evaluation(gt: GroundTruth, seed: int, share: float) -> None:
    """All samples once: every number equals score_results' to the last bit (official with its
    regrouping and id-0 artefact, corrected with its group assignment), on all samples and on subsets."""
    rng = random.Random(seed)
    ids = [s.id for s in gt.samples if rng.random() < share]
    results = _results(gt, seed)
    expected = _expected(score_results(gt, results, ids))
    resampler = McResampler(gt, results, ids)
    got = resampler.metrics(np.arange(len(resampler.units)))
    assert got == expected


def test_a_draw_equals_the_evaluation_of_the_drawn_samples(gt: GroundTruth) -> None:
    """A draw without repeats is the full evaluation of those samples (corrected: the matching is
    per sample; official: the same regrouping, so the style rows agree)."""
    results = _results(gt, 4)
    ids = [s.id for s in gt.samples]
    resampler = McResampler(gt, results, ids)
    pick = np.sort(np.random.default_rng(0).choice(len(ids), 500, replace=False))
    got = resampler.metrics(pick)
    want = _expected(score_results(gt, results, [ids[i] for i in pick]))
    for name in ("corrected/acc", "corrected/ap50", "official/acc", "analyses/by_style/Reasoning/ap50"):
        assert got[name] == pytest.approx(want[name], abs=1e-12), name


def test_intervals_hold_the_estimates(gt: GroundTruth) -> None:
    results = _results(gt, 5)
    ids = [s.id for s in gt.samples][:400]
    intervals = bootstrap_interval(McResampler(gt, results, ids), resamples=200, seed=1)
    for name in ("official/ap50", "corrected/ap50", "corrected/acc", "official/by_style/Referring/ap50"):
        iv = intervals[name]
        assert iv is not None and iv.lo < iv.estimate < iv.hi, name
