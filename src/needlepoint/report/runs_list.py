"""The rows of `needlepoint runs [DIR]` (its parser is report/cli.py's): every run folder below a
folder, one line each: benchmark, model, solver, configuration, status, answered/failed, when, and
the headline number (the column the benchmark's leaderboard ranks by). The HTML index
(report/index.py) lists and filters the same rows (`runs_html`)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlepoint.contract.boards import Run, count, obj
from needlepoint.core.errors import DataError
from needlepoint.core.jsonl import read_object
from needlepoint.core.store import HEADER, METRICS

__all__ = ["RUNS_JS", "RunRow", "find_runs", "headline", "print_runs", "run_row", "runs_html"]

FILE_BYTES = 256 << 20


@dataclass
class RunRow:
    """One run as `needlepoint runs` lists it."""

    path: str
    benchmark: str
    model: str
    solver: str
    configuration: str
    status: str
    answered: int | None
    failed: int | None
    samples: int | None
    when: str
    headline_metric: str
    headline: float | None


def headline(run: Run) -> tuple[str, float | None]:
    """(column, value in percent) of the run's first leaderboard row under the board's headline
    column; ("", None) when the benchmark has no leaderboard or the run no metrics."""
    from needlepoint.report.leaderboard import layout

    if not run.metrics:
        return "", None
    try:
        boards = layout(run.benchmark)([run])
    except DataError:
        return "", None
    for board in boards:
        if board.headline in board.columns and board.rows:
            value = board.rows[0].values[board.columns.index(board.headline)]
            number = value if isinstance(value, (int, float)) and value == value and abs(value) != float("inf") else None
            return board.headline, number
    return "", None


def run_row(run_dir: Path, root: Path) -> RunRow:
    """One run folder as `needlepoint runs` lists it (its path shown relative to `root`)."""
    header = read_object(run_dir / HEADER, "move the folder aside", FILE_BYTES)
    metrics = read_object(run_dir / METRICS, "rescore the run", FILE_BYTES) if (run_dir / METRICS).is_file() else {}
    run = Run(run_dir, header, metrics)
    block = obj(metrics.get("run"))
    answered, failed, samples = (count(block.get(k)) for k in ("answered", "failed", "samples"))
    metric, value = headline(run)
    options = ", ".join(f"{k}={v}" for k, v in sorted(run.options.items()) if v is not None)
    configuration = str(header.get("hash") or "")[:8] + (f" ({options})" if options else "")
    try:
        shown = str(run_dir.relative_to(root)) or "."
    except ValueError:
        shown = str(run_dir)
    return RunRow(
        path=shown,
        benchmark=run.benchmark,
        model=run.model,
        solver=str(run.config.get("solver") or "default"),
        configuration=configuration,
        status=str(header.get("status") or "unknown"),
        answered=answered if isinstance(answered, int) else None,
        failed=failed if isinstance(failed, int) else None,
        samples=samples if isinstance(samples, int) else None,
        when=str(header.get("finished") or header.get("last_started") or header.get("created") or ""),
        headline_metric=metric,
        headline=value,
    )


def find_runs(root: Path) -> tuple[list[RunRow], list[str]]:
    """Every run folder below `root` (itself included), newest first; and one line per folder
    that holds a run.json but could not be read, saying why."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root} is not a folder; pass a folder that holds run folders (default: runs)")
    rows: list[RunRow] = []
    skipped: list[str] = []
    for folder, subdirs, files in os.walk(root):
        subdirs.sort()
        if HEADER not in files:
            continue
        subdirs[:] = []  # a run's own subfolders (report/, heatmaps/) hold no runs
        try:
            rows.append(run_row(Path(folder), root))
        except DataError as exc:
            skipped.append(f"{folder}: {exc}")
    rows.sort(key=lambda r: r.when, reverse=True)
    return rows, skipped


def _cells(row: RunRow) -> list[str]:
    done = "" if row.answered is None else f"{row.answered}/{row.samples}" + (f", {row.failed} failed" if row.failed else "")
    value = "" if row.headline is None else f"{row.headline_metric} {row.headline:.1f}"
    return [row.benchmark, row.model, row.solver, row.configuration, row.status, done, row.when, value, row.path]


COLUMNS = ["benchmark", "model", "solver", "configuration", "status", "answered", "when", "headline", "folder"]


def print_runs(rows: list[RunRow], title: str) -> None:
    """The runs as a table on stdout (220 columns wide when stdout is no terminal)."""
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=220)
    table = Table(title=title, title_justify="left")
    for c in COLUMNS:
        table.add_column(c, justify="right" if c in ("answered", "headline") else "left")
    for r in rows:
        table.add_row(*_cells(r))
    console.print(table)


def runs_html(rows: list[RunRow], link: Any = None) -> str:
    """The runs as an HTML table with a text filter and a benchmark and a status choice
    (report/assets.py's RUNS_JS filters it in the page); `link(row)` gives a row's report href or ''."""
    from needlepoint.report.html import esc

    def options(values: list[str]) -> str:
        return "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in sorted(set(values)))

    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
    body = []
    for r in rows:
        cells = _cells(r)
        href = link(r) if link else ""
        if href:
            cells_html = [esc(c) for c in cells[:-1]] + [f'<a href="{esc(href)}">{esc(cells[-1])}</a>']
        else:
            cells_html = [esc(c) for c in cells]
        tds = "".join(f"<td>{c}</td>" for c in cells_html)
        body.append(
            f'<tr data-benchmark="{esc(r.benchmark)}" data-status="{esc(r.status)}" '
            f'data-text="{esc(" ".join(cells).lower())}">{tds}</tr>'
        )
    return (
        '<section class="runs-list"><h2>Runs</h2><div class="filters">'
        '<input id="runs-filter" type="search" placeholder="filter: model, solver, configuration..." aria-label="filter runs">'
        f'<select id="runs-benchmark" aria-label="benchmark"><option value="">every benchmark</option>{options([r.benchmark for r in rows])}</select>'
        f'<select id="runs-status" aria-label="status"><option value="">every status</option>{options([r.status for r in rows])}</select>'
        f' <span id="runs-count">{len(rows)} run(s)</span></div>'
        f'<table class="board" id="runs-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></section>'
    )


RUNS_JS = """
(function () {
  var text = document.getElementById('runs-filter');
  var bench = document.getElementById('runs-benchmark');
  var state = document.getElementById('runs-status');
  var shown = document.getElementById('runs-count');
  if (!text) return;
  function apply() {
    var q = text.value.toLowerCase().trim(), n = 0;
    document.querySelectorAll('#runs-table tbody tr').forEach(function (tr) {
      var ok = (!q || tr.dataset.text.indexOf(q) >= 0) &&
        (!bench.value || tr.dataset.benchmark === bench.value) &&
        (!state.value || tr.dataset.status === state.value);
      tr.style.display = ok ? '' : 'none';
      if (ok) n += 1;
    });
    shown.textContent = n + ' run(s)';
  }
  [text, bench, state].forEach(function (el) { el.addEventListener('input', apply); el.addEventListener('change', apply); });
})();
"""
