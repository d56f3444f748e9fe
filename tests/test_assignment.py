"""scipy's assignment without scipy.optimize's import (core.assignment): in a fresh interpreter
the matchings are scipy.optimize's own, ties and rectangular costs included, and the package is
never imported; `score mc_bench` there gives the authors' reference numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment as scipys

ROOT = Path(__file__).resolve().parent.parent


def _costs() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    shapes = [(1, 1), (3, 3), (4, 7), (7, 4), (12, 12), (30, 25)]
    out = [rng.random(s) for s in shapes]
    out += [rng.integers(0, 3, s).astype(float) for s in shapes]  # many ties: which one scipy picks
    out += [np.zeros((5, 5)), -np.eye(6), np.ones((2, 9))]
    return out


def test_the_matchings_are_scipys_and_scipy_optimize_is_not_imported() -> None:
    code = (
        "import json, sys, numpy as np\n"
        "from needlepoint.core.assignment import linear_sum_assignment\n"
        f"costs = [np.array(c) for c in json.loads({json.dumps(json.dumps([c.tolist() for c in _costs()]))})]\n"
        "out = [[r.tolist(), c.tolist()] for r, c in (linear_sum_assignment(m) for m in costs)]\n"
        "print(json.dumps({'out': out, 'imported': 'scipy.optimize' in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    got = json.loads(done.stdout)
    assert got["imported"] is False
    expected = [[r.tolist(), c.tolist()] for r, c in (scipys(m) for m in _costs())]
    assert got["out"] == expected


def test_score_mc_bench_in_a_fresh_process_gives_the_authors_numbers() -> None:
    """The regrouping's matching through the module loaded alone: the official AP50 and Acc of the
    authors' perturbed results file are their evaluator's (tests/data/README.md)."""
    data = ROOT / "tests" / "data" / "mc-bench"
    argv = [sys.executable, "-m", "needlepoint.cli", "score", "mc_bench", "--no-ci", "--json"]
    argv += ["--predictions", str(data / "perturbed_noswap_result.json"), "--data", str(data)]
    metrics = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT).stdout)
    official = metrics["official"]
    assert abs(official["ap50"] - 0.6562401387740078) <= 1e-12 and official["acc"] == 0.8585
