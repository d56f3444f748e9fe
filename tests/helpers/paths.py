"""The repository, the reference data the tests use, and the rule for test-extra imports."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TEST_DATA = REPO / "tests" / "data"  # reference data from the benchmarks' releases (tests/data/README.md)
REF_ADV_PREDICTIONS = TEST_DATA / "ref-adv-s" / "qwen25a72b_direct_predictions.jsonl"
MC_BENCH_RELEASE = TEST_DATA / "mc-bench" / "mc-bench_v0.2_val.json"
TEST_DEVICE = os.environ.get("NEEDLEPOINT_TEST_DEVICE", "cpu")  # where the in-process model tests run


def in_ci() -> bool:
    """True when the environment says CI (`CI` set and not 0/false/no), as .ci/run sets it."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def extra_module(module: str) -> Any:
    """Import a module of the `test` extra (e.g. pycocotools, the reference a comparison runs
    against): skipped on a developer's machine without it, a failure in CI, where it is installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if in_ci():
            pytest.fail(f"{module} is missing: CI installs the test extra (pip install -e '.[test]')", pytrace=False)
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")


def models_extra() -> tuple[Any, Any]:
    """torch and transformers (the `models` extra) for the tests of in-process models: skipped
    without them, a failure when NEEDLEPOINT_TEST_MODELS=1 says they must run."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        if os.environ.get("NEEDLEPOINT_TEST_MODELS") == "1":
            pytest.fail(f"NEEDLEPOINT_TEST_MODELS=1 but {exc.name} is missing: install the extra with pip install -e '.[models]'")
        pytest.skip("torch and transformers (the `models` extra) are not installed")
    return torch, transformers
