"""The compare page (`<out>/index.html`): the metric tables of the comparison, MM-NIAH's
difference heatmaps, and a card per paired sample with every run's answer over the same image.

The cards come from each run's own `report_items` (the run report's view of a sample), so the
boxes, answers, filters (style, bin, task, range) and right/wrong verdicts are the run report's;
thumbnails are the run report's too (report.thumbs, under `<out>/thumbs/`). Over each image the
ground truth is drawn solid and each run's boxes in the run's own colour and dash pattern. The
page is escaped and locked down as the run report is (report.html.page: CSP, no network).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from needlepoint.compare.heatmap import grid_metrics, heatmaps_html
from needlepoint.compare.order import paper_tasks
from needlepoint.compare.page_assets import CSS as COMPARE_CSS
from needlepoint.compare.page_assets import JS
from needlepoint.compare.paired import Comparison
from needlepoint.compare.tables import comparison_tables, letter, pairing_lines, table_notes
from needlepoint.contract.base import ReportImage, ReportItem, format_cell
from needlepoint.core.errors import DataError
from needlepoint.core.files import write_atomic
from needlepoint.report.html import bench_title, esc, filter_options, page, table_html
from needlepoint.report.rows import overlay_boxes
from needlepoint.report.thumbs import GT_COLOUR, Thumbnails, file_name, thumb_key

__all__ = ["RUN_STYLES", "refuse_other_files", "write_page"]

PAGE_SIZE = 50
MAX_TEXT = 20_000
THUMBS_DIR = "thumbs"
RUN_STYLES = (  # (colour, SVG dash pattern) per run, in order: A, B, C, ...
    ("#e0218a", "7 4"),
    ("#2f6fed", "2 3"),
    ("#f59e0b", "10 3 2 3"),
    ("#a855f7", "4 2"),
    ("#06b6d4", "1 2"),
    ("#111827", "12 4"),
)


def _clip(value: Any) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"\n[... {len(text) - MAX_TEXT} more characters]"


def _style(k: int) -> tuple[str, str]:
    return RUN_STYLES[k % len(RUN_STYLES)]


def _boxes(first: ReportImage, per_run: Sequence[ReportImage | None]) -> list[list[Any]]:
    """[x1, y1, x2, y2, run] for the image (run -1: ground truth, drawn first), in the image's pixels."""
    gt = ReportImage(first.image, [b for b in first.boxes if b.kind == "gt"])
    out = [[*b[:4], -1] for b in overlay_boxes(gt, False)]
    for k, im in enumerate(per_run):
        if im is not None:
            preds = ReportImage(im.image, [b for b in im.boxes if b.kind != "gt"])
            out += [[*b[:4], k] for b in overlay_boxes(preds, False)]
    return out


def _fields(items: Sequence[ReportItem]) -> tuple[list[list[list[str]]], list[list[str]]]:
    """Per run the fields whose value differs between the runs, and once those all runs share."""
    keys = list(dict.fromkeys(k for it in items for k in it.fields))
    own: list[list[list[str]]] = [[] for _ in items]
    shared: list[list[str]] = []
    for key in keys:
        shown = [format_cell(it.fields.get(key)) for it in items]
        if len(set(shown)) == 1:
            shared.append([key, _clip(shown[0])])
        else:
            for k, text in enumerate(shown):
                own[k].append([key, _clip(text)])
    return own, shared


def sample_blob(comparison: Comparison, out: Path) -> dict[str, Any]:
    """The JSON the page's script renders: the runs' styles and one entry per paired sample."""
    pairing = comparison.pairing
    by_run = [pairing.items(k) for k in range(len(pairing.runs))]
    first_items = [by_run[0][i] for i in pairing.ids if i in by_run[0]]
    with_boxes = any(b for it in first_items for im in it.images for b in im.boxes)  # MM-NIAH: no boxes, no images
    sizes = Thumbnails(out / THUMBS_DIR).finish(first_items if with_boxes else [])
    rows = []
    counts: dict[str, dict[str, int]] = {}
    for sid in pairing.ids:
        items = [items_of.get(sid) for items_of in by_run]
        first = items[0]
        if first is None or any(it is None for it in items):
            continue
        present = [it for it in items if it is not None]
        ims = []
        if with_boxes:
            for pos, im in enumerate(first.images):
                size = sizes.get(thumb_key(im))
                src = f"{THUMBS_DIR}/{file_name(thumb_key(im), size)}" if size else ""
                caption = f"Image {pos + 1}" if len(first.images) > 1 else "image"
                per_run = [it.images[pos] if pos < len(it.images) else None for it in present]
                ims.append([src, *(size or (0, 0)), caption, _boxes(im, per_run)])
        own, shared = _fields(present)
        for key, value in first.filters.items():
            counts.setdefault(str(key), {})
            counts[str(key)][str(value)] = counts[str(key)].get(str(value), 0) + 1
        rows.append(
            {
                "id": sid,
                "p": _clip(first.prompt),
                "a": [_clip(it.answer) for it in present],
                "c": [None if it.correct is None else bool(it.correct) for it in present],
                "f": own,
                "g": shared,
                "k": {str(k): str(v) for k, v in first.filters.items()},
                "im": ims,
            }
        )
    from needlepoint.contract.registry import declaration
    from needlepoint.core.errors import DataError

    try:
        prompt_label = declaration(pairing.runs[0].benchmark).prompt_label
    except DataError:
        prompt_label = "prompt"
    return {
        "runs": [
            {"name": run.name, "letter": letter(k), "colour": _style(k)[0], "dash": _style(k)[1]}
            for k, run in enumerate(pairing.runs)
        ],
        "gt_colour": GT_COLOUR,
        "items": rows,
        "filters": filter_options(counts),
        "prompt_label": prompt_label,
        "page_size": PAGE_SIZE,
    }


SAMPLES_HTML = """<h2 id="samples">Samples</h2>
<div class="controls">
<label>outcome <select id="np-outcome">{outcomes}</select></label>
<span id="np-selects" style="display:contents"></span>
<label>search <input type="search" id="np-search" placeholder="prompt or answer text"></label>
</div>
<div class="countline"><span id="np-count" data-count="" data-total=""></span>{legend}</div>
<div class="pager"><button data-page="prev">previous</button><span id="np-pageinfo"></span><button data-page="next">next</button></div>
<div class="cards" id="np-cards"></div>
<noscript><p class="note">The sample browser needs JavaScript.</p></noscript>"""


def _outcome_options(n: int) -> str:
    """The outcome filter: only one run right (each run), every run wrong, every run right, the runs differ."""
    both = "both" if n == 2 else "all runs"
    options = [("", "all samples")]
    options += [(f"only:{k}", f"only {letter(k)} right") for k in range(n)]
    options += [("none", f"{both} wrong"), ("all", f"{both} right"), ("differ", "the runs differ")]
    return "".join(f'<option value="{esc(v)}">{esc(t)}</option>' for v, t in options)


def _legend(n: int, with_boxes: bool) -> str:
    if not with_boxes:
        return ""
    parts = [f'<span><span class="sw" style="border-color:{GT_COLOUR}"></span>ground truth</span>']
    for k in range(n):
        colour, dash = _style(k)
        parts.append(
            f'<span><svg width="28" height="8" aria-hidden="true"><line x1="0" y1="4" x2="28" y2="4" stroke="{colour}" '
            f'stroke-width="3" stroke-dasharray="{dash}"/></svg> {esc(letter(k))}</span>'
        )
    return '<div class="legend">' + "".join(parts) + "</div>"


PAGE_NAME = "index.html"
TITLE_END = " · compare · needlepoint"  # every compare page's title ends so: what marks a folder as one


def refuse_other_files(out: Path) -> None:
    """DataError unless `out` is new, empty, or an earlier compare page (its index.html and
    thumbs/): the page replaces index.html and removes the thumbnails it does not show."""
    folder = Path(out).expanduser()
    if not folder.is_dir():
        return
    names = sorted(os.listdir(folder))
    index = folder / PAGE_NAME
    try:
        ours = index.is_file() and f"{TITLE_END}</title>" in index.read_text(encoding="utf-8", errors="replace")[:8192]
    except OSError:
        ours = False
    others = [n for n in names if n not in (PAGE_NAME, THUMBS_DIR)] if ours else names
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise DataError(
            f"--out {out} holds files that are no compare page's ({shown}); the page would write over them: "
            "choose a new or empty folder, e.g. --out compare"
        )


def write_page(comparison: Comparison, out: Path) -> Path:
    """Write `<out>/index.html` (thumbnails under `<out>/thumbs/`); return its path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    blob = sample_blob(comparison, out)
    pairing = comparison.pairing
    title = bench_title(pairing.runs[0].benchmark)
    key = "".join(
        f'<span><svg width="28" height="8" aria-hidden="true"><line x1="0" y1="4" x2="28" y2="4" stroke="{esc(r["colour"])}" '
        f'stroke-width="3" stroke-dasharray="{esc(r["dash"])}"/></svg> <b>{esc(r["letter"])}</b>: {esc(r["name"])}</span>'
        for r in blob["runs"]
    )
    grids = grid_metrics(pairing)
    order = paper_tasks(pairing.runs[0].benchmark)
    heat = heatmaps_html(grids, [letter(k) for k in range(len(pairing.runs))], order) if grids else ""
    with_boxes = any(im for it in blob["items"] for im in it["im"])
    nav = (
        ['<a href="#metrics">metrics</a>']
        + (['<a href="#heatmaps">heatmaps</a>'] if heat else [])
        + ['<a href="#samples">samples</a>']
    )
    samples = SAMPLES_HTML.replace("{outcomes}", _outcome_options(len(pairing.runs))).replace(
        "{legend}", _legend(len(pairing.runs), with_boxes)
    )
    body = (
        f'<header class="top"><h1>{esc(title)} · compare {len(pairing.runs)} runs</h1>'
        f'<div class="sub">{len(pairing.ids)} paired samples</div><div class="runkey">{key}</div>'
        f'<nav class="toc">{"".join(nav)}</nav></header>\n<main>\n'
        f'<h2 id="metrics">Metrics</h2>\n<div class="pairing">{esc(chr(10).join(pairing_lines(comparison)))}</div>\n'
        + "\n".join(
            table_html(t) + "".join(f'<p class="note tablenote">{esc(line)}</p>' for line in table_notes(comparison, contrast))
            for t, contrast in zip(comparison_tables(comparison), comparison.contrasts)
        )
        + f"\n{heat}\n{samples}\n</main>"
    )
    from needlepoint.report.assets import CSS

    html_text = page(f"{title}{TITLE_END}", body, [JS], blob)
    html_text = html_text.replace(f"<style>{CSS}</style>", f"<style>{CSS}{COMPARE_CSS}</style>", 1)
    return write_atomic(out / PAGE_NAME, html_text)
