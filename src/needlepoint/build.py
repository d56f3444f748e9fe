"""`needlepoint build NAME ...`: builders of benchmark sets, by name.

Each builder is a module with `add_arguments(parser)` (its flags) and `run(ns) -> int`; it is
imported only when its name is used. A new builder is one line in BUILDERS.
"""

from __future__ import annotations

import argparse
import importlib

BUILDERS: dict[str, tuple[str, str]] = {
    "mm_niah": ("needlepoint.benchmarks.mm_niah.build.cli", "MM-NIAH haystacks from an interleaved corpus (OBELICS format)"),
    "mc_bench_sft": ("needlepoint.benchmarks.mc_bench.sft.command", "MC-Bench-style multi-image grounding training data from COCO-format detection sets"),
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `build` command with one sub-command per builder."""
    bd = sub.add_parser("build", help="build data from your own: MM-NIAH haystacks to 1M tokens, MC-Bench training data")
    names = bd.add_subparsers(dest="builder", required=True)
    for name, (module, help_text) in BUILDERS.items():
        p = names.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(p)


def run(ns: argparse.Namespace) -> int:
    """Run the builder the command line named."""
    return int(importlib.import_module(BUILDERS[ns.builder][0]).run(ns))
