"""Command-line options that a benchmark or a solver declares, so that the CLI is built from
declarations and adding a solver's flags touches only the solver's own module.

A solver class lists its flags in `options: tuple[Option, ...]`; `needlepoint eval` adds them
in a group of their own and passes the ones given to the solver's constructor as keywords (the
option's `dest`), next to `--solver-option KEY=VALUE`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Option", "add_options", "given"]


@dataclass(frozen=True)
class Option:
    """One flag: `--localizer-url` becomes the keyword `localizer_url`. `switch`: a flag without a
    value (store_true); `repeat`: may be given several times (a list)."""

    flag: str
    help: str
    type: Callable[[str], Any] = str
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    switch: bool = False
    repeat: bool = False

    @property
    def dest(self) -> str:
        """The keyword the value is passed as."""
        return self.flag.lstrip("-").replace("-", "_")


def add_options(group: argparse._ActionsContainer, options: Iterable[Option], seen: set[str]) -> None:
    """Add each option whose flag is not in `seen` (several solvers may share a flag) to `group`."""
    for opt in options:
        if opt.flag in seen:
            continue
        seen.add(opt.flag)
        if opt.switch:
            group.add_argument(opt.flag, action="store_true", default=None, help=opt.help)
        else:
            group.add_argument(
                opt.flag, type=opt.type, choices=opt.choices, metavar=opt.metavar,
                action="append" if opt.repeat else "store", help=opt.help,
            )  # fmt: skip


def given(ns: argparse.Namespace, options: Iterable[Option]) -> dict[str, Any]:
    """The values of `options` that were given on the command line, by keyword."""
    return {o.dest: getattr(ns, o.dest) for o in options if getattr(ns, o.dest, None) is not None}
