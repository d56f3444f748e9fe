"""The static HTML report of a run (`<run>/report/index.html`) and the demo's index page.

One self-contained page per run that works offline: the run's configuration (secrets removed),
the metric tables, MM-NIAH's heatmaps, and a sample browser. The samples travel as one JSON blob
in a `<script type="application/json">` element and are rendered in pages of 50 by a small inline
script that writes text with `textContent` only. Images become thumbnails under `report/thumbs/`
(`report.thumbs`: JPEG at the size the page shows, at most 10 KB), written once and loaded
lazily, with the boxes laid over them as SVG by the script, so a report of thousands of samples
opens at once. At a run's end an image not drafted by then that is a file of its own is shown from
that file (`Thumbnails.links`). What the model saw is shown with long texts cut to their ends (a
long document is most of the page otherwise; records.jsonl holds it whole).

Everything shown is escaped: `html.escape` in the page, `textContent` in the script, and `<`, `>`
and `&` written as `\\u003c`-style escapes inside the JSON blob. A Content-Security-Policy allows
only the page's own script (by hash) and no network at all.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from needlepoint.contract.base import Benchmark, Dataset, ReportItem, Table, format_cell
from needlepoint.contract.coverage import run_counts
from needlepoint.contract.declaration import Declaration
from needlepoint.core.errors import DataError
from needlepoint.core.files import AtomicFile, json_line, write_atomic
from needlepoint.core.numeric import is_number
from needlepoint.core.pngstrips import read_header
from needlepoint.core.records import Record
from needlepoint.core.redact import is_credential_name, redact_url, scrub, scrub_args
from needlepoint.report.assets import CSS, JS
from needlepoint.report.rows import ROWS_DIR, Place, Placed, Row, fill, make_row, read_rows, record_mark, script_json
from needlepoint.report.thumbs import (
    GT_COLOUR,
    PRED_COLOUR,
    Size,
    Thumbnails,
    box_colour,
    end_budget,
    file_name,
    relative_url,
)
from needlepoint.stats.tables import with_intervals

__all__ = ["bench_title", "public_config", "write_run_report"]

REPORT_DIR = "report"
THUMBS_DIR = "thumbs"
HEATMAPS_DIR = "heatmaps"
PAGE_SIZE = 50
LEGEND_GREY = "#59636e"
NO_SCRIPT = "'none'"


def _declared(benchmark: str) -> Declaration | None:
    """The benchmark's declaration, or None for a run of a benchmark no longer registered."""
    from needlepoint.contract.registry import declaration

    try:
        return declaration(benchmark)
    except DataError:
        return None


def bench_title(benchmark: str) -> str:
    """How pages name a benchmark: its declared title (the raw name when it is not registered)."""
    found = _declared(benchmark)
    return found.title if found is not None else benchmark


# --- small helpers -------------------------------------------------------------------------------


def esc(value: Any) -> str:
    """Text for HTML content or a quoted attribute."""
    return html.escape(str(value), quote=True)


def _obj(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (run files are read, not trusted)."""
    return value if isinstance(value, dict) else {}


def table_html(table: Table, cls: str = "metrics") -> str:
    """A Table as an HTML table (every cell escaped)."""
    head = "".join(f"<th>{esc(c)}</th>" for c in table.columns)
    rows = []
    for row in table.rows:
        cells = "".join(
            f'<td class="num">{esc(format_cell(v))}</td>' if is_number(v) or v is None else f"<td>{esc(format_cell(v))}</td>"
            for v in row
        )
        rows.append(f"<tr>{cells}</tr>")
    return (
        f'<h3>{esc(table.title)}</h3>\n<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _csp(scripts: Sequence[str]) -> str:
    hashes = " ".join("'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'" for s in scripts)
    return (
        "default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'; "
        f"script-src {hashes or NO_SCRIPT}; base-uri 'none'; form-action 'none'"
    )


def page(title: str, body: str, scripts: Sequence[str] = (), data: Any = None, digest: str = "", data_text: str = "") -> str:
    """A complete HTML page: inline CSS, an optional JSON blob (#np-data: `data`, or its text
    `data_text` as `script_json` writes it), inline scripts; `digest` names what the page was
    written from (see `report_digest`)."""
    text = data_text or (script_json(data) if data is not None else "")
    blob = f'<script type="application/json" id="np-data">{text}</script>\n' if text else ""
    code = "".join(f"<script>{s}</script>\n" for s in scripts)
    mark = f'<meta name="{DIGEST_META}" content="{esc(digest)}">\n' if digest else ""
    return (
        f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n{mark}'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(_csp(scripts))}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}\n{blob}{code}</body>\n</html>\n"
    )


def href(target: Path, start: Path) -> str:
    """A relative URL from folder `start` to `target` (percent-encoded)."""
    return relative_url(target, start)


# --- configuration without secrets ---------------------------------------------------------------


def _scrub(value: Any, key: str = "") -> Any:
    if key and is_credential_name(key):  # the one credential rule (redact.py)
        return "[redacted]"
    if isinstance(value, dict):
        return {k: _scrub(v, str(k)) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [_scrub(v, key) for v in scrub_args(value)]  # a command line: `--api-key X` too
    if isinstance(value, list):
        return [_scrub(v, key) for v in value]
    if isinstance(value, str) and "://" in value and " " not in value.strip():
        return redact_url(value)
    if isinstance(value, str):
        return scrub(value)
    return value


def public_config(header: Mapping[str, Any]) -> dict[str, Any]:
    """The run header as a report may show it: no key-like fields, URLs without credentials."""
    scrubbed: dict[str, Any] = _scrub(dict(header))
    return scrubbed


# --- the run report ------------------------------------------------------------------------------


def _natural(values: Sequence[str]) -> list[str]:
    def key(v: str) -> tuple[float, int, str]:
        m = re.search(r"\d+", v)
        rank = 0 if v.startswith("<") else 2 if v.startswith(">") else 1
        return (int(m.group()) if m else float("inf"), rank, v)

    return sorted(values, key=key) if all(re.search(r"\d", v) for v in values) else sorted(values)


def filter_options(counts: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    """The sample pages' filter selects: per key with more than one value, each value (in natural
    order: "2-3" before "10") with its count."""
    return [{"key": k, "values": [[v, c[v]] for v in _natural(list(c))]} for k, c in counts.items() if len(c) > 1]


class Places:
    """Where the page shows each image from (`rows.fill`): the image's own file when this report
    links it (`links`) or a draft's row does (`Row.links`, when no thumbnail exists), else its
    thumbnail (`sizes`: the image's size by key, None when it has none), else nowhere (and, when
    the key is in `undrawn`, marked as left for a later report)."""

    def __init__(
        self, sizes: Mapping[str, Size | None], links: Mapping[str, str] | None = None, undrawn: Collection[str] = ()
    ) -> None:
        self.sizes, self.links, self.undrawn = sizes, links or {}, undrawn
        self.linked = False  # some image is shown from its own file (the page's digest says so: LINKED)

    def __call__(self, key: str, own: str, own_size: Size) -> Placed:
        size = self.sizes.get(key)
        if size is not None:
            if (url := self.links.get(key)) is not None:
                self.linked = True
                return script_json(url), size, False
            return f'"{THUMBS_DIR}/{file_name(key, size)}"', size, False  # a key and two numbers: nothing to escape
        if own:
            self.linked = True
            return own, own_size, False
        return '""', (0, 0), key in self.undrawn


def sample_json(bench_name: str, rows: Sequence[Row], places: Place, is_grouped: bool) -> tuple[list[str], dict[str, Any]]:
    """The JSON text the page's script renders (`script_json`; short keys: 2,000 samples stay a
    few MB at most), in pieces to write one after the other (a large run's page is never held
    whole): each row filled (`rows.fill`: its images where `places` puts them, its boxes
    coloured by group when `is_grouped`); and the blob's other keys (`failed`, `undrawn`, ...)."""
    summary = _Summary()
    pieces = ['{"items":[']
    for row in rows:
        text, undrawn = fill(row, places, is_grouped)
        pieces += (",", text) if len(pieces) > 1 else (text,)
        summary.add(row, undrawn)
    head = summary.head(bench_name)
    pieces.append("]," + script_json(head)[1:])
    return pieces, head


class _Summary:
    """What the blob says besides its rows, gathered as they are filled."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}
        self.failed = 0
        self.undrawn = 0
        self.sorted = False

    def add(self, row: Row, undrawn: int) -> None:
        for k, v in row.filters.items():
            values = self.counts.setdefault(k, {})
            values[v] = values.get(v, 0) + 1
        self.failed += row.failed
        self.undrawn += undrawn
        self.sorted = self.sorted or row.sorted

    def head(self, bench_name: str) -> dict[str, Any]:
        declared = _declared(bench_name) or Declaration(bench_name, bench_name, "")  # the declared labels, or the defaults
        return {
            "failed": self.failed,
            "undrawn": self.undrawn,
            "filters": filter_options(self.counts),
            "sort_label": declared.sort_label if self.sorted else None,
            "prompt_label": declared.prompt_label,
            "page_size": PAGE_SIZE,
        }


def _swatch(colour: str, dashed: bool, text: str) -> str:
    cls = "sw dashed" if dashed else "sw"
    return f'<span><span class="{cls}" style="border-color:{colour}"></span>{esc(text)}</span>'


def _legend(rows: Sequence[Row], grouped: bool) -> str:
    """What the box colours and line styles mean, from the boxes the rows' images actually hold."""
    boxes = {b for row in rows for b in row.boxes}
    if not boxes:
        return ""
    kinds = {kind for kind, _, _ in boxes}
    if grouped:
        groups = sorted({group for _, group, _ in boxes})
        parts = [_swatch(box_colour("gt", g, True), False, f"group {g}") for g in groups]
        if "gt" in kinds:
            parts.append(_swatch(LEGEND_GREY, False, "solid: ground truth"))
        if "pred" in kinds:
            parts.append(_swatch(LEGEND_GREY, True, "dashed: prediction"))
    else:
        parts = [_swatch(GT_COLOUR, False, "ground truth")] if "gt" in kinds else []
        if "pred" in kinds:
            labels = {label for kind, _, label in boxes if kind == "pred"}
            label = labels.pop() if len(labels) == 1 else ""
            parts.append(_swatch(PRED_COLOUR, True, f"prediction ({label})" if label else "prediction"))
    return '<div class="legend">' + "".join(parts) + "</div>"


def _endpoints_table(head: dict[str, Any]) -> str:
    """Requests and errors per endpoint (summed over resumed sessions and merged shards)."""
    rows = [e for e in head.get("endpoints") or [] if isinstance(e, dict)]
    if not rows:
        return ""
    table = Table("Requests per endpoint", ["endpoint", "weight", "requests", "errors"])
    table.rows = [[e.get("url"), e.get("weight"), e.get("requests"), e.get("errors")] for e in rows]
    shards = [m.get("shard") for m in head.get("merged_from") or [] if isinstance(m, dict)]
    note = f'<p class="note">merged from shards {esc(", ".join(map(str, shards)))}</p>\n' if shards else ""
    return table_html(table) + "\n" + note


def _config_section(header: Mapping[str, Any], metrics: dict[str, Any]) -> str:
    head = public_config(header)
    config = _obj(head.get("config"))
    rows: list[tuple[str, Any]] = [
        ("benchmark", config.get("benchmark")),
        ("model", config.get("model")),
        ("status", head.get("status")),
        ("created", head.get("created")),
        ("finished", head.get("finished")),
        ("run hash", head.get("hash")),
        ("needlepoint", head.get("needlepoint")),
    ]
    for k, v in config.items():
        if k in ("benchmark", "model"):
            continue
        if k == "options":
            v = own_options(str(config.get("benchmark") or ""), _obj(v))
        rows.append((k, v))
    counts = run_counts(metrics)
    if counts is not None:
        answered, failed, requested, total = counts
        text = f"{answered} answered / {requested} requested ({failed} failed)"
        rows.append(("samples", text + (f"; {total - requested} of {total} not requested" if total > requested else "")))
    cells = []
    for k, v in rows:
        if v is None or v == {} or v == []:
            continue
        text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        cells.append(f"<div><dt>{esc(k)}</dt><dd>{esc(text)}</dd></div>")
    ident = json.dumps(_obj(head.get("identity")), indent=2, ensure_ascii=False)
    return (
        '<h2 id="config">Configuration</h2>\n<dl class="config">'
        + "".join(cells)
        + "</dl>\n"
        + _endpoints_table(head)
        + _usage_html(metrics, head.get("wall_s"))
        + f'<details><summary>run identity (what must match for a run to resume)</summary><pre class="json">{esc(ident)}</pre></details>'
    )


def _usage_html(metrics: dict[str, Any], wall_s: Any) -> str:
    """The tokens, time and cost of the run (metrics.json's usage block, usage.usage_table)."""
    from needlepoint.contract.usage import usage_table

    table = usage_table(metrics.get("usage"), wall_s)
    return table_html(table) + "\n" if table is not None else ""


def own_options(benchmark: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options a run set that belong to its benchmark (those its class takes), without unset ones."""
    import inspect

    from needlepoint.contract.registry import benchmark_class

    try:
        accepted = set(inspect.signature(benchmark_class(benchmark)).parameters)
    except DataError:
        accepted = set(options)
    return {k: v for k, v in options.items() if k in accepted and v is not None and v is not False}


def _heatmap_order(name: str, order: Sequence[str]) -> tuple[int, str]:
    return (0 if name == "overall" else 1 + (order.index(name) if name in order else len(order)), name)


def copy_heatmaps(run_dir: Path, report_dir: Path, order: Sequence[str] = ()) -> list[Path]:
    """The run's heatmaps (PNG and SVG, whatever `<run>/heatmaps/` holds) copied beside the report;
    the PNGs, "overall" first, then those named in `order`, then the rest by name."""
    source = run_dir / HEATMAPS_DIR
    if not source.is_dir():
        return []
    target = report_dir / HEATMAPS_DIR
    target.mkdir(parents=True, exist_ok=True)
    pngs = []
    for path in sorted(source.iterdir()):
        if path.suffix.lower() in (".png", ".svg") and path.is_file():
            copy = target / path.name
            if not _same_file(path, copy):  # a heatmap not redrawn since the last report stays as it is
                write_atomic(copy, path.read_bytes())
                stat = path.stat()
                os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # what _same_file compares
            if path.suffix.lower() == ".png":
                pngs.append(copy)
    return sorted(pngs, key=lambda p: _heatmap_order(p.stem, order))


def _same_file(source: Path, copy: Path) -> bool:
    """Whether `copy` is a copy of `source` as it is now (same size and modification time: copy2 keeps it)."""
    try:
        a, b = source.stat(), copy.stat()
    except OSError:
        return False
    return a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns


def _heatmap_section(pngs: Sequence[Path], report_dir: Path) -> str:
    if not pngs:
        return ""
    figs = []
    for p in pngs:
        cls = "main" if p.stem == "overall" else "small"
        svg = p.with_suffix(".svg")
        link = href(svg if svg.exists() else p, report_dir)
        with p.open("rb") as fh:
            head = read_header(fh)
        # its size reserves its place before it loads: a lazy image must not move the controls below it
        size = f' width="{head.width}" height="{head.height}"' if head is not None else ""
        figs.append(  # the caption above its plot: it names what the plot below shows
            f'<figure class="{cls}"><figcaption>{esc(p.stem)}</figcaption><a href="{esc(link)}">'
            f'<img src="{esc(href(p, report_dir))}" alt="heatmap {esc(p.stem)}"{size} loading="lazy"></a></figure>'
        )
    return '<h2 id="heatmaps">Heatmaps</h2>\n<p class="note">needle depth by context length; click for the SVG</p>\n' + (
        '<div class="heatmaps">' + "".join(figs) + "</div>"
    )


SAMPLES_HTML = """<h2 id="samples">Samples</h2>
<div class="controls">
<label><input type="checkbox" id="np-wrong"> wrong only</label>
<label><input type="checkbox" id="np-errors"> parse errors only</label>
<label{failed_hidden}><input type="checkbox" id="np-failed"> failed requests only ({failed})</label>
<span id="np-selects" style="display:contents"></span>
<label>search <input type="search" id="np-search" placeholder="prompt or answer text"></label>
<label>sort <select id="np-sort"><option value="run">run order</option></select></label>
</div>
<div class="countline"><span id="np-count" data-count="" data-total=""></span>{legend}</div>
<div class="pager"><button data-page="first">first</button><button data-page="prev">previous</button>
<span id="np-pageinfo"></span><button data-page="next">next</button><button data-page="last">last</button></div>
<div class="cards{compact}" id="np-cards"></div>
<div class="pager"><button data-page="prev" data-scroll="1">previous</button><span id="np-pageinfo2"></span>
<button data-page="next" data-scroll="1">next</button></div>
<noscript><p class="note">The sample browser needs JavaScript.</p></noscript>"""


def _samples_html(rows: Sequence[Row], grouped: bool, failed: int = 0, undrawn: int = 0) -> str:
    compact = "" if any(row.keys for row in rows) else " compact"
    html_text = SAMPLES_HTML.replace("{legend}", _legend(rows, grouped)).replace("{compact}", compact)
    html_text = html_text.replace("{failed_hidden}", "" if failed else " hidden").replace("{failed}", str(failed))
    if undrawn:  # a run's end that ran out of its time for thumbnails (thumbs.end_budget)
        note = (
            f'<p class="note">{undrawn:,} thumbnails were not drawn by the end of the run; '
            "the same <code>needlepoint eval</code> command run again draws them (it asks nothing again).</p>\n"
        )
        html_text = html_text.replace('<div class="controls">', note + '<div class="controls">', 1)
    return html_text


def write_run_report(
    run_dir: Path,
    bench: Benchmark,
    samples: Dataset[Any],
    records: Sequence[Record],
    metrics: dict[str, Any],
    header: Mapping[str, Any],
    link_missing: bool = False,
) -> Path:
    """Write `<run>/report/index.html` (with thumbs/ and heatmaps/ beside it); return its path.

    What the page shows comes from the run: the benchmark's `report_items` (of the answered
    samples, `samples`, and their `records`) and `tables`, its declared title and labels, and the
    heatmaps when the run folder has any; so one page layout serves every benchmark. The
    thumbnails already in the folder (an earlier page's, the run's drafts) are kept; with
    `link_missing` (a run's end) a missing image that is a file of its own is shown from that
    file rather than drawn (`Thumbnails`), and the rows the run's drafts made (`report.rows`)
    are filled rather than made again (`_rows`)."""
    run_dir = Path(run_dir)
    report_dir = run_dir / REPORT_DIR
    report_dir.mkdir(parents=True, exist_ok=True)
    target = report_dir / "index.html"
    drafted = read_rows(report_dir / ROWS_DIR) if link_missing else {}  # read once: the folder goes
    shutil.rmtree(report_dir / ROWS_DIR, ignore_errors=True)
    lines = [json_line(r) for r in records]  # each record's line, made once: the digest's and the drafted rows' marks
    content = report_digest(bench.name, lines, metrics, header)
    # A finished run rerun: the page already shows these answers. A page of a run's end that links
    # images (LINKED) is current for a rerun's end, never for a report written otherwise (merge,
    # a human run), which draws them all; one that left thumbnails undrawn (UNDRAWN) is made again
    # by a rerun with nothing new to answer, drawing them all (no run is waiting on it).
    if is_current(target, with_files(content, run_dir)) or (
        link_missing and is_current(target, with_files(content + LINKED, run_dir))
    ):
        return target
    rerun = is_current(target, with_files(content + UNDRAWN, run_dir))
    budget = end_budget(len(records)) if link_missing and not rerun else None
    drawer = Thumbnails(report_dir / THUMBS_DIR, link_missing=link_missing, budget_s=budget)
    rows, items = _rows(bench, samples, records, lines, drafted, drawer)
    del lines
    is_grouped = any(row.grouped for row in rows)
    shown = drawer.finish(items, keep=[key for row in rows for key in row.keys])  # a drafted row's thumbnails stay
    places = Places({**drawer.listed(), **shown}, drawer.links, drawer.undrawn)
    del items, drafted  # a large run's cards: no longer needed while the page is written
    blob_pieces, blob = sample_json(bench.name, rows, places, is_grouped)
    samples_html, count = _samples_html(rows, is_grouped, blob["failed"], blob["undrawn"]), len(rows)
    del rows
    if blob["undrawn"]:
        print(
            f"report: {blob['undrawn']:,} thumbnails not drawn by the run's end (their cards say so); "
            "the same command run again draws them (it asks nothing again)",
            file=sys.stderr,
            flush=True,
        )

    title = bench_title(bench.name)
    model = run_label(header)
    metric_tables = bench.tables(metrics)
    tables = "\n".join(table_html(t) for t in with_intervals(metric_tables, metrics))
    # heatmaps named after the headline table's rows (MM-NIAH's tasks) keep that table's order
    row_names = [str(row[0]) for row in metric_tables[0].rows if row] if metric_tables else []
    heatmaps = _heatmap_section(copy_heatmaps(run_dir, report_dir, row_names), report_dir)
    nav = ['<a href="#config">configuration</a>', '<a href="#metrics">metrics</a>']
    if heatmaps:
        nav.append('<a href="#heatmaps">heatmaps</a>')
    nav.append('<a href="#samples">samples</a>')
    body = (
        f'<header class="top"><h1>{esc(title)} · {esc(model)}</h1>'
        f'<div class="sub">{esc(run_dir.name)} · {esc(header.get("status", ""))} · {count} samples</div>'
        f'<nav class="toc">{"".join(nav)}</nav></header>\n<main>\n'
        f"{_config_section(header, metrics)}\n"
        f'<h2 id="metrics">Metrics</h2>\n{tables}\n{heatmaps}\n'
        f"{samples_html}\n</main>"
    )
    marker = UNDRAWN if drawer.undrawn else LINKED if places.linked else ""
    digest = with_files(content + marker, run_dir)  # the thumbnails as this page shows them
    # The page around its JSON, which is written a piece at a time: a large run's page is never
    # held whole, nor encoded whole (docs/performance.md, the report's peak memory).
    head, tail = page(f"{title} · {model} · needlepoint", body, [JS], digest=digest, data_text=DATA_MARK).split(DATA_MARK)
    with AtomicFile(target, fsync=False) as fh:
        fh.write(head)
        for piece in blob_pieces:
            fh.write(piece)
        fh.write(tail)
    return target


def _rows(
    bench: Benchmark,
    samples: Dataset[Any],
    records: Sequence[Record],
    lines: Sequence[bytes],
    drafted: Mapping[str, Row],
    drawer: Thumbnails,
) -> tuple[list[Row], list[ReportItem]]:
    """The page's rows, in the order of `records` (`lines`: their `json_line`s): a drafted row
    where it was made from the record the run ended with and each of its images has a thumbnail
    (`Thumbnails.listed`) or a file to link; the others made here, from the benchmark's report
    items (returned: their thumbnails are still to be made)."""
    have = drawer.listed() if drafted else {}
    rows: dict[str, Row] = {}
    for record, line in zip(records, lines):
        row = drafted.get(str(record.get("id")))
        if (
            row is not None
            and row.record == record_mark(line)
            and all(key in have or own for key, own in zip(row.keys, row.links))
        ):
            rows[row.id] = row
    rest = [r for r in records if str(r.get("id")) not in rows]
    items = bench.report_items(samples, rest) if rest else []
    by_id = {str(r.get("id")): r for r in rest}
    for item in items:
        rows[str(item.id)] = make_row(item, by_id.get(str(item.id)))
    return [rows[i] for r in records if (i := str(r.get("id"))) in rows], items


def run_label(header: Mapping[str, Any]) -> str:
    """The model as the run page names it: the solver's label the leaderboard uses too (e.g.
    `m -RAG`, `m + detector (agentic)`), else the model asked for."""
    config, identity = _obj(header.get("config")), _obj(header.get("identity"))
    return str(header.get("model_label") or config.get("model") or identity.get("model") or "")


DIGEST_META = "needlepoint-report-digest"
DATA_MARK = "\0np-data\0"  # where the page's JSON goes (no JSON text holds a NUL)
LINKED = "|linked"  # in the digest of a run's end page that shows some images from their own files
UNDRAWN = "|undrawn"  # in the digest of a run's end page that left some thumbnails undrawn (end_budget)
VOLATILE = ("finished", "last_started", "wall_s")  # header times a rerun rewrites without changing what the page shows
_CODE = (Path(__file__), Path(__file__).with_name("assets.py"), Path(__file__).with_name("thumbs.py"))


def report_digest(bench_name: str, lines: Sequence[bytes], metrics: dict[str, Any], header: Mapping[str, Any]) -> str:
    """What a run page shows, as a digest: the records (their `json_line`s), the metrics, the run
    header (less the times every rerun rewrites, VOLATILE) and the report's own code. With
    `with_files`, a page carrying the same digest is current and is not written again."""
    h = hashlib.sha256()
    head = {k: v for k, v in header.items() if k not in VOLATILE}
    h.update(json.dumps([bench_name, head, metrics], sort_keys=True, default=str).encode())
    for line in lines:  # records as read from records.jsonl keep their key order; orjson keeps this cheap
        h.update(line)
    for code in _CODE:
        h.update(code.read_bytes())
    return h.hexdigest()


def with_files(content: str, run_dir: Path) -> str:
    """`content` (a report_digest) with the files the page shows beside it: the run's heatmaps and
    the report's thumbnails, by name, size and modification time (one listing each)."""
    h = hashlib.sha256(content.encode())
    for folder in (run_dir / HEATMAPS_DIR, run_dir / REPORT_DIR / THUMBS_DIR):
        if folder.is_dir():
            for entry in sorted(os.scandir(folder), key=lambda e: e.name):
                if ".tmp" in entry.name:  # a thumbnail being written, or one a stopped draft left
                    continue
                try:
                    st = entry.stat()
                except OSError:  # removed since the listing
                    continue
                h.update(f"{folder.name}/{entry.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def is_current(page_path: Path, digest: str) -> bool:
    """Whether the page at `page_path` was written from what `digest` names (its meta tag says so)."""
    try:
        with open(page_path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    return f'<meta name="{DIGEST_META}" content="{digest}">' in head
