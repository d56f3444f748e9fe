"""The bootstrap intervals (needlepoint.stats) on Ref-Adv-s cases: coverage, no-interval cases,
determinism, the point estimates equal to the scorer's, and restriction for paired comparisons."""

from __future__ import annotations

import numpy as np
import pytest

from needlepoint.benchmarks.ref_adv.resample import RefAdvResampler
from needlepoint.benchmarks.ref_adv.scoring import score_rows
from needlepoint.core.errors import DataError
from needlepoint.stats import CiSettings, bootstrap_interval, draw, interval_block


def _cases(hits: np.ndarray, distractors: np.ndarray | None = None) -> RefAdvResampler:
    d = np.full(len(hits), 3) if distractors is None else distractors
    return RefAdvResampler([str(i) for i in range(len(hits))], np.where(hits, 0.95, 0.1).tolist(), d.tolist())


def test_coverage_of_known_accuracy() -> None:
    """Many simulated runs of a model that is right with probability 0.7 on each case: the 95%
    interval of Acc@0.5 covers 0.7 in 93-97% of them (seeded, so the count is fixed)."""
    rng = np.random.default_rng(2026)
    p, n, runs = 0.7, 200, 400
    covered = 0
    for run in range(runs):
        iv = bootstrap_interval(_cases(rng.random(n) < p), resamples=1000, seed=run)["acc@0.5"]
        assert iv is not None
        covered += iv.lo <= p <= iv.hi
    assert 0.93 <= covered / runs <= 0.97, covered


def test_estimates_equal_the_scorer() -> None:
    rng = np.random.default_rng(1)
    n = 57
    ious = rng.random(n).tolist()
    dis = rng.integers(2, 10, n).tolist()
    rows = [{"iou": i, "distractors": d} for i, d in zip(ious, dis)]
    m = score_rows(
        [
            {**r, "parse_error": None, "repair_used": False, "use_negation": False, "human_authored": False, "image_source": ""}
            for r in rows
        ]
    )
    whole = RefAdvResampler.from_rows([str(i) for i in range(n)], rows).metrics(np.arange(n))
    for t in ("0.5", "0.75", "0.9"):
        assert whole[f"acc@{t}"] == m[f"acc@{t}"]
    for label in ("2-3", "4-6", ">=7"):
        assert whole[f"bins/{label}/acc@0.5"] == m["bins"][label]["acc@0.5"]


def test_no_interval_for_one_case_or_equal_scores() -> None:
    one = bootstrap_interval(_cases(np.array([True])))
    assert one["acc@0.5"] is None and "one case" in one.reasons["acc@0.5"]
    same = bootstrap_interval(_cases(np.ones(40, bool)))
    assert same["acc@0.5"] is None and "do not vary" in same.reasons["acc@0.5"]
    # a bin without cases has no rate at all
    assert same["bins/4-6/acc@0.5"] is None and "does not exist" in same.reasons["bins/4-6/acc@0.5"]
    block = interval_block(_cases(np.ones(40, bool)), CiSettings())
    assert block is not None and block["metrics"]["acc@0.5"] == {"estimate": 1.0, "none": same.reasons["acc@0.5"]}


def test_seed_makes_intervals_repeat() -> None:
    hits = np.random.default_rng(3).random(80) < 0.5
    a = bootstrap_interval(_cases(hits), resamples=300, seed=7)
    b = bootstrap_interval(_cases(hits), resamples=300, seed=7)
    c = bootstrap_interval(_cases(hits), resamples=300, seed=8)
    assert a == b and a["acc@0.5"] != c["acc@0.5"]


def test_strata_keep_their_sizes() -> None:
    strata = ["a"] * 5 + ["b"] * 3 + ["a"] * 2
    idx = draw(10, 50, seed=0, strata=strata)
    labels = np.array(strata)
    assert (labels[idx] == labels[None, :]).all()


def test_restrict_lines_units_up() -> None:
    hits = np.array([True, False, True, True, False, False])
    r = _cases(hits).restrict(["4", "0", "2"])
    assert r.units == ["4", "0", "2"]
    assert r.metrics(np.array([0, 0, 1]))["acc@0.5"] == pytest.approx(1 / 3)
    with pytest.raises(DataError, match="not among"):
        _cases(hits).restrict(["9"])


def test_settings_refuse_bad_values() -> None:
    with pytest.raises(DataError, match="--ci-level"):
        CiSettings(level=95)
    with pytest.raises(DataError, match="--resamples"):
        CiSettings(resamples=-1)
