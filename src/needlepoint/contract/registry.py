"""The benchmark registry: one line per benchmark, naming the package whose `BENCHMARK`
(a declaration.Declaration) says everything about it. Nothing is imported until used.

Benchmarks outside this package join in either of two ways:
- an entry point of the group `needlepoint.benchmarks` in the distribution that ships them
  (pyproject.toml: `[project.entry-points."needlepoint.benchmarks"] mybench = "mypkg.mybench"`);
- `register("mybench", "mypkg.mybench")` (or a Declaration object) before the CLI or the API runs.
A target is "package" (its `BENCHMARK`) or "module:attribute".
"""

from __future__ import annotations

import inspect
from typing import Any

from needlepoint.contract.base import Benchmark, DataError, Dataset
from needlepoint.contract.declaration import Builder, Declaration, PublishedTable, load_target

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "Benchmark",
    "Builder",
    "Dataset",
    "Declaration",
    "PublishedTable",
    "benchmark_class",
    "declaration",
    "declarations",
    "make",
    "names",
    "register",
    "unregister",
]

BUILTIN: dict[str, str] = {
    "ref_adv_s": "needlepoint.benchmarks.ref_adv",
    "mc_bench": "needlepoint.benchmarks.mc_bench",
    "mm_niah": "needlepoint.benchmarks.mm_niah",
    "refcoco": "needlepoint.benchmarks.refcoco",
}
ENTRY_POINT_GROUP = "needlepoint.benchmarks"

_registered: dict[str, str | Declaration] = {}
_entry_points: dict[str, str] | None = None
_loaded: dict[str, Declaration] = {}


def _installed() -> dict[str, str]:
    """The benchmarks other installed distributions declare as entry points (read once)."""
    global _entry_points
    if _entry_points is None:
        from importlib.metadata import entry_points

        _entry_points = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return _entry_points


def _targets() -> dict[str, str | Declaration]:
    """Every known benchmark, by name: built in, then installed, then registered (a later one of the
    same name wins, so that a `register` call can stand in for a benchmark)."""
    return {**BUILTIN, **_installed(), **_registered}


def register(name: str, target: str | Declaration, replace: bool = False) -> None:
    """Make benchmark `name` known: `target` is a package exporting `BENCHMARK`, a
    "module:attribute" naming a Declaration, or the Declaration itself. A name already known is
    refused (ValueError) unless `replace`."""
    if name in _targets() and not replace:
        raise ValueError(f"a benchmark named {name!r} is already registered; pass replace=True to stand in for it")
    _registered[name] = target
    _loaded.pop(name, None)


def unregister(name: str) -> None:
    """Forget a benchmark `register` added (a built-in or installed one comes back if shadowed)."""
    _registered.pop(name, None)
    _loaded.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered benchmarks' names, built-in ones first."""
    return tuple(_targets())


def declaration(name: str) -> Declaration:
    """What benchmark `name` declares; DataError names the known ones."""
    if name in _loaded:
        return _loaded[name]
    target = _targets().get(name)
    if target is None:
        raise DataError(f"unknown benchmark {name!r}; choose one of {', '.join(names())}")
    if isinstance(target, Declaration):
        found: Any = target
    else:
        found = load_target(target if ":" in target else f"{target}:BENCHMARK")
    if not isinstance(found, Declaration) or found.name != name:
        raise DataError(f"benchmark {name!r}: {target!r} is not a Declaration named {name!r}; fix or remove that benchmark")
    _loaded[name] = found
    return found


def declarations() -> list[Declaration]:
    """Every registered benchmark's declaration, in the order of `names()`."""
    return [declaration(n) for n in names()]


def benchmark_class(name: str) -> type:
    """The class registered under `name`; DataError names the known ones."""
    cls: type = load_target(declaration(name).benchmark)
    return cls


def make(name: str, **options: Any) -> Benchmark:
    """A benchmark with the given options; options left as None take the benchmark's defaults."""
    cls = benchmark_class(name)
    accepted = inspect.signature(cls).parameters
    given = {k: v for k, v in options.items() if v is not None and v is not False}
    wrong = [k for k in given if k not in accepted]
    if wrong:
        flags = ", ".join("--" + k.replace("_", "-") for k in wrong)
        raise DataError(f"{flags} does not apply to {name}; drop it")
    bench: Benchmark = cls(**given)
    return bench
