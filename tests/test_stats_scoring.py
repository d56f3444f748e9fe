"""The bootstrap's blocks scored on two cores (stats.scoring): the values are those of one process,
block for block, whether the helper process delivers, fails or hangs; an MC-Bench run's intervals
are the same either way."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import needlepoint.stats.scoring as scoring
from needlepoint.stats import bootstrap_interval
from needlepoint.stats.bootstrap import draws
from needlepoint.stats.resampler import Resampler
from needlepoint.stats.scoring import scored_blocks

DATA = Path(__file__).parent / "data" / "mc-bench"


class Sums:
    """A resampler whose values are each draw's sum of scores, and the process that scored it."""

    unit = "case"
    strata: list[str] | None = None

    def __init__(self, n: int, fail_in_helper: str = "") -> None:
        self.units = [str(i) for i in range(n)]
        self.scores = np.random.default_rng(1).random(n)
        self.parent = os.getpid()
        self.fail_in_helper = fail_in_helper

    def metrics(self, idx: np.ndarray) -> dict[str, float | None]:
        return {"sum": float(self.scores[idx].sum())}

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        if os.getpid() != self.parent:
            if self.fail_in_helper == "raise":
                raise RuntimeError("a helper that fails")
            if self.fail_in_helper == "hang":
                time.sleep(60)
        return {"sum": self.scores[idx].sum(axis=1), "pid": np.full(len(idx), float(os.getpid()))}

    def restrict(self, ids: Sequence[str]) -> Resampler:
        return self


def _blocks(n: int) -> Iterator[np.ndarray]:
    return draws(n, 1000, seed=4)


@pytest.fixture
def helpers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The helpers forked (their pids), with the threads other tests left in this process not
    counted against sharing (the rule itself: test_no_helper_beside_another_thread)."""
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    started: list[int] = []
    real = scoring._Helper.start

    def start(resampler: Any, it: Any) -> Any:
        helper = real(resampler, it)
        started.extend([helper.pid] if helper is not None else [])
        return helper

    monkeypatch.setattr(scoring._Helper, "start", start)
    return started


def test_a_helper_scores_every_other_block_and_the_values_are_one_processes(helpers: list[int]) -> None:
    n = 3000  # blocks of 64 draws: 16 of them
    alone = scored_blocks(Sums(n), lambda: _blocks(n), split_s=float("inf"))
    shared = scored_blocks(Sums(n), lambda: _blocks(n), split_s=0.0)
    assert np.array_equal(alone["sum"], shared["sum"])  # bit for bit, in block order
    pids = set(shared["pid"].tolist())
    assert pids == {float(os.getpid()), float(helpers[0])}  # the helper scored some blocks
    assert set(alone["pid"].tolist()) == {float(os.getpid())}
    assert len(alone["sum"]) == 1000


@pytest.mark.parametrize("fault", ["raise", "hang"])
def test_a_helper_that_fails_or_hangs_costs_time_not_values(
    fault: str, helpers: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scoring, "PATIENCE", 0.0)  # a hung helper is given up after a second
    n = 3000  # blocks of 64 draws: 16 of them
    alone = scored_blocks(Sums(n), lambda: _blocks(n), split_s=float("inf"))
    started = time.monotonic()
    shared = scored_blocks(Sums(n, fault), lambda: _blocks(n), split_s=0.0)
    assert np.array_equal(alone["sum"], shared["sum"])
    assert set(shared["pid"].tolist()) == {float(os.getpid())} and len(helpers) == 1  # all scored here in the end
    assert time.monotonic() - started < 30  # the hung helper was not waited for


def test_no_helper_beside_another_thread() -> None:
    """A fork copies no other thread, and a lock one holds would stay held in the helper."""
    n = 3000  # blocks of 64 draws: 16 of them
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        values = scored_blocks(Sums(n), lambda: _blocks(n), split_s=0.0)
    finally:
        stop.set()
        other.join()
    assert set(values["pid"].tolist()) == {float(os.getpid())}


def test_mc_bench_intervals_are_the_same_on_two_cores(helpers: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """The authors' perturbed results file: the intervals of every metric, scored in one
    process and shared with a helper, equal to the last bit."""
    from needlepoint.run.evaluate import score

    monkeypatch.setattr(scoring, "SPLIT_S", float("inf"))
    _, alone = score("mc_bench", DATA / "perturbed_noswap_result.json", DATA, box_format="abs_xyxy")
    monkeypatch.setattr(scoring, "SPLIT_S", 0.0)
    _, shared = score("mc_bench", DATA / "perturbed_noswap_result.json", DATA, box_format="abs_xyxy")
    assert alone["intervals"] == shared["intervals"] and alone["intervals"]["metrics"]
    assert len(helpers) == 1  # the shared run's blocks went to a helper


def test_a_bootstrap_interval_is_the_same_on_two_cores(helpers: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scoring, "SPLIT_S", float("inf"))
    alone = bootstrap_interval(Sums(3000), resamples=1000, seed=2)
    monkeypatch.setattr(scoring, "SPLIT_S", 0.0)
    shared = bootstrap_interval(Sums(3000), resamples=1000, seed=2)
    assert alone["sum"] == shared["sum"] and alone["sum"] is not None and len(helpers) == 1
