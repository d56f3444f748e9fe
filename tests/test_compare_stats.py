"""The paired tests of `needlepoint compare` on hand-made outcomes: the exact McNemar test against
hand computations, and identical runs, which must differ by exactly nothing (interval [0, 0] and
p = 1 for the bootstrap, p = 1 and no discordant sample for McNemar)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import run_quiet
from helpers.compare import make_runs

from needlepoint.cli import main
from needlepoint.compare.mcnemar import exact_p, mcnemar
from needlepoint.compare.paired import is_share_metric


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (0, 0, 1.0),  # no discordant pair: nothing tells the runs apart
        (8, 0, 2 / 2**8),  # 2 * C(8,0) / 2^8
        (5, 1, 2 * (1 + 6) / 2**6),  # 2 * (C(6,0) + C(6,1)) / 2^6 = 0.21875
        (2, 10, 2 * (1 + 12 + 66) / 2**12),  # 2 * (C(12,0) + C(12,1) + C(12,2)) / 2^12
        (3, 3, 1.0),  # the tails overlap: capped at 1
        (1, 0, 1.0),  # 2 * 1/2
    ],
)
def test_exact_mcnemar_p_against_hand_computation(b: int, c: int, expected: float) -> None:
    assert exact_p(b, c) == pytest.approx(expected, rel=1e-12)
    assert exact_p(c, b) == pytest.approx(expected, rel=1e-12)  # two-sided: symmetric


def test_exact_mcnemar_agrees_with_scipy_binomial_test() -> None:
    from scipy.stats import binomtest

    for b, c in [(17, 4), (40, 61), (0, 9), (250, 210)]:
        assert exact_p(b, c) == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=1e-9)


def test_mcnemar_counts_the_four_kinds_of_pair() -> None:
    a = [True, True, True, False, False, True, False, True]
    b = [True, False, False, True, False, True, False, False]
    result = mcnemar(a, b)
    assert (result.only_a, result.only_b, result.both, result.neither) == (3, 1, 2, 2)
    assert result.samples == 8
    assert result.p == pytest.approx(2 * (1 + 4) / 2**4)  # b=3, c=1: 2 * (C(4,0) + C(4,1)) / 16 = 0.625
    with pytest.raises(ValueError):
        mcnemar([True], [True, False])


def test_a_share_of_samples_is_told_from_ap_and_from_averages_of_averages() -> None:
    nan = np.nan
    assert is_share_metric("acc@0.5", 0.5, np.array([1.0, 0.0, 1.0, 0.0]))
    assert is_share_metric("bins/2-3/acc@0.5", 1.0, np.array([1.0, nan, nan, 1.0]))  # a subset's share
    assert not is_share_metric("official/ap50", 0.5, np.array([1.0, 0.0, 1.0, 0.0]))  # AP is no share
    assert not is_share_metric("tasks/t/scores/1k", 0.6, np.array([1.0, 0.5, 0.3]))  # partial credit
    assert not is_share_metric("tasks/t/overall", 0.7, np.array([1.0, 0.0, 1.0, 0.0]))  # not the samples' mean
    assert not is_share_metric("acc", None, np.array([nan, nan]))


def test_identical_runs_differ_by_exactly_nothing(tmp_path: Path) -> None:
    _, run_a, _ = make_runs("ref_adv_s", tmp_path, limits=(None, 1))
    out = tmp_path / "cmp"
    with contextlib.redirect_stdout(io.StringIO()) as printed, contextlib.redirect_stderr(io.StringIO()):
        assert main(["compare", str(run_a), str(run_a), "--json", "--out", str(out), "--no-page"]) == 0
    result = json.loads(printed.getvalue())
    assert result["paired"] == 30 and [r["left_out"] for r in result["runs"]] == [0, 0]
    rows = result["contrasts"][0]["metrics"]
    shown = {r["metric"] for r in rows} | set(result["left_out_as_repeats"])  # a repeat of another row is named there
    assert shown >= {"acc@0.5", "acc@0.75", "acc@0.9"}
    for row in rows:
        assert row["difference"] == 0.0 and row["first"] == row["other"]
        lo, hi = row["interval"]
        assert lo <= 0.0 <= hi
        assert row["p"] == 1.0
        assert row["mcnemar"]["p"] == 1.0
        assert row["mcnemar"]["only_a"] == row["mcnemar"]["only_b"] == 0
    rc, err = run_quiet(["compare", str(run_a), str(run_a), "--resamples", "0", "--no-page"])
    assert rc == 2 and "--resamples" in err
