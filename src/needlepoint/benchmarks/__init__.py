"""The benchmark registry: names to classes, imported only when used."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from needlepoint.benchmarks.base import Benchmark, DataError

_REGISTRY = {
    "ref_adv_s": "needlepoint.benchmarks.ref_adv:RefAdv",
    "mc_bench": "needlepoint.benchmarks.mc_bench.benchmark:McBench",
    "mm_niah": "needlepoint.benchmarks.mm_niah.benchmark:MmNiah",
}
NAMES: tuple[str, ...] = tuple(_REGISTRY)


def benchmark_class(name: str) -> type:
    """The class registered under `name`; DataError names the known ones."""
    target = _REGISTRY.get(name)
    if target is None:
        raise DataError(f"unknown benchmark {name!r}; choose one of {', '.join(NAMES)}")
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def make(name: str, **options: Any) -> Benchmark:
    """A benchmark with the given options; options left as None take the benchmark's defaults."""
    cls = benchmark_class(name)
    accepted = inspect.signature(cls).parameters
    given = {k: v for k, v in options.items() if v is not None and v is not False}
    wrong = [k for k in given if k not in accepted]
    if wrong:
        flags = ", ".join("--" + k.replace("_", "-") for k in wrong)
        raise DataError(f"{flags} does not apply to {name}; drop it")
    return cls(**given)
