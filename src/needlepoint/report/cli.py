"""The `report` and `runs` sub-commands: their parsers (`add_parser`) and handlers (`run`). The
work is the library's: report/leaderboard.py (the boards) and report/runs_list.py (the runs)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from needlepoint.core.files import json_text
from needlepoint.core.intervalsettings import add_ci_flags

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`needlepoint report RUN...` and `needlepoint runs [FOLDER]`."""
    rp = sub.add_parser("report", help="one leaderboard over several run folders")
    rp.add_argument(
        "runs",
        nargs="+",
        type=Path,
        help="run folders, or folders of runs (one run per configuration: a complete one first, then the newest)",
    )
    rp.add_argument(
        "--out", type=Path, help="folder for leaderboard.md, leaderboard.html and leaderboard_<board>.csv (default ./leaderboard)"
    )
    rp.add_argument("--with-published", action="store_true", help="add every published row, labelled with its source")
    rp.add_argument(
        "--format",
        choices=("markdown", "latex", "csv"),
        help="print the boards in the papers' layouts on stdout, ready to paste (files only with --out)",
    )
    rp.add_argument(
        "--rows",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only the published rows whose model matches this glob, e.g. 'Qwen2.5-VL-*' (implies --with-published; repeatable)",
    )
    add_ci_flags(rp, resamples=False)
    rp.add_argument(
        "--usage", action="store_true", help="add a board per benchmark of each run's tokens, requests, time and cost"
    )

    p = sub.add_parser("runs", help="list every run folder below a folder (default: runs)")
    p.add_argument("folder", nargs="?", type=Path, default=Path("runs"), help="where to look (default: runs)")
    p.add_argument("--json", action="store_true", help="print the runs as a JSON list")
    p.add_argument(
        "--html",
        action="store_true",
        help="also write FOLDER/index.html: every run below FOLDER, filterable, each linking to its own report page",
    )


def run(ns: argparse.Namespace) -> int:
    """Run the sub-command of this module that the command line named."""
    return run_runs(ns) if ns.command == "runs" else run_report(ns)


def run_report(ns: argparse.Namespace) -> int:
    """`needlepoint report`: the leaderboards of the runs, printed and written (report/leaderboard.py)."""
    from needlepoint.report.leaderboard import main

    return main(ns)


def run_runs(ns: argparse.Namespace) -> int:
    """`needlepoint runs`: print the table (or JSON); 0 also when no run is found."""
    from needlepoint.report.runs_list import find_runs, print_runs

    rows, skipped = find_runs(ns.folder)
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    if ns.html:
        from needlepoint.report.index import write_index

        index = write_index(ns.folder, [ns.folder / r.path for r in rows], ns.folder / "index.html", f"runs below {ns.folder}")
        print(f"index of {len(rows)} run(s): {index}", file=sys.stderr)
    if ns.json:
        print(json_text([asdict(r) for r in rows], indent=2))
    elif not rows:
        print(f"no run folder below {ns.folder}", file=sys.stderr)
    else:
        print_runs(rows, f"runs below {ns.folder}")
    return 0
