"""MC-Bench: tied scores do not make the corrected AP50 depend on image numbering (issue 41 item 5),
the bootstrap resamples clusters of samples that share an image file (item 4), and a results file's
`category_id` is refused outside 1..100 (issue 42 item 3)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import MC_BENCH_RELEASE

from needlepoint.benchmarks.mc_bench.corrected import TIE_ORDERS
from needlepoint.benchmarks.mc_bench.groundtruth import GroundTruth, groundtruth_from_json, load_groundtruth
from needlepoint.benchmarks.mc_bench.resample import McResampler, image_clusters
from needlepoint.benchmarks.mc_bench.scoring import check_results, read_results, score_results
from needlepoint.cli import main
from needlepoint.contract.base import DataError
from needlepoint.core.intervalsettings import CiSettings
from needlepoint.stats.run import interval_block

PERTURBED = MC_BENCH_RELEASE.parent / "perturbed_noswap_result.json"


@pytest.fixture(scope="module")
def gt() -> GroundTruth:
    return load_groundtruth(MC_BENCH_RELEASE)


@pytest.fixture(scope="module")
def tied() -> list[dict[str, Any]]:
    """The authors' perturbed results with every score 1.0, as a chat model answers."""
    return [{**r, "score": 1.0} for r in read_results(PERTURBED)]


def _renumbered(results: list[dict[str, Any]], seed: int) -> tuple[GroundTruth, list[dict[str, Any]]]:
    """The release and `results` with the image ids permuted at random (file order kept)."""
    data = json.loads(MC_BENCH_RELEASE.read_text())
    ids = [im["id"] for im in data["images"]]
    new = ids[:]
    random.Random(seed).shuffle(new)
    to = dict(zip(ids, new, strict=True))
    for im in data["images"]:
        im["id"] = to[im["id"]]
    for a in data["annotations"]:
        a["image_id"] = to[a["image_id"]]
    for d in data["descriptions"]:
        d["images_id"] = [to[i] for i in d["images_id"]]
    return groundtruth_from_json(data, "renumbered"), [{**r, "image_id": to[r["image_id"]]} for r in results]


def _aps(metrics: dict[str, Any]) -> dict[str, Any]:
    a = metrics["analyses"]
    return {
        "ap50": metrics["corrected"]["ap50"],
        "per_group": metrics["corrected"]["ap50_per_group"],
        "by_style": {k: v["ap50"] for k, v in a["by_style"].items()},
        "agnostic": a["group_agnostic_ap50"],
        "sizes": a["ap50_by_size"],
    }


def test_tied_corrected_ap50_does_not_change_when_images_are_renumbered(gt: GroundTruth, tied: list[dict[str, Any]]) -> None:
    """Every box at 1.0: pycocotools breaks ties by image id, so the release numbering (negative
    samples late) gives 0.6745 and renumberings about 0.652-0.666. The corrected reading is the mean
    over tie orders keyed on the samples, not the ids: every renumbering gives the same numbers."""
    base = score_results(gt, tied)
    spread = base["corrected"]["ap50_tie_orders"]
    assert spread["orders"] == TIE_ORDERS
    assert spread["image_id_order"] == pytest.approx(0.6744866239203627, abs=1e-12)  # the release's order
    assert spread["min"] < base["corrected"]["ap50"] < spread["max"] < spread["image_id_order"]
    for seed in (1, 2):
        g2, r2 = _renumbered(tied, seed)
        again = score_results(g2, r2)
        assert _aps(again) == _aps(base)
        assert again["corrected"]["ap50_tie_orders"]["image_id_order"] != spread["image_id_order"]


def test_untied_scores_keep_the_single_order(gt: GroundTruth) -> None:
    """Distinct scores (the perturbed file): one order, the number as before, no tie spread."""
    metrics = score_results(gt, read_results(PERTURBED))
    assert metrics["corrected"]["ap50"] == 0.6566212175650921
    assert "ap50_tie_orders" not in metrics["corrected"]
    assert metrics["official"]["ap50"] == pytest.approx(0.6562401387740078, abs=1e-12)


def test_the_resampler_estimate_is_the_mean_over_tie_orders(gt: GroundTruth, tied: list[dict[str, Any]]) -> None:
    ids = [s.id for s in gt.samples][:600]
    metrics = score_results(gt, tied, ids)
    r = McResampler(gt, tied, ids)
    got = r.metrics(np.arange(len(r.units)))
    assert got["corrected/ap50"] == metrics["corrected"]["ap50"]
    for style, block in metrics["analyses"]["by_style"].items():
        assert got[f"analyses/by_style/{style}/ap50"] == block["ap50"]
    assert got["official/ap50"] == metrics["official"]["ap50"]


def test_image_clusters_of_the_release(gt: GroundTruth) -> None:
    cluster = image_clusters(gt)
    sizes = np.bincount(cluster)
    assert len(sizes) == 1459 and sizes.max() == 11
    assert np.count_nonzero(sizes[cluster] >= 2) == 865  # 43% of the 2,000 samples share a file
    position = {s.id: k for k, s in enumerate(gt.samples)}
    assert cluster[position["99"]] == cluster[position["100"]]  # two descriptions of one pair


def test_the_bootstrap_unit_is_the_image_cluster(gt: GroundTruth, tied: list[dict[str, Any]]) -> None:
    """metrics.json names the unit; a drawn cluster counts all its samples; strata are styles."""
    r = McResampler(gt, tied, [s.id for s in gt.samples])
    assert r.unit == "image cluster" and len(r.units) == 1459
    assert r.strata is not None and {"Referring", "Comparison", "Reasoning", "Comparison+Reasoning"} <= set(r.strata)
    k = r.units.index("97+99+100")  # 99 and 100 show one pair; 97 shares a photo with them
    position = {s.id: i for i, s in enumerate(gt.samples)}
    assert r.metrics(np.array([k, k])) == r.samples.metrics(np.array([position[i] for i in ("97", "99", "100")] * 2))
    block = interval_block(r, CiSettings(resamples=50))
    assert block is not None and (block["unit"], block["units"], block["stratified"]) == ("image cluster", 1459, True)
    iv = block["metrics"]["corrected/ap50"]
    assert iv["lo"] < iv["estimate"] < iv["hi"]
    assert r.restrict(["99", "100"]).unit == "sample"  # a paired comparison pairs samples


def test_out_of_range_category_id_is_refused_by_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(MC_BENCH_RELEASE, data / MC_BENCH_RELEASE.name)
    predictions = tmp_path / "results.json"
    entries = [
        {"image_id": 0, "category_id": 1, "bbox": [1, 2, 3, 4]},
        {"image_id": 1, "category_id": 1000000, "bbox": [1, 2, 3, 4]},
    ]
    predictions.write_text(json.dumps(entries))
    assert main(["score", "mc_bench", "--predictions", str(predictions), "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert f"prediction 1 in {predictions}" in err and "1000000" in err and "at most 100" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    with pytest.raises(DataError, match="category_id .* is 101; it must be at most 100"):
        predictions.write_text(json.dumps([{**entries[0], "category_id": 101}]))
        read_results(predictions)
    predictions.write_text(json.dumps([{**entries[0], "category_id": 100}]))
    assert read_results(predictions)[0]["category_id"] == 100


def test_a_models_large_group_number_is_still_a_false_positive() -> None:
    """The bound is the file's: a model's reply naming group 500 is scored (its boxes miss)."""
    assert check_results([{"image_id": 0, "category_id": 500, "bbox": [1, 2, 3, 4]}])[0]["category_id"] == 500


def test_the_tables_say_when_the_corrected_ap50_averages_tie_orders(gt: GroundTruth, tied: list[dict[str, Any]]) -> None:
    from needlepoint.benchmarks.mc_bench.tables import mc_tables

    def notes(metrics: dict[str, Any]) -> list[str]:
        return [row[0] for t in mc_tables(metrics) for row in t.rows if t.title == "MC-Bench notes"]

    ids = [s.id for s in gt.samples][:300]
    tied_notes = notes(score_results(gt, tied, ids))
    assert any(n.startswith(f"corrected AP50: tied scores, so the mean over {TIE_ORDERS} random orders") for n in tied_notes)
    assert not any("tied scores" in n for n in notes(score_results(gt, read_results(PERTURBED), ids)))
