"""`needlepoint build NAME`: the registry of data builders, one line each.

A builder is a module with `HELP` (one line), `add_arguments(parser)` and `run(namespace) -> int`;
keep its top-level imports light, since every builder's flags are added when the CLI starts.
"""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType

BUILDERS: dict[str, str] = {
    "mc_bench_sft": "needlepoint.benchmarks.mc_bench.sft.command",
}


def _module(name: str) -> ModuleType:
    return importlib.import_module(BUILDERS[name])


def add_build_parser(sub: argparse._SubParsersAction) -> None:
    """The `build` subcommand with one sub-subcommand per builder."""
    bp = sub.add_parser("build", help="build data sets (e.g. training data) from other data")
    names = bp.add_subparsers(dest="builder", required=True)
    for name in BUILDERS:
        module = _module(name)
        module.add_arguments(names.add_parser(name, help=module.HELP, description=module.HELP))


def run_build(ns: argparse.Namespace) -> int:
    """Run the builder named on the command line."""
    return int(_module(ns.builder).run(ns))
