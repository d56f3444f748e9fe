"""The `compare` subcommand: its parser (`add_parser`) and handler (`run`), wired in cli.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from needlepoint.core.errors import DataError
from needlepoint.core.files import json_text
from needlepoint.core.intervalsettings import DEFAULT_LEVEL, DEFAULT_RESAMPLES

__all__ = ["DEFAULT_OUT", "add_parser", "run"]

DEFAULT_OUT = Path("compare")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`needlepoint compare RUN_A RUN_B [RUN_C ...]`."""
    cp = sub.add_parser(
        "compare",
        help="compare runs of one benchmark and dataset, paired sample by sample (bootstrap, McNemar, a page of cards)",
        description="Compare two or more runs of one benchmark on one dataset, paired on the samples every run answered: "
        "each headline metric's values, the difference against the first run with its paired-bootstrap interval and p-value, "
        "the exact McNemar test where a metric is a share of samples right, and an HTML page of per-sample cards.",
    )
    cp.add_argument("runs", nargs="+", type=Path, help="run folders (the first is the one the others are compared against)")
    cp.add_argument(
        "--data", type=Path, help="the dataset, where this machine sees it elsewhere than the runs did (same content)"
    )
    cp.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help=f"bootstrap resamples (default {DEFAULT_RESAMPLES})")
    cp.add_argument("--ci-level", type=float, default=DEFAULT_LEVEL, help=f"interval level (default {DEFAULT_LEVEL})")
    cp.add_argument("--seed", type=int, default=0, help="seed of the bootstrap draws (default 0)")
    cp.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    cp.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of the HTML page, index.html (default ./compare)")
    cp.add_argument("--no-page", action="store_true", help="write no HTML page")


def run(ns: argparse.Namespace) -> int:
    """Load, pair, compare, print; write the page. Bad input raises DataError (cli.main: exit 2)."""
    from needlepoint.compare.paired import compare_runs
    from needlepoint.compare.runs import load_runs, pair_runs, refuse_run_page
    from needlepoint.compare.tables import comparison_tables, pairing_lines, table_notes

    if ns.seed < 0:
        raise DataError(f"--seed is {ns.seed}; give 0 or more")
    if not ns.no_page:
        from needlepoint.compare.page import refuse_other_files

        refuse_run_page(ns.out, ns.runs)
        refuse_other_files(ns.out)
    runs = load_runs(ns.runs, ns.data)
    pairing = pair_runs(runs)
    comparison = compare_runs(pairing, ns.resamples, ns.ci_level, ns.seed)
    if ns.json:
        print(json_text(comparison.to_json(), indent=2))
    else:
        from needlepoint.report.terminal import print_tables

        for line in pairing_lines(comparison):
            print(line)
        for table, contrast in zip(comparison_tables(comparison), comparison.contrasts):
            print_tables([table])
            for line in table_notes(comparison, contrast):
                print(line)
    if not ns.no_page:
        from needlepoint.compare.page import write_page

        path = write_page(comparison, Path(ns.out).expanduser())
        print(f"compare page: {path}", file=sys.stderr)
    return 0
