"""scipy's `linear_sum_assignment`, the Hungarian matching the MC-Bench evaluator runs (its
regrouping; also our corrected protocol's group matching and the human agreement's box pairs),
without importing `scipy.optimize`.

That package's import brings scipy's linear algebra, sparse matrices and optimisers: 0.3-0.45 s
on the two-core machine of docs/performance.md, about a fifth of a 2,000-pair run's end, for one
compiled function (issue 45). The function is scipy's own: its compiled module
(`scipy/optimize/_lsap`) loaded from its file, the same code that `scipy.optimize` exports, so
every matching, ties included, is scipy's. Where that module is not found or does not load
(another scipy layout), the public import, as before."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["linear_sum_assignment"]

_MODULE = "scipy.optimize._lsap"


def linear_sum_assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows and columns of a least-cost assignment of `cost` (scipy.optimize's function)."""
    rows, cols = _solver()(cost)
    return rows, cols


@cache
def _solver() -> Callable[..., Any]:
    module = sys.modules.get(_MODULE) or (None if "scipy.optimize" in sys.modules else _load_alone())
    solve: Callable[..., Any] | None = getattr(module, "linear_sum_assignment", None)
    if callable(solve):
        return solve
    from scipy.optimize import linear_sum_assignment as public

    return public


def _load_alone() -> ModuleType | None:
    """scipy's compiled assignment module loaded from its file, registered under its own name (so
    a later `import scipy.optimize` takes this one); None where it is not there or fails."""
    try:
        found = importlib.util.find_spec("scipy")
        if found is None or found.origin is None:
            return None
        folder = os.path.join(os.path.dirname(found.origin), "optimize")
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_lsap" + suffix)
            spec = importlib.util.spec_from_file_location(_MODULE, path) if os.path.isfile(path) else None
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.modules[_MODULE] = module
                return module
    except Exception:  # anything unexpected: the public import decides
        return None
    return None
