"""The command line: `needlepoint eval | score | report | merge | compare | runs | demo | build | human`.

This module holds the program's parser, `--version`, the signal handling and `main`; each
sub-command's parser and handler live in its package's cli.py (`add_parser(sub)`, `run(ns)`):
run/ (eval, score, merge), report/ (report, runs), demo/, compare/, contract/ (build), human/.

Exit codes (docs/evaluating.md, "Exit codes"): 0 every requested sample was answered; 3 some samples
failed (the run folder is kept; `--retry-failed` or a plain rerun continues it), or `merge
--allow-partial` merged a run with samples missing; 2 bad input, in
one sentence on stderr; 4 the run stopped because too many samples hit a fault in needlepoint
itself (internal_error records keep their tracebacks); 130 interrupted (Ctrl-C or SIGTERM), with how to resume.
"""

from __future__ import annotations

import gc
import os
import signal
import sys

_pending = False  # a SIGTERM came while the program was starting: main ends it at once


def _early_terminate(signum: int, frame: object) -> None:
    """SIGTERM before `main` installs its handler (the imports below, a second or more on a busy
    machine): remembered, so that the run ends as an interrupted one (130, one line) instead of
    dying silently from the signal; raised here it would land in the import machinery."""
    global _pending
    _pending = True


PROGRAM = __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "needlepoint"  # not an import
if PROGRAM:
    signal.signal(signal.SIGTERM, _early_terminate)

import argparse  # noqa: E402 - after the early handler: these imports take a while
import asyncio  # noqa: E402
import threading  # noqa: E402
from typing import Any, Protocol  # noqa: E402

from needlepoint import __version__  # noqa: E402
from needlepoint.compare import cli as compare_cli  # noqa: E402
from needlepoint.contract import cli as contract_cli  # noqa: E402
from needlepoint.core.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, DataError, InternalFault  # noqa: E402
from needlepoint.demo import cli as demo_cli  # noqa: E402
from needlepoint.families import cli as families_cli  # noqa: E402
from needlepoint.human import cli as human_cli  # noqa: E402
from needlepoint.report import cli as report_cli  # noqa: E402
from needlepoint.run import cli as run_cli  # noqa: E402


class SubCommand(Protocol):
    """A sub-command module: its package's cli.py."""

    def add_parser(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Add the module's sub-command(s) to the program's sub-parsers."""

    def run(self, ns: argparse.Namespace) -> int:
        """Run the sub-command `ns.command` names; its exit code."""


# Every sub-command, in the order `needlepoint --help` lists them, with the module that owns it.
COMMANDS: dict[str, SubCommand] = {
    "eval": run_cli,
    "score": run_cli,
    "report": report_cli,
    "merge": run_cli,
    "demo": demo_cli,
    "compare": compare_cli,
    "build": contract_cli,
    "runs": report_cli,
    "human": human_cli,
    "families": families_cli,
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for the docs and tests)."""
    parser = argparse.ArgumentParser(prog="needlepoint", description="Evaluate multimodal models on finding things.")
    parser.add_argument("--version", action="version", version=f"needlepoint {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in dict.fromkeys(COMMANDS.values()):
        module.add_parser(sub)
    _list_in_order(sub)
    return parser


def _list_in_order(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Put the sub-commands in COMMANDS' order, in the usage line and the help's list: a module
    adds all of its sub-commands at once (run/cli.py: eval, score and merge). A sub-command no
    entry of COMMANDS names is a KeyError here, at once."""
    rank = {name: index for index, name in enumerate(COMMANDS)}
    sub._choices_actions.sort(key=lambda action: rank[action.dest])
    parsers = sorted(sub.choices.items(), key=lambda item: rank[item[0]])
    sub.choices.clear()
    sub.choices.update(parsers)


_stopping = False  # a SIGTERM is being acted on: later ones change nothing


class Terminated(KeyboardInterrupt):
    """The KeyboardInterrupt a SIGTERM raises: ends the program as Ctrl-C does, and is known
    again if Python drops it (`_dropped`)."""


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM ends a run like Ctrl-C: records already written stay, the interrupt is reported,
    and nothing is printed but the one line of `main`.

    Inside an event loop the KeyboardInterrupt is raised by a callback of the loop, never here:
    raised here it lands in whatever code runs, e.g. a task's step (then asyncio prints the task's
    traceback as "never retrieved") or a finaliser (where it is lost and the run waits on a hung
    request). The loop's callback ends `asyncio.run`, which then cancels every task, so each one
    closes its connections. Outside a loop it is raised here, as Python's own SIGINT handler does,
    unless the interrupted code cannot take it (`_unsafe`: a finaliser, the import machinery; the
    signal is then sent again 50 ms later). Where Python drops it all the same (a weak reference's
    or the garbage collector's callback: "Exception ignored in ..."), `_dropped` sees it, says
    nothing and sends the signal again. A second SIGTERM while the first is acted on changes nothing."""
    global _stopping
    if _stopping:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        if _unsafe(frame):  # raised there it would be "ignored" with a traceback: ask again in a moment
            _again()
            return
        _stopping = True
        raise Terminated from None
    _stopping = True
    loop.call_soon_threadsafe(_interrupt)


def _again(delay_s: float = 0.05) -> None:
    """Send this process SIGTERM again in a moment (from a daemon thread: it never holds up the exit)."""
    timer = threading.Timer(delay_s, os.kill, (os.getpid(), signal.SIGTERM))
    timer.daemon = True
    timer.start()


def _unsafe(frame: Any) -> bool:
    """Whether an exception raised in `frame` would be dropped or break Python's state: the frame
    is the import machinery's own (its module locks and their weak-reference callbacks), or it runs
    inside a `__del__` (e.g. of an aiohttp object), where an exception is printed and dropped."""
    if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        return True
    return _in_finaliser(frame)


def _in_finaliser(frame: Any) -> bool:
    """Whether the interrupted code runs inside a `__del__`, where an exception is printed and
    dropped instead of ending the program."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _dropped(unraisable: Any, previous: Any) -> None:
    """sys.unraisablehook while `main` runs: the Terminated a SIGTERM raised in code that cannot
    pass it on (a weak reference's callback, a finaliser) is neither printed nor lost: the
    SIGTERM is sent again, to land elsewhere. Anything else goes to the previous hook."""
    global _stopping
    if isinstance(unraisable.exc_value, Terminated):
        _stopping = False
        _again()
        return
    previous(unraisable)


def _interrupt() -> None:
    """A loop callback that stops the loop with KeyboardInterrupt (asyncio lets it through)."""
    raise Terminated


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush into a closed pipe is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `needlepoint` command; returns the exit code (see the module docstring)."""
    global _stopping, _pending
    _stopping = False
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:  # before anything slow: a SIGTERM from here on ends the program with 130
        previous = signal.signal(signal.SIGTERM, _terminate)
        previous_hook = sys.unraisablehook
        sys.unraisablehook = lambda unraisable: _dropped(unraisable, previous_hook)
    try:
        if _pending and main_thread:  # a SIGTERM came while the program started
            _pending = False
            _stopping = True
            raise Terminated
        try:
            parser = build_parser()  # reads every declaration, a plugin's too
        except DataError as exc:
            print(f"needlepoint: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        ns = parser.parse_args(argv)
        code = COMMANDS[ns.command].run(ns)
        sys.stdout.flush()  # here, so that a closed pipe is caught below and not at exit
        return code
    except DataError as exc:
        print(f"needlepoint: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InternalFault as exc:
        print(f"needlepoint: internal error: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        print("\nneedlepoint: interrupted; finished samples are saved, rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `needlepoint score ... | head` closed our stdout: nothing to say
        _quiet_stdout()
        return EXIT_OK
    except OSError as exc:
        if exc.filename:  # a filesystem error names its file; a decoder's OSError (Pillow's) names none and is no path problem
            print(f"needlepoint: error: {exc.strerror or exc}: {exc.filename}; check the path and permissions", file=sys.stderr)
        elif exc.errno:
            print(f"needlepoint: error: {exc.strerror or exc}; check free disk space and permissions", file=sys.stderr)
        else:
            print(f"needlepoint: error: a file could not be decoded ({exc}); replace or remove it", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
            sys.unraisablehook = previous_hook
        if PROGRAM:
            # The process ends now: the interpreter's last collection would walk every object the
            # command made (50-60 ms of a run's end, issue 45). The objects still go at exit; a
            # cycle among them is not collected (every file the command wrote is closed by now).
            gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
