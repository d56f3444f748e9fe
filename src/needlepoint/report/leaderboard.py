"""`needlepoint report RUN...`: one leaderboard per benchmark over any set of run folders, in the
layout of the paper's table, as a terminal table, Markdown, CSV and HTML.

Every cell is read from the run's metrics.json: a rate is shown as 100 times the stored value
(one decimal in the terminal, Markdown and HTML; unrounded in the CSV), a count as stored.
`--with-published` adds every row of the papers' tables (report/published.py), each cell as
published and each row labelled with its source: a cell the source does not give stays empty, and
a column only the source has is added (empty in the run rows).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shlex
import statistics
import sys
from argparse import Namespace
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from needlepoint.contract.boards import Board, BoardRow, Cell, Corrupt, PublishedRow, Run, obj, pct, progress_mark
from needlepoint.contract.declaration import load_target
from needlepoint.contract.registry import declaration, names
from needlepoint.contract.usage import usage_board
from needlepoint.core.errors import DataError
from needlepoint.core.files import write_atomic
from needlepoint.core.intervalsettings import DEFAULT_LEVEL, CiSettings
from needlepoint.core.jsonl import read_object
from needlepoint.core.store import HEADER, METRICS
from needlepoint.report.agreement import add_human_mean, human_boards
from needlepoint.report.assets import BOARD_JS
from needlepoint.report.formats import rank_rows, render, select_rows
from needlepoint.report.html import esc, page
from needlepoint.report.published import published_notes, published_rows

__all__ = [
    "Board",
    "BoardRow",
    "Run",
    "build_boards",
    "discover",
    "find_run",
    "layout",
    "main",
    "pct",
    "progress_mark",
    "read_run",
    "write_leaderboard",
]

DEFAULT_OUT = Path("leaderboard")
RUN_FILE_BYTES = 256 << 20  # run.json and metrics.json are kilobytes; more is no run's file


# --- run folders ---------------------------------------------------------------------------------


def _read_object(path: Path, advice: str) -> dict[str, Any]:
    """The JSON object in `path`; DataError (ending in `advice`) when it is missing, no regular
    file, too large, not JSON, or JSON but not an object (jsonl.read_object: one reader)."""
    return read_object(path, advice, RUN_FILE_BYTES)


HEADER_ADVICE = "it is not a run folder written by `needlepoint eval`; move it aside"
METRICS_ADVICE = "rescore the run with `needlepoint eval` (it resumes)"


def find_run(path: Path) -> Path:
    """`path` if it is a run folder; for a folder of run folders (runs/<bench>/<model>), the one
    that has metrics, complete before incomplete, newest first; DataError otherwise."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path} does not exist; pass run folders written by `needlepoint eval`")
    if not path.is_dir():
        raise DataError(f"{path} is not a run folder; pass run folders written by `needlepoint eval` (they hold {HEADER})")
    if (path / HEADER).is_file():
        return path
    inner = [p for p in path.iterdir() if p.is_dir() and (p / HEADER).is_file()]
    if not inner:
        raise DataError(
            f"{path} is not a run folder (it holds no {HEADER}, nor do its subfolders); "
            "pass run folders written by `needlepoint eval`, e.g. runs/mc_bench/<model>/<timestamp>"
        )
    scored = [p for p in inner if (p / METRICS).is_file()]
    return max(scored or inner, key=lambda p: _preference(p, _read_object(p / HEADER, HEADER_ADVICE)))


def discover(path: Path) -> tuple[list[Path], list[str]]:
    """Every run below `path`, found recursively: `path` itself when it is a run folder; else one
    run per configuration (benchmark, model and identity hash): a complete one before an
    incomplete or failed one, then the newest. Returns the run folders and one line per run
    folder left out, saying why."""
    path = Path(path)
    if not path.is_dir() or (path / HEADER).is_file():
        return [find_run(path)], []
    candidates: list[Path] = []
    for folder, subdirs, files in os.walk(path):
        here = Path(folder)
        if HEADER in files and here != path:
            candidates.append(here)
            subdirs[:] = []  # a run folder's own subfolders (report/, heatmaps/) hold no runs
        else:
            subdirs.sort()
    if not candidates:
        find_run(path)  # raises the one-sentence refusal
    groups: dict[tuple[str, str, str], list[tuple[Path, dict[str, Any]]]] = {}
    skipped: list[str] = []
    for run_dir in sorted(candidates):
        try:
            header = _read_object(run_dir / HEADER, HEADER_ADVICE)
        except DataError as exc:
            skipped.append(f"{run_dir}: {exc}")
            continue
        if not os.path.lexists(run_dir / METRICS):  # one that is there but unreadable: read_run says why
            skipped.append(f"{run_dir}: no {METRICS} (the run never finished; rerun its command to resume)")
            continue
        shard = (header.get("identity") or {}).get("shard") if isinstance(header.get("identity"), dict) else None
        if shard:  # a part of a run: its merge stands for the whole (docs/scale-out.md)
            skipped.append(
                f"{run_dir}: shard {shard} of a run, not the whole (report the folder `needlepoint merge` wrote, or name it to include it)"
            )
            continue
        probe = Run(run_dir, header, {})
        groups.setdefault((probe.benchmark, probe.model, configuration(header)), []).append((run_dir, header))
    runs: list[Path] = []
    for key in sorted(groups):
        best, _ = max(groups[key], key=lambda found: _preference(*found))
        runs.append(best)
        skipped += [
            f"{d}: another run of the same configuration beside {best} ({_state(h)}; name it to include it)"
            for d, h in groups[key]
            if d != best
        ]
    return runs, skipped


def configuration(header: dict[str, Any]) -> str:
    """What makes two runs one configuration: the identity hash of run.json (its identity itself
    when the hash is missing)."""
    return str(header.get("hash") or json.dumps(header.get("identity"), sort_keys=True, default=str))


def _preference(run_dir: Path, header: dict[str, Any]) -> tuple[bool, str, str]:
    """Which run of one configuration a leaderboard shows: a complete one before an incomplete or
    failed one, then the newest."""
    return (header.get("status") == "complete", str(header.get("created") or ""), run_dir.name)


def _state(header: dict[str, Any]) -> str:
    return "complete" if header.get("status") == "complete" else f"{header.get('status') or 'unfinished'}"


def _flat(value: Any, prefix: str = "") -> dict[str, str]:
    """An identity as `name -> value` text, nested objects joined with dots (generation.temperature)."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: json.dumps(value, default=str) if not isinstance(value, str) else value}


def configuration_notes(runs: Sequence[Run]) -> dict[Path, list[str]]:
    """For runs of one benchmark and model that differ in configuration, each run's differing
    settings as `name=value` (benchmark options without their `option.` prefix), so that the
    rows of two configurations never look alike; nothing for a run alone of its model. A setting
    whose value is long text (a prompt template, which follows from `--answer-format`) is left out
    beside a short one; where only long ones differ, each is named with a digest of its value
    (`prompt #3fa2c1`), never quoted."""
    by_model: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        by_model.setdefault((run.benchmark, run.model), []).append(run)
    notes: dict[Path, list[str]] = {}
    for group in by_model.values():
        if len({configuration(r.header) for r in group}) < 2:
            continue
        flat = {r.dir: _flat(r.identity) for r in group}
        keys = sorted({k for f in flat.values() for k in f if k != "version"})
        differ = [k for k in keys if len({f.get(k) for f in flat.values()}) > 1]
        short = [k for k in differ if all(_short(f.get(k, "-")) for f in flat.values())]
        for r in group:
            shown = [f"{k.removeprefix('option.')}={flat[r.dir].get(k, '-')}" for k in short]
            if not shown:  # only long texts differ (a prompt template): name them, by a digest of the value
                shown = [f"{k.removeprefix('option.')} #{_digest(flat[r.dir].get(k, '-'))}" for k in differ]
            notes[r.dir] = shown
    return notes


LABEL_VALUE_CHARS = 40  # a setting whose value is longer (a prompt template) is named, never quoted


def _short(value: str) -> bool:
    """Whether a setting's value may stand in a row's label: one short line."""
    return len(value) <= LABEL_VALUE_CHARS and "\n" not in value


def _digest(value: str) -> str:
    import hashlib

    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:6]


def read_run(path: Path) -> Run:
    """The run in `path` (see `find_run`), with its metrics; DataError names what is missing."""
    run_dir = find_run(path)
    header = _read_object(run_dir / HEADER, HEADER_ADVICE)
    if not (run_dir / METRICS).exists():
        raise DataError(f"{run_dir} has no {METRICS}: the run never finished; rerun its `needlepoint eval` command to resume it")
    run = Run(run_dir, header, _read_object(run_dir / METRICS, METRICS_ADVICE))
    if run.benchmark not in names() or declaration(run.benchmark).leaderboard is None:
        with_board = ", ".join(n for n in names() if declaration(n).leaderboard)
        raise DataError(f"{run_dir / HEADER} names benchmark {run.benchmark!r}, which has no leaderboard; use {with_board}")
    return run


def layout(benchmark: str) -> Callable[[Sequence[Run]], list[Board]]:
    """The leaderboard layout a benchmark declares (`Declaration.leaderboard`)."""
    target = declaration(benchmark).leaderboard
    if target is None:
        raise DataError(f"benchmark {benchmark!r} declares no leaderboard layout")
    builder: Callable[[Sequence[Run]], list[Board]] = load_target(target)
    return builder


# --- boards --------------------------------------------------------------------------------------


def _add_published(board: Board, rows: Sequence[PublishedRow], notes: Sequence[str]) -> None:
    """Append published rows cell for cell: a column only they have becomes a label column (empty
    in the run rows); a board column they lack stays empty in theirs."""
    known = {*board.label_columns, *board.columns}
    extra = [c for c in dict.fromkeys(c for r in rows for c in r.cells) if c not in known]
    board.label_columns += extra
    for row in board.rows:
        row.labels = [*row.labels, *[""] * len(extra)]  # a new list: MM-NIAH's two boards share one run's labels
    for p in rows:
        labels = [p.cells.get(c, "") for c in board.label_columns]
        values = [p.cells.get(c) or None for c in board.columns]
        board.rows.append(BoardRow(labels, values, f"published: {p.source}", published=True))
    board.note = " ".join([board.note, *notes]).strip()


def _label_configurations(board: Board, notes: dict[Path, list[str]]) -> None:
    """Append to a run row's first label the settings that tell its configuration from another
    run's of the same model, leaving out those the row's other labels already show."""
    for row in board.rows:
        shown = set(row.labels[1:])
        extra = [n for n in notes.get(Path(row.source), []) if n.split("=", 1)[-1] not in shown]
        if extra and row.labels:
            row.labels = [f"{row.labels[0]} [{', '.join(extra)}]", *row.labels[1:]]


REPEAT_FOLDER = re.compile(r"repeat-\d+")
REPEATS_FILE = "repeats.json"  # run/repeats.py writes it (report sits below run/: the name, not the import)


def repeat_series(runs: Sequence[Run]) -> dict[Path, list[Run]]:
    """The runs of `eval --repeats K` among `runs`, by their series folder (OUT, the one holding
    repeats.json and repeat-<r>/), each series with two or more of its repeats."""
    series: dict[Path, list[Run]] = {}
    for run in runs:
        if REPEAT_FOLDER.fullmatch(run.dir.name) and (run.dir.parent / REPEATS_FILE).is_file():
            series.setdefault(run.dir.parent, []).append(run)
    return {k: v for k, v in series.items() if len(v) > 1}


def add_repeat_means(board: Board, runs: Sequence[Run]) -> None:
    """After the rows of the K runs of one `--repeats` series, a row "MODEL (mean ± sd over K
    seeds)": per column the mean of the repeats' values and their standard deviation (one per
    row of the layout, e.g. MC-Bench's official and corrected); a cell any repeat lacks is empty."""
    for folder, members in repeat_series(runs).items():
        sources = {str(r.dir) for r in members}
        groups: dict[tuple[str, ...], list[BoardRow]] = {}
        for row in board.rows:
            if row.source in sources and not row.published:
                groups.setdefault(tuple(row.labels[1:]), []).append(row)
        incomplete = " (incomplete)" if any(progress_mark(r) for r in members) else ""
        for rest, rows in groups.items():
            if len(rows) < 2:
                continue
            means: list[Cell] = []
            sds: list[float | None] = []
            for i, column in enumerate(board.columns):
                cells = [float(v) for r in rows if i < len(r.values) and _plain_number(v := r.values[i])]
                whole = len(cells) == len(rows)
                means.append(statistics.fmean(cells) if whole else None)
                sds.append(statistics.stdev(cells) if whole and column not in board.counts else None)
            label = f"{members[0].model} (mean ± sd over {len(rows)} seeds){incomplete}"
            board.rows.append(BoardRow([label, *rest], means, str(folder), sds=sds))


def _plain_number(value: Cell) -> TypeGuard[float | int]:
    return isinstance(value, int | float) and not isinstance(value, (bool, Corrupt)) and math.isfinite(value)


def build_boards(runs: Sequence[Run], with_published: bool = False, usage: bool = False) -> list[Board]:
    """The leaderboards of these runs, in registry order, in each benchmark's declared layout
    (MM-NIAH: by range and by task), each with every published row of the benchmark added when `with_published`;
    with `usage`, a board per benchmark of what each run used (tokens, requests, time, cost: usage.usage_board)."""
    boards: list[Board] = []
    for benchmark in names():
        mine = [r for r in runs if r.benchmark == benchmark]
        if not mine:
            continue
        published = published_rows(benchmark) if with_published else []
        notes = configuration_notes(mine)
        for board in layout(benchmark)(mine):
            add_repeat_means(board, mine)  # before the labels name each repeat's seed
            _label_configurations(board, notes)
            add_human_mean(board, mine)
            if published:
                rows = board.lay_published(published) if board.lay_published else published
                _add_published(board, rows, published_notes(benchmark))
            rank_rows(board)  # published rows among the runs, by the headline column
            boards.append(board)
        boards += human_boards(benchmark, mine, with_published)  # annotators, their agreement (report/agreement.py)
        used = usage_board(benchmark, mine) if usage else None  # a board of its own, never columns of the scores
        if used is not None:
            _label_configurations(used, notes)
            boards.append(used)
    return boards


# --- outputs -------------------------------------------------------------------------------------


def print_boards(boards: Sequence[Board]) -> None:
    """The boards as rich tables on stdout (published rows dimmed, with their source)."""
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    for b in boards:
        t = RichTable(title=b.title, title_justify="left")
        for c in b.label_columns:
            t.add_column(c, justify="left")
        for c in b.columns:
            t.add_column(c, justify="right")
        with_published = any(r.published for r in b.rows)
        if with_published:
            t.add_column("source", justify="left")
        for row, cells in zip(b.rows, b.display_rows()):
            t.add_row(*(cells if with_published else cells[:-1]), style="dim italic" if row.published else None)
        console.print(t)
        if b.interval_note:
            console.print(f"[dim]{b.interval_note}[/dim]")
        if with_published:
            console.print("[dim]italic rows: published numbers from the papers; empty cells: not published[/dim]")


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(boards: Sequence[Board]) -> str:
    """All boards as Markdown tables."""
    out = ["# Leaderboard", ""]
    for b in boards:
        out += [f"## {b.title}", ""]
        if b.note:
            out += [b.note, ""]
        if b.interval_note:
            out += [b.interval_note, ""]
        out.append("| " + " | ".join(_md_cell(c) for c in b.header) + " |")
        out.append("|" + "|".join("---" if i < len(b.label_columns) else "---:" for i in range(len(b.header) - 1)) + "|---|")
        for row, cells in zip(b.rows, b.display_rows()):
            shown = [f"*{c}*" if row.published and c else c for c in cells[:-1]] + [cells[-1]]
            out.append("| " + " | ".join(_md_cell(c) for c in shown) + " |")
        out.append("")
    return "\n".join(out)


def _csv_value(value: Cell) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else repr(value)


def csv_text(board: Board) -> str:
    """One board as CSV: unrounded values (percentages as 100 x the stored rate), for tools."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(board.header)
    for r in board.rows:
        w.writerow([*r.labels, *(_csv_value(v) for v in r.values), r.source])
    return buf.getvalue()


def html_page(boards: Sequence[Board]) -> str:
    """All boards as one offline HTML page (cells escaped; click a header to sort)."""
    parts = ['<header class="top"><h1>needlepoint leaderboard</h1></header><main>']
    for b in boards:
        parts.append(f"<h2>{esc(b.title)}</h2>")
        if b.note:
            parts.append(f'<p class="note">{esc(b.note)}</p>')
        if b.interval_note:
            parts.append(f'<p class="note ci">{esc(b.interval_note)}</p>')
        head = "".join(f"<th>{esc(c)}</th>" for c in b.header)
        body = []
        for row, cells in zip(b.rows, b.display_rows()):
            tds = [f"<td>{esc(c)}</td>" for c in cells[: len(b.label_columns)]]
            tds += [f'<td class="num">{esc(c)}</td>' for c in cells[len(b.label_columns) : -1]]
            tds.append(f'<td class="note">{esc(cells[-1])}</td>')
            body.append(f"<tr{' class=published' if row.published else ''}>{''.join(tds)}</tr>")
        parts.append(f'<table class="board"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')
        if any(r.published for r in b.rows):
            parts.append('<p class="note">Italic rows: published numbers from the papers; empty cells are not published.</p>')
    parts.append("</main>")
    return page("needlepoint leaderboard", "\n".join(parts), [BOARD_JS])


def write_leaderboard(boards: Sequence[Board], out: Path) -> list[Path]:
    """Write leaderboard.md and leaderboard.html (all boards) and leaderboard_<board>.csv per board
    into `out`; return the paths."""
    out = Path(out)
    md = write_atomic(out / "leaderboard.md", markdown(boards))
    csvs = [write_atomic(out / f"leaderboard_{b.key}.csv", csv_text(b)) for b in boards]
    return [md, *csvs, write_atomic(out / "leaderboard.html", html_page(boards))]


def redraw_advice(run: Run, level: float) -> str:
    """A command that stores intervals at `level` in this run's metrics.json. A rescored published
    file: `needlepoint score` with `--out` the run folder (it rewrites its own folder); a model run:
    its `needlepoint eval` command again with `--out` the folder and the level (every sample is
    answered, so it sends nothing and rescores). `score` without `--out` only prints."""
    source = obj(run.header.get("source"))
    data = run.config.get("data")
    with_data = f" --data {shlex.quote(str(data))}" if data else ""
    if source.get("kind") == "published" and source.get("file"):
        predictions = Path(str(source["file"]))
        label = f" --label {shlex.quote(run.model.removeprefix('published:'))}"
        return (
            f"`needlepoint score {run.benchmark} --predictions {shlex.quote(str(predictions))}{with_data}"
            f" --out {shlex.quote(str(run.dir))}{label} --ci-level {level}` stores them at {level}"
        )
    return (
        f"rerun the run's `needlepoint eval {run.benchmark} ...` command with `--out {shlex.quote(str(run.dir))} "
        f"--ci-level {level}` (every sample is answered: it rescores and sends nothing) to store them at {level}, "
        f"or show these with `report --ci-level {obj(run.metrics.get('intervals')).get('level')}`"
    )


def _keep_intervals(runs: Sequence[Run], level: float, off: bool) -> None:
    """Drop the stored intervals (metrics.json's `intervals`) that the boards must not show: all of
    them with --no-ci, and those of another level than --ci-level (said on stderr with a command
    that stores them at that level: `redraw_advice`)."""
    for run in runs:
        block = run.metrics.get("intervals")
        if not isinstance(block, dict):
            continue
        if not off and block.get("level") != level:
            print(
                f"{run.dir}: its intervals are at level {block.get('level')}, not {level}; shown without them. "
                + redraw_advice(run, level),
                file=sys.stderr,
            )
        if off or block.get("level") != level:
            run.metrics = {k: v for k, v in run.metrics.items() if k != "intervals"}


def main(ns: Namespace) -> int:
    """`needlepoint report`: read the runs, print the boards, write them to --out."""
    level = getattr(ns, "ci_level", DEFAULT_LEVEL)
    CiSettings(level=level)  # DataError for a level outside (0, 1), as eval and score say it
    runs: list[Run] = []
    seen: set[Path] = set()
    skipped: list[str] = []
    for p in ns.runs:
        found, left_out = discover(Path(p))
        skipped += left_out
        for run_dir in found:
            try:
                run = read_run(run_dir)
            except DataError as exc:
                if len(found) == 1 and not left_out and Path(p) == run_dir:
                    raise
                skipped.append(f"{run_dir}: {exc}")
                continue
            if run.dir.resolve() not in seen:
                seen.add(run.dir.resolve())
                runs.append(run)
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    if not runs:
        raise DataError(
            f"no finished run found in {', '.join(map(str, ns.runs))}; pass run folders written by `needlepoint eval`"
        )
    incomplete = [r for r in runs if progress_mark(r)]
    _keep_intervals(runs, level, getattr(ns, "no_ci", False))
    patterns = getattr(ns, "rows", None) or []
    boards = build_boards(runs, with_published=ns.with_published or bool(patterns), usage=bool(getattr(ns, "usage", False)))
    for board in boards:
        select_rows(board, patterns)
    fmt = getattr(ns, "format", None)
    if fmt:  # the papers' layouts on stdout (report/formats.py); files only when --out is given
        print(render(boards, fmt, {str(r.dir): r.metrics for r in runs}), end="")
    else:
        print_boards(boards)
    paths = write_leaderboard(boards, ns.out or DEFAULT_OUT) if ns.out or not fmt else []
    for run in incomplete:
        print(f"incomplete run {run.dir}: {progress_mark(run)}; its numbers cover the answered samples only", file=sys.stderr)
    if paths:
        print(f"leaderboard written: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0
