"""The bootstrap intervals (needlepoint.stats) on Ref-Adv-s cases: coverage, no-interval cases,
determinism, the point estimates equal to the scorer's, and restriction for paired comparisons."""

from __future__ import annotations

import numpy as np
import pytest

from needlepoint.benchmarks.ref_adv.resample import RefAdvResampler
from needlepoint.benchmarks.ref_adv.scoring import score_rows
from needlepoint.core.errors import DataError
from needlepoint.stats import CiSettings, bootstrap_interval, draw, interval_block
from needlepoint.stats.shares import SHARE_METHOD, stratified_wilson, wilson


def _cases(hits: np.ndarray, distractors: np.ndarray | None = None) -> RefAdvResampler:
    d = np.full(len(hits), 3) if distractors is None else distractors
    return RefAdvResampler([str(i) for i in range(len(hits))], np.where(hits, 0.95, 0.1).tolist(), d.tolist())


def test_coverage_of_known_accuracy() -> None:
    """Many simulated runs of a model that is right with probability 0.7 on each case: the 95%
    interval of Acc@0.5 (Wilson, a share) and its percentile bootstrap (the restricted resampler
    declares no shares) cover 0.7 in 93-97% of them (seeded, so the count is fixed)."""
    rng = np.random.default_rng(2026)
    p, n, runs = 0.7, 200, 400
    covered, drawn = 0, 0
    ids = [str(i) for i in range(n)]
    for run in range(runs):
        cases = _cases(rng.random(n) < p)
        iv = bootstrap_interval(cases, resamples=1000, seed=run)["acc@0.5"]
        pc = bootstrap_interval(cases.restrict(ids), resamples=1000, seed=run)["acc@0.5"]
        assert iv is not None and pc is not None and pc.method == "percentile"
        covered += iv.lo <= p <= iv.hi
        drawn += pc.lo <= p <= pc.hi
    assert 0.93 <= covered / runs <= 0.97, covered
    assert 0.93 <= drawn / runs <= 0.97, drawn


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


def test_no_percentile_interval_for_one_case_or_equal_scores() -> None:
    # a resampler that declares no share metrics (restricted: the paired comparison's view) draws
    one = bootstrap_interval(_cases(np.array([True])).restrict(["0"]))
    assert one["acc@0.5"] is None and "one case" in one.reasons["acc@0.5"]
    ids = [str(i) for i in range(40)]
    same = bootstrap_interval(_cases(np.ones(40, bool)).restrict(ids))
    assert same["acc@0.5"] is None and "do not vary" in same.reasons["acc@0.5"]
    # a bin without cases has no rate at all
    assert same["bins/4-6/acc@0.5"] is None and "does not exist" in same.reasons["bins/4-6/acc@0.5"]


def test_an_all_right_run_gets_its_lower_bound() -> None:
    """40 of 40 right: the Wilson interval [91.2, 100], not "no interval" (the percentile bootstrap
    gives every draw 1); 39 of 40: Wilson [87.1, 99.6], not the percentile [92.5, 100]."""
    every = bootstrap_interval(_cases(np.ones(40, bool)))["acc@0.5"]
    assert every is not None and every.method == SHARE_METHOD
    assert every.estimate == 1.0 and every.hi == 1.0 and every.lo == pytest.approx(0.91238, abs=1e-5)
    hits = np.ones(40, bool)
    hits[7] = False
    most = bootstrap_interval(_cases(hits))["acc@0.5"]
    assert most is not None and (round(100 * most.lo, 1), round(100 * most.hi, 1)) == (87.1, 99.6)
    one = bootstrap_interval(_cases(np.array([True])))["acc@0.5"]
    assert one is not None and one.hi == 1.0 and 0.2 < one.lo < 0.21
    # a bin without cases has no rate at all; the block marks the score intervals
    block = interval_block(_cases(np.ones(40, bool)), CiSettings())
    assert block is not None and block["metrics"]["acc@0.5"]["method"] == SHARE_METHOD
    assert block["metrics"]["bins/4-6/acc@0.5"]["none"] and "bins/4-6/acc@0.5" not in block["share_metrics"]
    assert block["share_method"].startswith(SHARE_METHOD)


def test_wilson_equals_scipy() -> None:
    from scipy.stats import binomtest

    for k, n, level in [(39, 40, 0.95), (7, 20, 0.9), (1, 3, 0.99), (617, 1142, 0.95)]:
        ci = binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
        assert wilson(k, n, level) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert wilson(0, 5, 0.95)[0] == 0.0 and wilson(5, 5, 0.95)[1] == 1.0


def test_stratified_wilson_is_never_narrower_than_plain() -> None:
    counts = [(20, 20), (18, 20), (5, 10)]
    plain = wilson(43, 50, 0.95)
    strat = stratified_wilson(counts, 0.95)
    assert strat is not None and strat[0] <= plain[0] + 1e-12 and strat[1] >= plain[1] - 1e-12
    # one stratum: plain Wilson
    assert stratified_wilson([(43, 50)], 0.95) == pytest.approx(plain)
    assert stratified_wilson([(0, 0)], 0.95) is None


@pytest.mark.parametrize(("n", "p"), [(50, 0.95), (200, 0.7), (1142, 0.54), (30, 0.9)])
def test_wilson_coverage_is_near_nominal_at_the_edges(n: int, p: float) -> None:
    """Exact coverage (summed over the binomial distribution, no simulation) of the 95% interval of a
    share: 93-97.5% where the percentile bootstrap gave 89.7% at n = 50, p = 0.95."""
    from scipy.stats import binom

    covered = sum(float(binom.pmf(k, n, p)) for k in range(n + 1) if wilson(k, n, 0.95)[0] <= p <= wilson(k, n, 0.95)[1])
    assert 0.93 <= covered <= 0.975, covered


def test_seed_makes_intervals_repeat() -> None:
    hits = np.random.default_rng(3).random(80) < 0.5
    ids = [str(i) for i in range(80)]
    a = bootstrap_interval(_cases(hits).restrict(ids), resamples=300, seed=7)
    b = bootstrap_interval(_cases(hits).restrict(ids), resamples=300, seed=7)
    c = bootstrap_interval(_cases(hits).restrict(ids), resamples=300, seed=8)
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


@pytest.mark.parametrize("level", [0.95, 0.9, 0.5, 0.999])
def test_percentile_bounds_are_numpys_quantiles_bit_for_bit(level: float) -> None:
    """`percentile_bounds` (written out, without np.quantile's import of numpy.ma) gives the
    interval's ends exactly as `np.quantile`'s default method: sizes from 1 up, ties, steps of 1/n."""
    from needlepoint.stats.bootstrap import percentile_bounds

    rng = np.random.default_rng(11)
    q = (1.0 - level) / 2.0
    for n in [*range(1, 60), 999, 1000, 1001, 4000]:
        for values in (rng.normal(0, 1, n), rng.integers(0, 7, n) / 7, np.round(rng.random(n), 2), rng.random(n) * 1e-9):
            expected = np.quantile(values, [q, 1.0 - q]).tolist()
            assert list(percentile_bounds(values, level)) == expected, (n, level)


def test_strata_are_numbered_in_sorted_order_as_before() -> None:
    """Strata are numbered in sorted order (np.unique's, which the draws used before), so a seed
    draws the same positions: every stratum's rows come from the stream in the same way."""
    rng = np.random.default_rng(5)
    strata = [str(s) for s in rng.choice(["b", "a", "B", "é", "a b", "10", "9"], 300)]
    idx = draw(300, 64, seed=3, strata=strata)
    # the draws of the same stream numbered with np.unique, as the bootstrap numbered them before
    names, labels = np.unique(np.asarray(strata), return_inverse=True)
    order = np.argsort(labels, kind="stable")
    size = np.bincount(labels, minlength=len(names))
    first, room = (np.cumsum(size) - size)[labels], size[labels]
    pick = np.random.default_rng(3).random((64, 300)) * room
    assert (idx == order[np.minimum(pick.astype(np.int64), room - 1) + first]).all()
