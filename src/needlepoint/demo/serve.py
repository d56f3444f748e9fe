"""`needlepoint demo --serve`: the demo's simulated model keeps serving on 127.0.0.1, so that a
person can try every command offline against it.

One local server answers as the demo's does: the chat model from the demo sets' scripts (the plain
runs' and the declared solver runs', e.g. MC-Bench's agentic reasoner and localizer, MM-NIAH's
RAG), the simulated embedding model, and OpenAI's Batch API (`eval --batch`). The sets are written
as the demo writes them; the server's URLs and ready-to-paste commands go to stdout, with absolute
paths, so that each runs as printed from any folder. Ctrl-C or SIGTERM stops it (exit 0).
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from needlepoint.core.config import RunConfig
from needlepoint.core.errors import DataError
from needlepoint.demo import Plan, build_sets, phase
from needlepoint.demo.commands import eval_argv, program, shell_line

__all__ = ["BATCH_POLL_S", "SERVED", "check_port", "commands", "guide", "serve_demo"]

SERVED = "served"  # the folder below --out of the printed commands' runs (the plain demo's are in runs/)
BATCH_POLL_S = 0.5  # the printed `--batch` command's --batch-poll: the simulated batches finish in two polls


def check_port(port: int) -> None:
    """DataError, in one sentence, when `port` is no port number or 127.0.0.1 cannot listen on it
    (taken, or privileged): the server's own thread would fail with a traceback instead."""
    if not 0 <= port <= 65535:
        raise DataError(f"--port {port} is not a port number from 0 to 65535")
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: a port in TIME_WAIT is free
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise DataError(
                f"cannot listen on 127.0.0.1:{port} ({exc.strerror or exc}); choose another --port, or leave it out for any free port"
            ) from None


def serve_demo(out: Path, benchmarks: list[str], port: int = 0) -> int:
    """Write the demo sets of `benchmarks` into `out/data`, serve the simulated model on
    127.0.0.1:`port` (0: any free port), print its URLs and commands, and serve until Ctrl-C or
    SIGTERM; 0 then."""
    from needlepoint.models.simulated_batch import BatchServer

    check_port(port)
    if not benchmarks:
        raise DataError("--benchmarks names no benchmark; give e.g. --benchmarks ref_adv_s, or leave it out for all")
    out = Path(os.path.abspath(Path(out).expanduser()))  # the printed commands run from any folder
    server = BatchServer(default=None, port=port)  # a request no script holds: 404, never a made-up answer
    server.start()
    try:
        script, plans = build_sets(out, benchmarks)
        server.script = script
        configs = _configs(plans, server, out / SERVED)
        try:  # from the guide's first byte on, a person may stop the server: the print too
            print(guide(server, configs, out), flush=True)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (cli.main raises it here)
            print("\nneedlepoint demo: stopped serving", file=sys.stderr)
    finally:
        server.stop()
    return 0


def _configs(plans: list[Plan], server: Any, served: Path) -> list[RunConfig]:
    """The RunConfig of every demo run (each set's plain run, then its declared solver runs)
    against `server`, with its run folder below `served`; the solver runs' answers are added to
    the server's script as the demo adds them."""
    from needlepoint.contract.declaration import load_target
    from needlepoint.contract.registry import declaration
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME

    configs = []
    for name, data, options in plans:
        configs.append(
            RunConfig(
                benchmark=name, data=data, model=SIMULATED_MODEL_NAME, api_urls=[server.url], options=options, out=served / name
            )
        )
        for target in declaration(name).demo_runs:
            phase(f"preparing the answers of {name}'s solver runs")
            with contextlib.redirect_stdout(io.StringIO()):  # a demo run's caption: the guide has its own
                configs.append(load_target(target)(data, options, server, served))
    return configs


def guide(server: Any, configs: list[RunConfig], out: Path) -> str:
    """What `demo --serve` prints: the URLs the server answers on, and commands to paste."""
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME

    url = server.url
    lines = [
        "needlepoint demo: the simulated model serves on 127.0.0.1 until Ctrl-C",
        "",
        f"  --api-url   {url}   chat model {SIMULATED_MODEL_NAME} (--model)",
        # the demo's other chat model is MC-Bench's agentic localizer (benchmarks/mc_bench/agentic_demo.py)
        *(f"  localizer   {url}   chat model {m} (--solver agentic)" for m in server.models if m != SIMULATED_MODEL_NAME),
        *(
            f"  embedder    {url}   embedding model {m}: /v1/embeddings, /tokenize (the RAG solver's --embed-url)"
            for m in server.embed_models
        ),
        f"  batch       {url}   OpenAI's Batch API, /v1/files and /v1/batches (eval --batch)",
        f"  data sets   {out / 'data'}",
        f"  run folders {out / SERVED}",
        "",
        "Paste these into another terminal (they run from any folder; the model answers the demo sets only):",
    ]
    me = program()
    for caption, argv in commands(configs, out / SERVED):
        lines += ["", f"# {caption}", shell_line([*me, *argv])]
    return "\n".join(lines)


def commands(configs: list[RunConfig], served: Path) -> list[tuple[str, list[str]]]:
    """(caption, argv without the program's name) of each command the guide prints: every demo
    run's eval, the first one's again through the Batch API, then report, compare and human
    over those runs. `configs` starts with a plain (default solver) run."""
    from needlepoint.human.cli import page_commands

    human_pages = page_commands()

    found = [(f"{c.benchmark}" + (f" with --solver {c.solver}" if c.solver != "default" else ""), eval_argv(c)) for c in configs]
    first = configs[0]
    batch = replace(first, out=served / f"{first.benchmark}_batch")
    found.append(
        (f"{first.benchmark} again, through the Batch API", eval_argv(batch, "--batch", "--batch-poll", str(BATCH_POLL_S)))
    )
    found.append(("the leaderboard of the runs above", ["report", str(served), "--out", str(served / "leaderboard")]))
    solver_run = next((c for c in configs if c.solver != "default"), None)
    if solver_run is not None:
        plain = next(c for c in configs if c.benchmark == solver_run.benchmark and c.solver == "default")
        pair, what = (plain, solver_run), f"--solver {solver_run.solver} against the default solver"
    else:
        pair, what = (first, batch), "the batch run against the live one"
    found.append(
        (
            f"{pair[0].benchmark}: {what}, sample by sample",
            ["compare", str(pair[0].out), str(pair[1].out), "--out", str(served / "compare")],
        )
    )
    human = next((c for c in configs if c.benchmark in human_pages), None)
    if human is not None:
        found.append(
            (
                f"you answer {human.benchmark} yourself on a local page (open the address it prints)",
                ["human", human.benchmark, "--data", str(human.data), "--annotator", "you", "--out", str(served / "human-you")],
            )
        )
    return found
