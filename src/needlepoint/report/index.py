"""The demo's index page (`<out>/report/index.html`), and `needlepoint runs FOLDER --html`'s
(`FOLDER/index.html`): each run's headline table, linking to its own report. Its own module because it reads runs as the leaderboard does and writes HTML as the
run report does, while those two modules stay independent of each other (leaderboard -> html)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from needlepoint.contract.registry import make
from needlepoint.core.errors import DataError
from needlepoint.core.files import write_atomic
from needlepoint.core.outcome import has_metrics
from needlepoint.report.html import HEATMAPS_DIR, REPORT_DIR, bench_title, esc, href, page, table_html
from needlepoint.report.leaderboard import read_run

__all__ = ["write_index"]


def write_index(out: Path, run_dirs: Sequence[Path], path: Path | None = None, title: str = "needlepoint report") -> Path:
    """The index page (`path`, by default `out/report/index.html`): every run's headline numbers,
    linking to its own report; rows show run folders relative to `out`."""
    out = Path(out)
    heading = title
    target = Path(path) if path is not None else out / REPORT_DIR / "index.html"
    report_dir = target.parent
    report_dir.mkdir(parents=True, exist_ok=True)
    blocks = []
    for run_dir in run_dirs:
        try:
            run = read_run(Path(run_dir))
        except DataError as exc:  # e.g. a run that never finished: listed below, without a block of numbers
            blocks.append(f'<section class="run"><h2>{esc(Path(run_dir).name)}</h2><div class="note">{esc(exc)}</div></section>')
            continue
        try:
            bench = make(run.benchmark, **run.options)
        except DataError:  # e.g. a --prompt-file that has moved since; the tables do not need it
            bench = make(run.benchmark)
        tables = bench.tables(run.metrics) if has_metrics(run.metrics) else []  # nothing answered: no metrics
        title = bench_title(run.benchmark)
        own = run.dir / REPORT_DIR / "index.html"
        link = f'<a href="{esc(href(own, report_dir))}">open the {esc(title)} report</a>' if own.exists() else ""
        heat = run.dir / REPORT_DIR / HEATMAPS_DIR / "overall.png"
        if not heat.exists():
            heat = run.dir / HEATMAPS_DIR / "overall.png"
        image = (
            f'<img class="heat" src="{esc(href(heat, report_dir))}" alt="overall heatmap" loading="lazy">'
            if heat.exists()
            else ""
        )
        blocks.append(
            f'<section class="run"><h2>{esc(title)} · {esc(run.model)}</h2>'
            f'<div class="note">{esc(run.dir)} · {esc(run.header.get("status", ""))}</div>'
            f"<p>{link}</p>{table_html(tables[0]) if tables else ''}{image}</section>"
        )
    from needlepoint.report.runs_list import RUNS_JS, run_row, runs_html

    listed = runs_html(  # every run in one filterable list, as `needlepoint runs` prints them
        [run_row(Path(d), out) for d in run_dirs],
        lambda r: (
            href(out / r.path / REPORT_DIR / "index.html", report_dir)
            if (out / r.path / REPORT_DIR / "index.html").exists()
            else ""
        ),
    )
    body = (
        f'<header class="top"><h1>{esc(heading)}</h1>'
        f'<div class="sub">{len(blocks)} run(s)</div></header>\n<main>{listed}<div class="runs">{"".join(blocks)}</div></main>'
    )
    return write_atomic(target, page(heading, body, [RUNS_JS]))
