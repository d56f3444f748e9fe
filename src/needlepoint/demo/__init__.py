"""`needlepoint demo`: every benchmark on small generated sample sets, answered by the simulated
model over a real local HTTP endpoint. Offline, deterministic, and quick on two cores."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

from needlepoint.errors import DataError

BUILDERS = {
    "ref_adv_s": "needlepoint.demo.ref_adv",
    "mc_bench": "needlepoint.demo.mc_bench",
    "mm_niah": "needlepoint.demo.mm_niah",
}


def run_demo(out: Path, benchmarks: list[str]) -> int:
    """Build the demo sets, serve the simulated model, evaluate each benchmark, print the tables."""
    from needlepoint.api import evaluate
    from needlepoint.config import RunConfig
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer
    from needlepoint.report.terminal import print_tables

    unknown = [b for b in benchmarks if b not in BUILDERS]
    if unknown:
        raise DataError(f"no demo for {', '.join(unknown)}; choose from {', '.join(BUILDERS)}")
    started = time.perf_counter()
    script: dict[str, list] = {}
    plans = []
    for name in benchmarks:
        builder = importlib.import_module(BUILDERS[name])
        data, options, answers = builder.build(out / "data" / name)
        script.update(answers)
        plans.append((name, data, options))
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
            result = evaluate(config)
            print_tables(result.benchmark.tables(result.metrics))
            run_dirs.append(result.run_dir)
            failed += len(result.failed)
        if "mm_niah" in benchmarks:  # the RAG baseline on the same set (benchmarks/mm_niah/rag_demo.py)
            from needlepoint.benchmarks.mm_niah.rag_demo import rag_config

            _, data, options = next(p for p in plans if p[0] == "mm_niah")
            result = evaluate(rag_config(data, options, server, out, concurrency=8, show_progress=sys.stderr.isatty()))
            print_tables(result.benchmark.tables(result.metrics))
            run_dirs.append(result.run_dir)
            failed += len(result.failed)
    report = _combined_report(out, run_dirs)
    print(f"demo finished in {time.perf_counter() - started:.1f} s; run folders under {out / 'runs'}")
    print(f"report: {report}")
    return 3 if failed else 0  # the exit codes of `needlepoint eval`


def _combined_report(out: Path, run_dirs: list[Path]) -> Path:
    from needlepoint.report.index import write_index

    return write_index(out, run_dirs)
