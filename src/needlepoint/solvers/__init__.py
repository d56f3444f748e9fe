"""Solvers: how a sample becomes an answer. The registry of names; benchmarks may add their own.

A benchmark declares extra solvers in its Declaration's `solvers`, mapping names to "module:Class"
(e.g. `solvers={"agentic": "needlepoint.benchmarks.mc_bench.agentic_solver:AgenticSolver"}` in
benchmarks/mc_bench/__init__.py); a solver class is built as `cls(benchmark, **settings)`.
See docs/solvers.md.

This module is the public face for solver authors, beside `needlepoint.contract` for benchmark
authors (a solver lies a layer above the benchmark contract, so its names cannot come from there):
the Solver protocol and its optional verbs' protocols, the SolveContext a solver asks through,
`read_reply` (the default solver's reading of a reply) and the registry's functions.
"""

from __future__ import annotations

import inspect
from typing import Any

from needlepoint.contract.base import Benchmark
from needlepoint.core.errors import DataError
from needlepoint.core.options import Option
from needlepoint.core.structured import AnswersInJson
from needlepoint.solvers.base import MAIN, DropsCalls, RequestGate, SolveContext, Solver, TakesOptions
from needlepoint.solvers.default import DefaultSolver, read_reply

__all__ = [
    "DEFAULT",
    "MAIN",
    "AnswersInJson",
    "DefaultSolver",
    "DropsCalls",
    "RequestGate",
    "SolveContext",
    "Solver",
    "TakesOptions",
    "make_solver",
    "read_reply",
    "solver_class",
    "solver_names",
    "solver_options",
]

DEFAULT = "default"
_REGISTRY = {DEFAULT: "needlepoint.solvers.default:DefaultSolver"}


def _declared(benchmark: Any) -> dict[str, str]:
    """The solvers a benchmark (object or class) declares in its Declaration (none for a benchmark
    object that is not registered)."""
    from needlepoint.contract.registry import declaration

    try:
        return dict(declaration(benchmark.name).solvers)
    except DataError:
        return {}


def solver_names(benchmark: Any) -> list[str]:
    """The solvers a benchmark can run: the shared ones, then its own."""
    return [*_REGISTRY, *(n for n in _declared(benchmark) if n not in _REGISTRY)]


def solver_class(name: str, benchmark: Any) -> type:
    """The class of solver `name` for a benchmark (object or class); DataError names the known ones."""
    target = {**_REGISTRY, **_declared(benchmark)}.get(name)
    if target is None:
        raise DataError(f"unknown --solver {name!r} for {benchmark.name}; choose one of {', '.join(solver_names(benchmark))}")
    from needlepoint.contract.declaration import load_target

    cls: type = load_target(target)
    return cls


def solver_options(cls: type) -> tuple[Option, ...]:
    """The flags a solver class declares (its `options`, `TakesOptions`); () for a class with none."""
    return tuple(cls.options) if isinstance(cls, TakesOptions) else ()


def make_solver(name: str, benchmark: Benchmark, client: Any = None, /, **settings: Any) -> Solver:
    """The solver `name` for `benchmark` with `settings`; DataError (one sentence) for an unknown
    name or a setting it does not take. `client` (models.openai_compat.ClientSettings: the run's
    retries, waits, re-encoding, byte budget) goes to a solver whose constructor takes `client`,
    for the clients it makes itself."""
    cls = solver_class(name, benchmark)
    accepted = inspect.signature(cls).parameters
    given = {k: v for k, v in settings.items() if v is not None}
    wrong = [k for k in given if k not in accepted or k == "client"]
    if wrong:
        raise DataError(f"{', '.join(wrong)} does not apply to --solver {name}; drop it")
    if client is not None and "client" in accepted:
        given["client"] = client
    solver: Solver = cls(benchmark, **given)
    return solver
