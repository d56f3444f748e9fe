"""`needlepoint demo`: every benchmark on small generated sample sets, answered by the simulated
model over a real local HTTP endpoint. Offline, deterministic, and quick on two cores. With
`--serve` (serve.py) the model keeps serving the sets for commands a person types.

Each benchmark declares its demo set (`Declaration.demo`, e.g. benchmarks/mc_bench/demo.py:build):
`build(folder) -> (data path, run options, simulated answers)`. This package keeps what the sets
share: a small interleaved corpus (obelics.py); the drawing helpers are needlepoint.core.drawing, a
core module the benchmarks draw their sets with.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from needlepoint.core.errors import DataError

Build = Callable[[Path], tuple[Path, dict[str, Any], dict[str, list[Any]]]]


def builders() -> dict[str, str]:
    """Benchmark name -> its demo builder ("module:function"), for those that declare one."""
    from needlepoint.contract.registry import declarations

    return {d.name: d.demo for d in declarations() if d.demo}


def builder(name: str) -> Build:
    """The demo builder benchmark `name` declares; DataError when it declares none."""
    from needlepoint.contract.declaration import load_target

    found = builders()
    if name not in found:
        raise DataError(f"no demo for {name}; choose from {', '.join(found)}")
    build: Build = load_target(found[name])
    return build


Plan = tuple[str, Path, dict[str, Any]]
"""A demo set as built: (benchmark, data path, run options)."""


def build_sets(out: Path, benchmarks: list[str]) -> tuple[dict[str, list[Any]], list[Plan]]:
    """Write the demo sets of `benchmarks` into `out/data/NAME`; return the simulated model's
    script for them all and each set's plan. DataError names a benchmark without a demo."""
    known = builders()
    unknown = [b for b in benchmarks if b not in known]
    if unknown:
        raise DataError(f"no demo for {', '.join(unknown)}; choose from {', '.join(known)}")
    script: dict[str, list[Any]] = {}
    plans: list[Plan] = []
    for name in benchmarks:
        phase(f"building the {name} demo set in {out / 'data' / name}")
        data, options, answers = builder(name)(out / "data" / name)
        script.update(answers)
        plans.append((name, data, options))
    return script, plans


def run_demo(out: Path, benchmarks: list[str]) -> int:
    """Build the demo sets, serve the simulated model, evaluate each benchmark, print the tables."""
    from needlepoint.contract.declaration import load_target
    from needlepoint.contract.registry import declaration
    from needlepoint.core.config import RunConfig
    from needlepoint.core.outcome import has_metrics
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer
    from needlepoint.report.terminal import print_tables
    from needlepoint.run.evaluate import evaluate

    started = time.perf_counter()
    script, plans = build_sets(out, benchmarks)
    run_dirs = []
    failed = 0
    with SimulatedServer(script=script, default=None) as server:
        for name, data, options in plans:
            config = RunConfig(
                benchmark=name,
                data=data,
                model=SIMULATED_MODEL_NAME,
                api_urls=[server.url],
                options=options,
                out=out / "runs" / name,
                concurrency=8,
                fresh=False,
                show_progress=sys.stderr.isatty(),
            )
            # The plain run, then the declared solvers' runs of the same set, each made (and captioned)
            # only after the run before it printed its tables.
            for target in [None, *declaration(name).demo_runs]:
                if target is not None:
                    config = load_target(target)(data, options, server, out / "runs")
                config.concurrency, config.show_progress = 8, sys.stderr.isatty()
                phase(
                    f"evaluating {name}"
                    + (f" with --solver {config.solver}" if config.solver != "default" else "")
                    + f" into {config.out}"
                )
                result = evaluate(config)
                if has_metrics(result.metrics):
                    print_tables(result.benchmark.tables(result.metrics))
                run_dirs.append(result.run_dir)
                failed += len(result.failed)
    phase(f"writing the combined report in {out / 'report'}")
    report = _combined_report(out, run_dirs)
    print(f"demo finished in {time.perf_counter() - started:.1f} s; run folders under {out / 'runs'}")
    print(f"report: {report}")
    return 3 if failed else 0  # the exit codes of `needlepoint eval`


def phase(line: str) -> None:
    """Say on stderr what the demo does next, when stderr is no terminal (a log, CI): there no
    progress bar shows that the demo is working, and its phases take seconds each."""
    if not sys.stderr.isatty():
        print(f"demo: {line}", file=sys.stderr, flush=True)


def _combined_report(out: Path, run_dirs: list[Path]) -> Path:
    from needlepoint.report.index import write_index

    return write_index(out, run_dirs)
