"""Command-line options that a benchmark or a solver declares, so that the CLI is built from
declarations and adding a benchmark's or a solver's flags touches only its own package.

A benchmark lists its `needlepoint eval` flags in its Declaration's `options` (a flag several
benchmarks share, such as --box-format, is listed by each and merged by the CLI: the constants
below give such flags one text); a solver class lists its flags in `options: tuple[Option, ...]`.
`needlepoint eval` adds them and passes the ones given as keywords (the option's `dest`) to the
benchmark's or the solver's constructor.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["ABS_FRAME", "ANSWER_FORMAT", "BOX_FORMAT", "MAX_IMAGE_SIDE", "Option", "add_options", "given"]


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
                opt.flag,
                type=opt.type,
                choices=opt.choices,
                metavar=opt.metavar,
                action="append" if opt.repeat else "store",
                help=opt.help,
            )


def given(ns: argparse.Namespace, options: Iterable[Option]) -> dict[str, Any]:
    """The values of `options` that were given on the command line, by keyword."""
    return {o.dest: getattr(ns, o.dest) for o in options if getattr(ns, o.dest, None) is not None}


# Flags several benchmarks declare (each benchmark lists those it takes).
BOX_FORMAT = Option(
    "--box-format",
    "the box convention of the model's numbers: abs_xyxy, norm_1000_xyxy, norm_1_xyxy, or a family's own "
    "(norm_1000_yxyx, norm_999_xyxy, norm_1023_yxyx, norm_100_xyxy, bins_1000_xyxy); --model-family states it",
)
ANSWER_FORMAT = Option(
    "--answer-format",
    "json (default), grounding-tokens (Qwen2-VL's <|box_start|>(x1,y1),(x2,y2)<|box_end|>, 0-1000), or a family's "
    "syntax (qwen-vl, internvl, deepseek-vl2, paligemma, florence-2, kosmos-2, cogvlm-grounding, minigpt-v2, shikra, ...)",
)
MODEL_FAMILY = Option(
    "--model-family",
    "the model family's grounding conventions as one bundle: its prompt, answer syntax, box format, frame, input "
    "mode and limits (needlepoint families lists them; each flag above overrides its part)",
)
MAX_IMAGE_SIDE = Option("--max-image-side", "downscale images so no side exceeds this many pixels", type=int)
ABS_FRAME: tuple[Option, ...] = (
    Option(
        "--abs-frame",
        "what abs_xyxy boxes are pixels of: official (the image sent; default) or "
        "qwen-smart-resize (the image as Qwen2.5-VL's processor resized it)",
    ),
    Option("--abs-frame-factor", "qwen-smart-resize: sides become multiples of this (default 28)", type=int),
    Option("--abs-frame-min-pixels", "qwen-smart-resize: least area after resizing (default 3136 = 56*56)", type=int),
    Option("--abs-frame-max-pixels", "qwen-smart-resize: largest area after resizing (default 1003520 = 28*28*1280)", type=int),
)
