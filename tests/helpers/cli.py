"""Running the command line: in a separate process, or in this one with its output swallowed."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

from helpers.paths import REPO


def run_cli(
    args: list[str], cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """`python -m needlepoint.cli ARGS` as a separate process."""
    return subprocess.run(
        [sys.executable, "-m", "needlepoint.cli", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_quiet(argv: list[str]) -> tuple[int, str]:
    """`needlepoint ARGV` in this process: its exit code and what it wrote to stderr."""
    from needlepoint.cli import main

    with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    return rc, err.getvalue()


def one_sentence(err: str) -> str:
    """The one line of a refusal on stderr (`needlepoint: error: ...`, no traceback), asserted as such."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("needlepoint: error: ") and "Traceback" not in err
    return lines[0]
