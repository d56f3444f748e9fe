"""The `demo` sub-command: its parser (`add_parser`) and handler (`run`): the demo runs
(demo/__init__.py), or with `--serve` the simulated model kept serving (demo/serve.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from needlepoint.core.errors import DataError

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`needlepoint demo [--serve [--port N]]`."""
    from needlepoint.contract.registry import declarations

    dm = sub.add_parser("demo", help="all benchmarks on bundled samples against a simulated model, offline")
    dm.add_argument("--out", type=Path, default=Path("runs/demo"), help="where the demo's data and runs go")
    dm.add_argument("--benchmarks", default=",".join(d.name for d in declarations() if d.demo), help="comma-separated subset")
    dm.add_argument(
        "--serve",
        action="store_true",
        help="run nothing: keep the simulated model (chat, embeddings, localizer, Batch API) serving the demo sets on "
        "127.0.0.1 until Ctrl-C, and print its --api-url and commands to paste",
    )
    dm.add_argument("--port", type=int, help="with --serve: the port to listen on (default: any free port)")


def run(ns: argparse.Namespace) -> int:
    """Run the demo, or serve its model (`--serve`)."""
    benchmarks = [b.strip() for b in ns.benchmarks.split(",") if b.strip()]
    if ns.serve:
        from needlepoint.demo.serve import serve_demo

        return serve_demo(ns.out, benchmarks, ns.port or 0)
    if ns.port is not None:
        raise DataError("--port is the port of `demo --serve`; add --serve or drop --port")
    from needlepoint.demo import run_demo

    return run_demo(ns.out, benchmarks)
