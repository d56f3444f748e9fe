"""The `build` sub-command: its parser (`add_parser`, one sub-command per builder) and handler
(`run`). Each benchmark declares its builders (`Declaration.builders`): a module with
`add_arguments(parser)` (its flags) and `run(ns) -> int`, imported when the parser is built or the
builder runs; the rule every builder follows for its output folder is contract/build.py's."""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from needlepoint.core.errors import EXIT_INTERRUPTED

__all__ = ["add_parser", "builders", "run"]


def builders() -> dict[str, tuple[str, str]]:
    """Builder name -> (module, help), over every registered benchmark's declaration."""
    from needlepoint.contract.registry import declarations

    return {b.name: (b.target, b.help) for d in declarations() for b in d.builders}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `build` command with one sub-command per builder."""
    bd = sub.add_parser("build", help="build data from your own: MM-NIAH haystacks to 1M tokens, MC-Bench training data")
    names = bd.add_subparsers(dest="builder", required=True)
    for name, (module, help_text) in builders().items():
        p = names.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(p)


def run(ns: argparse.Namespace) -> int:
    """Run the builder the command line named. Builders decode big images reduced and skip
    decompression bombs themselves, so Pillow's warning about big images is not shown."""
    from PIL import Image

    warnings.simplefilter("ignore", Image.DecompressionBombWarning)
    try:
        return int(importlib.import_module(builders()[ns.builder][0]).run(ns))
    except KeyboardInterrupt:  # the command line's own message speaks of a run's saved samples
        print("\nneedlepoint: interrupted; the build was not finished and left nothing: rerun it to build again", file=sys.stderr)
        return EXIT_INTERRUPTED
