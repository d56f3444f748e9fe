"""`needlepoint human BENCH --data D --annotator NAME`: the page a person answers a plan on.

`human` is a group of sub-commands: one per registered benchmark whose declaration names a kind of
human page (`Declaration.human`, kinds.py), and any another module of this package add through
`add_parsers(human_subparsers)` (each sets `human_run` to its handler with `set_defaults`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import pkgutil
import sys
from pathlib import Path

from needlepoint.core.aio import run as run_async
from needlepoint.core.errors import DataError
from needlepoint.human.kinds import IMAGE_PAIR, WHAT, either, names_of, pages

__all__ = ["add_parser", "page_commands", "run"]

OWN = ("cli", "kinds", "plan", "runs", "answers", "views", "server")


def page_commands() -> dict[str, str]:
    """Each benchmark with a human page, by name: what a person does there, after its title."""
    return {name: f"{d.title}: {WHAT.get(d.human or '', 'answer its samples')}" for name, d in pages().items()}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `human` command: one sub-command per benchmark, and those other modules add."""
    hp = sub.add_parser("human", help="a person answers a benchmark's samples on a local web page, scored as a run")
    benches = hp.add_subparsers(dest="human_command", required=True)
    known = pages()
    pair = either([known[n].title for n in names_of(IMAGE_PAIR)], "and") or "an image-pair benchmark"
    for name, text in page_commands().items():
        p = benches.add_parser(name, help=text, description=f"{text}. Prints the page's address (with its access token).")
        p.add_argument("--data", type=Path, required=True, help="the release folder (as for eval)")
        p.add_argument("--annotator", required=True, help="the person's name: letters, digits, '.', '_', '-'")
        p.add_argument("--plan", type=int, default=None, help="answer a stratified sample of N (default: every sample)")
        p.add_argument("--seed", type=int, default=0, help="the plan's seed: the same for every annotator to compare (default 0)")
        p.add_argument("--gold", type=int, default=0, help="mix in K training samples whose answer is shown, not scored")
        p.add_argument("--confidence", action="store_true", help=f"{pair}: a confidence per box (else every box scores 1.0)")
        p.add_argument("--out", type=Path, default=None, help="the run folder (default runs/BENCH/human-NAME/HASH)")
        p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
        p.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
        p.set_defaults(human_run=serve)
    for info in pkgutil.iter_modules(importlib.import_module("needlepoint.human").__path__):
        if info.name in OWN:
            continue
        module = importlib.import_module(f"needlepoint.human.{info.name}")
        if callable(getattr(module, "add_parsers", None)):
            module.add_parsers(benches)


def run(ns: argparse.Namespace) -> int:
    """Run the `human` sub-command the command line named."""
    return int(ns.human_run(ns))


def serve(ns: argparse.Namespace) -> int:
    """Open (or resume) the annotator's run on the plan and serve the page until Ctrl-C."""
    from needlepoint.human.plan import make_plan
    from needlepoint.human.runs import HumanRun, check_annotator
    from needlepoint.human.server import HumanServer

    check_annotator(ns.annotator)
    if not 0 <= ns.port <= 65535:
        raise DataError(f"--port {ns.port} is not a port number from 0 to 65535")
    pair = names_of(IMAGE_PAIR)
    if ns.confidence and ns.human_command not in pair:
        raise DataError(
            f"--confidence is for {either(pair) or 'image-pair benchmarks'} only (its AP50 ranks boxes by confidence)"
        )
    plan = make_plan(ns.human_command, ns.data, ns.plan, ns.seed, ns.gold)
    run_ = HumanRun.open(ns.human_command, ns.data, ns.annotator, plan, ns.out, ns.confidence)
    run_.announce = True  # the terminal hears when the plan is done
    try:
        if run_.done():
            run_.finish()  # a resumed run: its scores as the records stand (a kill may have cut the last finish)
        server = HumanServer(run_, ns.host, ns.port)

        async def main() -> None:
            try:
                await server.open()
            except OSError as exc:
                raise DataError(
                    f"cannot listen on {ns.host}:{ns.port} ({exc.strerror or exc}); choose another --port or --host"
                ) from None
            left = len(run_.pending())
            print(
                f"needlepoint human: {ns.human_command}, annotator {ns.annotator}, {len(plan.order())} samples "
                f"({left} to answer); answers go to {run_.dir}",
                file=sys.stderr,
            )
            if ns.host not in ("127.0.0.1", "localhost", "::1"):
                print(f"needlepoint human: listening on {ns.host}: anyone who has the address below can answer", file=sys.stderr)
            print(f"open {server.url}", flush=True)
            print("needlepoint human: Ctrl-C stops; every submitted answer is already saved", file=sys.stderr, flush=True)
            try:
                await asyncio.Event().wait()
            finally:
                await server.close()

        try:
            run_async(main)
        except KeyboardInterrupt:
            print("\nneedlepoint human: stopped; rerun the same command to continue", file=sys.stderr)
        return 0
    finally:
        try:
            if run_.done():
                run_.finish()
        finally:
            run_.close()
