"""Running the command line: in a separate process, or in this one with its output swallowed."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers.paths import REPO


def ctrl_c_stops() -> None:
    """A child's `preexec_fn` for tests that send it Ctrl-C (SIGINT): the default disposition, so
    that the test does not depend on how the suite was started (a background job of a
    non-interactive shell, e.g. a CI script started with `&`, hands its children SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(
    args: list[str], cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m needlepoint.cli ARGS` as a separate process."""
    return subprocess.run(
        [sys.executable, "-m", "needlepoint.cli", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_cli(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """`python -m needlepoint.cli ARGS` started in `cwd` with this checkout's package first on the
    path, its output piped as text, Ctrl-C stopping it (`ctrl_c_stops`)."""
    return subprocess.Popen(
        [sys.executable, "-m", "needlepoint.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")},
        preexec_fn=ctrl_c_stops,
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


def ref_eval_args(
    data: Path,
    url: str,
    out: Path | None,
    *extra: str,
    model: str = "org/m",
    box_format: str = "abs_xyxy",
    max_retries: int | None = 0,
) -> list[str]:
    """`eval ref_adv_s` against one server without the progress line; `--max-retries` unless
    max_retries is None, `--out` unless out is None."""
    args = ["eval", "ref_adv_s", "--data", str(data), "--model", model, "--api-url", url]
    args += ["--box-format", box_format, "--no-progress", *extra]
    args += ["--max-retries", str(max_retries)] if max_retries is not None else []
    return args + (["--out", str(out)] if out is not None else [])
