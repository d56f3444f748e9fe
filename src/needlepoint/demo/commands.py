"""Command lines a person can paste: a demo run's RunConfig as the `needlepoint eval` command that
asks the same requests, and the program's name as this shell can run it.

`needlepoint demo --serve` prints these for its simulated model: a printed command must ask
exactly what the model's script answers, so every setting of the config becomes a flag (a setting
no flag expresses is refused, never dropped).
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from needlepoint.core.config import RunConfig
from needlepoint.core.options import Option

__all__ = ["eval_argv", "option_flags", "program", "shell_line"]

# The RunConfig fields `eval_argv` writes as flags (or that do not change what is asked).
PRINTED = ("benchmark", "data", "model", "api_urls", "options", "solver", "solver_options", "out", "concurrency", "show_progress")


def program() -> list[str]:
    """The words that run needlepoint as this process was run: `needlepoint` when it was started
    by that name and the shell finds the same file, else the interpreter with `-m needlepoint.cli`
    (which works from any folder, e.g. for `python -m needlepoint.cli demo --serve`)."""
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started is not None and started.name == "needlepoint":
        found = shutil.which("needlepoint")
        if found is not None and Path(found).resolve() == started.resolve():
            return ["needlepoint"]
        return [str(started.resolve())]
    return [sys.executable, "-m", "needlepoint.cli"]


def shell_line(argv: Sequence[str]) -> str:
    """`argv` as one line a POSIX shell reads back word for word."""
    return shlex.join(argv)


def option_flags(declared: Iterable[Option], values: Mapping[str, Any]) -> list[str]:
    """The flags that set `values` (keyword -> value) through the `declared` options: a switch
    when true, a repeated option once per item; ValueError for a keyword no option sets."""
    by_dest = {o.dest: o for o in declared}
    argv: list[str] = []
    for key, value in values.items():
        opt = by_dest.get(key)
        if opt is None:
            raise ValueError(f"no flag sets {key!r}")
        if opt.switch:
            argv += [opt.flag] if value else []
            continue
        items = list(value) if opt.repeat and isinstance(value, (list, tuple)) else [value]
        for item in items:
            argv += [opt.flag, str(item)]
    return argv


def _solver_flags(config: RunConfig) -> list[str]:
    """`--solver NAME` and the solver's settings: its own flags where it declares one, else
    `--solver-option KEY=JSON`."""
    from needlepoint.contract.declaration import load_target
    from needlepoint.contract.registry import declaration
    from needlepoint.solvers import solver_options

    if config.solver == "default":
        return []
    cls = load_target(declaration(config.benchmark).solvers[config.solver])
    declared = solver_options(cls)
    own = {o.dest for o in declared}
    flagged = {k: v for k, v in config.solver_options.items() if k in own}
    generic = [f"{k}={json.dumps(v)}" for k, v in config.solver_options.items() if k not in own]
    return ["--solver", config.solver, *option_flags(declared, flagged), *(a for g in generic for a in ("--solver-option", g))]


def eval_argv(config: RunConfig, *extra: str) -> list[str]:
    """The `needlepoint eval` command (without the program's name) that runs `config`, `extra`
    flags before its `--out`; ValueError when the config holds a setting no printed flag gives."""
    from needlepoint.contract.registry import declaration

    base = RunConfig(benchmark=config.benchmark, data=config.data, model=config.model, api_urls=config.api_urls)
    unprinted = [f.name for f in fields(config) if f.name not in PRINTED and getattr(config, f.name) != getattr(base, f.name)]
    if unprinted:
        raise ValueError(f"a demo run of {config.benchmark} sets {', '.join(unprinted)}, which the printed command would not")
    argv = ["eval", config.benchmark, "--data", str(config.data), "--model", config.model]
    for url in config.api_urls:
        argv += ["--api-url", url]
    argv += option_flags(declaration(config.benchmark).options, config.options)
    argv += _solver_flags(config)
    argv += extra
    return argv + (["--out", str(config.out)] if config.out is not None else [])
