"""MC-Bench intervals: the fast AP50 (match once, weighted accumulation) equals the scorers' full
COCO-style evaluation on the whole set, official and corrected, per style too; Acc gets a Wilson
score interval at the clustered design's effective sample size (issue 41 item 3)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from helpers import MC_BENCH_RELEASE

from needlepoint.benchmarks.mc_bench.groundtruth import GroundTruth, load_groundtruth
from needlepoint.benchmarks.mc_bench.resample import McResampler, design_effect, image_clusters
from needlepoint.benchmarks.mc_bench.scoring import score_results
from needlepoint.core.intervalsettings import CiSettings
from needlepoint.stats import bootstrap_interval
from needlepoint.stats.run import interval_block
from needlepoint.stats.shares import SHARE_METHOD


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
    resampler = McResampler(gt, results, ids).samples
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


ACC = ("official/acc", "corrected/acc", "official/by_style/Referring/acc", "analyses/by_style/Reasoning/acc")


def _perfect(gt: GroundTruth) -> list[dict[str, Any]]:
    """Every ground-truth box found, nothing on the images without any: every sample right."""
    return [{"image_id": b.image_id, "category_id": b.category_id, "bbox": list(b.bbox), "score": 1.0} for b in gt.boxes]


def test_an_all_right_run_gets_a_wilson_interval_below_100(gt: GroundTruth) -> None:
    """A percentile bootstrap gives an all-right run no interval (every draw is 100%); Wilson gives
    its lower bound, and metrics.json's intervals block names the method."""
    r = McResampler(gt, _perfect(gt), [s.id for s in gt.samples][:300])
    intervals = bootstrap_interval(r, resamples=50, seed=1)
    for name in ACC:
        iv = intervals[name]
        assert iv is not None and iv.method == SHARE_METHOD, name
        assert iv.estimate == 1.0 and iv.hi == 1.0 and 0.9 < iv.lo < 1.0, name
    block = interval_block(r, CiSettings(resamples=50))
    assert block is not None
    assert block["metrics"]["official/acc"]["method"] == "Wilson score"
    assert set(ACC) <= set(block["share_metrics"])
    assert block["metrics"]["corrected/ap50"].get("method") != "Wilson score"  # AP50 keeps the bootstrap


def test_acc_counts_give_the_estimates(gt: GroundTruth) -> None:
    """A middling run: every Acc is declared, its counts give the estimate, and the interval is
    Wilson's around it (the bootstrap's counts check would otherwise drop it)."""
    r = McResampler(gt, _results(gt, 6), [s.id for s in gt.samples][:600])
    whole = r.metrics(np.arange(len(r.units)))
    counts = r.share_counts()
    assert {name for name in whole if name.endswith("/acc")} == set(counts)
    for name, pairs in counts.items():
        assert sum(k for k, _ in pairs) / sum(u for _, u in pairs) == pytest.approx(whole[name], abs=1e-12), name
    intervals = bootstrap_interval(r, resamples=50, seed=1)
    iv = intervals["corrected/acc"]
    assert iv is not None and iv.method == SHARE_METHOD and iv.lo < iv.estimate < iv.hi


def test_the_design_effect_is_one_without_shared_images(gt: GroundTruth) -> None:
    cluster = image_clusters(gt)
    alone = [s.id for k, s in enumerate(gt.samples) if np.count_nonzero(cluster == cluster[k]) == 1][:400]
    r = McResampler(gt, _results(gt, 7), alone)
    assert len(r.units) == len(alone)
    for name, (right, mask) in r.samples.acc_rows().items():
        pairs = r.share_counts()[name]
        assert sum(u for _, u in pairs) == int(mask.sum()), name  # not divided: the design effect is 1
        assert sum(k for k, _ in pairs) == right[mask].sum(), name
    right = np.array([1, 0, 1, 1, 0, 1], dtype=np.float64)
    assert design_effect(right, np.arange(6), np.array(["a", "a", "a", "b", "b", "b"])) == 1.0


def test_the_design_effect_grows_where_clustered_samples_agree(gt: GroundTruth) -> None:
    """Two clusters of two: one all right, one all wrong, twice the variance of four samples."""
    assert design_effect(np.array([1.0, 1.0, 0.0, 0.0]), np.array([0, 0, 1, 1]), np.array(["a"] * 4)) == pytest.approx(2.0)
    # disagreeing within clusters: less than independent samples, kept at 1 (never narrower)
    assert design_effect(np.array([1.0, 0.0, 1.0, 0.0]), np.array([0, 0, 1, 1]), np.array(["a"] * 4)) == 1.0
    # a run whose answers fail whole clusters at once: fewer effective samples than samples
    cluster = image_clusters(gt)
    failed = set(np.flatnonzero(np.random.default_rng(0).random(int(cluster.max()) + 1) < 0.3).tolist())
    lost = {im.id for im in gt.images if cluster[[s.id for s in gt.samples].index(im.sample_id)] in failed}
    results = [r for r in _perfect(gt) if r["image_id"] not in lost]
    r = McResampler(gt, results, [s.id for s in gt.samples])
    right, mask = r.samples.acc_rows()["corrected/acc"]
    pairs = r.share_counts()["corrected/acc"]
    units = sum(u for _, u in pairs)
    assert units < 0.9 * mask.sum()
    assert sum(k for k, _ in pairs) / units == pytest.approx(right.mean(), abs=1e-12)
    iv = bootstrap_interval(r, resamples=50, seed=1)["corrected/acc"]
    assert iv is not None and iv.method == SHARE_METHOD and iv.lo < iv.estimate < iv.hi
