"""MM-NIAH heatmaps: needle depth (rows) by context range (columns), as in the paper.

Each cell shows its accuracy and, small, how many samples it rests on, so a cell built on 2 samples
is visible; empty cells (scored 0 by the official aggregate) are grey. Drawn without a plotting
library, because a run's report must not cost more than the run (matplotlib's import and 14
figures took 1.5-3 s after the last answer; docs/performance.md): the PNG with Pillow, whose
frame, axes and colour bar are drawn once per shape (`_Grid`), and the SVG written as text (its
labels searchable), the same layout in both. Colours: ColorBrewer's RdYlGn, interpolated linearly
between its 11 classes, as matplotlib's `RdYlGn` is.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from html import escape
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mm_niah.aggregate import DEPTH_LABELS
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_RANGES, paper_order
from needlepoint.core.files import write_atomic

RDYLGN = (
    "#a50026",
    "#d73027",
    "#f46d43",
    "#fdae61",
    "#fee08b",
    "#ffffbf",
    "#d9ef8b",
    "#a6d96a",
    "#66bd63",
    "#1a9850",
    "#006837",
)
EMPTY = "#d9d9d9"  # a cell without samples
HEIGHT = 600  # px; 120 px an inch, as the figures were drawn before
TOP, BOTTOM, LEFT, RIGHT = 54, 522, 108, 192  # the axes' box: top and bottom from the top, left and right margins
BAR_GAP, BAR_WIDTH = 30, 22  # the colour bar right of the axes
NO_VALUE = "-"  # a cell without samples (Pillow's own font has no en dash)
SIZES = {"title": 20, "value": 17, "count": 11, "tick": 16, "label": 16}  # font sizes, px


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return (int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16))


def colour(value: float) -> tuple[int, int, int]:
    """RdYlGn at `value` (0 red, 0.5 yellow, 1 green; clipped to 0..1)."""
    x = min(max(float(value), 0.0), 1.0) * (len(RDYLGN) - 1)
    i = min(int(x), len(RDYLGN) - 2)
    a, b, t = _rgb(RDYLGN[i]), _rgb(RDYLGN[i + 1]), x - i
    return (round(a[0] + (b[0] - a[0]) * t), round(a[1] + (b[1] - a[1]) * t), round(a[2] + (b[2] - a[2]) * t))


def _hex(rgb: tuple[int, int, int]) -> str:
    return f"#{rgb[0]:02x}{rgb[1]:02x}{rgb[2]:02x}"


def _width(cols: int) -> int:
    return 1560 if cols <= 11 else 2040


@cache
def _font(size: int) -> Any:
    """Pillow's own font at `size` px (its bitmap font where Pillow has no FreeType)."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size)
    except Exception:  # Pillow without FreeType
        return ImageFont.load_default()


def _cells(rows: int, cols: int) -> tuple[float, float, list[float], list[float]]:
    """The cell width and height and the centres of the columns (x) and rows (y)."""
    width = _width(cols)
    cw, ch = (width - LEFT - RIGHT) / cols, (BOTTOM - TOP) / rows
    return cw, ch, [LEFT + (c + 0.5) * cw for c in range(cols)], [TOP + (r + 0.5) * ch for r in range(rows)]


def _ink(value: float, count: int) -> str:
    return "white" if count and (value < 0.2 or value > 0.85) else "black"


class _Grid:
    """The PNG frame of every heatmap of a shape (depths x ranges): the axes' box, the depth
    labels, the axis titles and the colour bar, drawn once; a heatmap is a copy with its cells,
    range names and title drawn on it."""

    def __init__(self, rows: int, cols: int) -> None:
        from PIL import Image, ImageDraw

        width = _width(cols)
        self.rows, self.cols = rows, cols
        self.base = Image.new("RGB", (width, HEIGHT), "white")
        pen = ImageDraw.Draw(self.base)
        _, _, _, ys = _cells(rows, cols)
        for label, y in zip(list(DEPTH_LABELS)[:rows], ys):
            pen.text((LEFT - 8, y), label, fill="black", font=_font(SIZES["tick"]), anchor="rm")
        pen.text(
            ((LEFT + width - RIGHT) / 2, HEIGHT - 22),
            "context length (tokens)",
            fill="black",
            font=_font(SIZES["label"]),
            anchor="mm",
        )
        side = Image.new("RGB", (200, 24), "white")
        ImageDraw.Draw(side).text((100, 12), "needle depth", fill="black", font=_font(SIZES["label"]), anchor="mm")
        self.base.paste(side.rotate(90, expand=True), (8, (TOP + BOTTOM) // 2 - 100))
        x0 = width - RIGHT + BAR_GAP
        for y in range(TOP, BOTTOM):
            pen.line([(x0, y), (x0 + BAR_WIDTH, y)], fill=colour((BOTTOM - 1 - y) / (BOTTOM - TOP - 1)))
        pen.rectangle([x0, TOP, x0 + BAR_WIDTH, BOTTOM], outline="black")
        for k in range(6):
            y = BOTTOM - k * (BOTTOM - TOP) / 5
            pen.line([(x0 + BAR_WIDTH, y), (x0 + BAR_WIDTH + 5, y)], fill="black")
            pen.text((x0 + BAR_WIDTH + 8, y), f"{k / 5:.1f}", fill="black", font=_font(SIZES["tick"]), anchor="lm")
        bar = Image.new("RGB", (120, 24), "white")
        ImageDraw.Draw(bar).text((60, 12), "accuracy", fill="black", font=_font(SIZES["label"]), anchor="mm")
        self.base.paste(bar.rotate(90, expand=True), (x0 + BAR_WIDTH + 40, (TOP + BOTTOM) // 2 - 60))
        self.masks: dict[tuple[str, int, str], tuple[Any, int, int]] = {}  # `stamp`'s texts rendered

    def stamp(self, image: Any, xy: tuple[float, float], text: str, size: int, ink: Any, anchor: str) -> None:
        """Draw `text` at `xy` (`anchor` as Pillow's) in `ink`: rendered once per heatmap shape as a
        mask of its pixels and pasted wherever it recurs (a run's heatmaps hold some 870 texts,
        mostly the same few: 0.00, n=2, the range names; rendering each took half their time)."""
        from PIL import Image, ImageDraw

        key = (text, size, anchor)
        if key not in self.masks:
            font = _font(size)
            left, top, right, bottom = font.getbbox(text, anchor=anchor)
            mask = Image.new("L", (max(1, right - left), max(1, bottom - top)), 0)
            ImageDraw.Draw(mask).text((-left, -top), text, fill=255, font=font, anchor=anchor)
            self.masks[key] = (mask, left, top)
        mask, left, top = self.masks[key]
        image.paste(ink, (round(xy[0]) + left, round(xy[1]) + top), mask)

    def png(self, cells: Any, counts: Any, title: str, ranges: Sequence[str]) -> bytes:
        return _encode(self.image(cells, counts, title, ranges))

    def image(self, cells: Any, counts: Any, title: str, ranges: Sequence[str]) -> Any:
        """The heatmap as an RGB Pillow image (the frame's copy with the cells drawn on it)."""
        from PIL import ImageDraw

        image = self.base.copy()
        pen = ImageDraw.Draw(image)
        cw, ch, xs, ys = _cells(self.rows, self.cols)
        for r, y in enumerate(ys):
            for c, x in enumerate(xs):
                value, count = float(cells[r][c]), int(counts[r][c])
                fill = colour(value) if count else _rgb(EMPTY)
                pen.rectangle([round(x - cw / 2), round(y - ch / 2), round(x + cw / 2), round(y + ch / 2)], fill=fill)
                ink = _ink(value, count)
                self.stamp(image, (x, y - 0.12 * ch), f"{value:.2f}" if count else NO_VALUE, SIZES["value"], ink, "mm")
                self.stamp(image, (x, y + 0.25 * ch), f"n={count}", SIZES["count"], ink, "mm")
        width = _width(self.cols)
        pen.rectangle([LEFT, TOP, width - RIGHT, BOTTOM], outline="black")
        for name, x in zip(ranges, xs):
            pen.line([(x, BOTTOM), (x, BOTTOM + 5)], fill="black")
            self.stamp(image, (x, BOTTOM + 8), str(name), SIZES["tick"], "black", "ma")
        pen.text(((LEFT + width - RIGHT) / 2, TOP - 10), title, fill="black", font=_font(SIZES["title"]), anchor="md")
        return image


def _encode(image: Any) -> bytes:
    """A heatmap image as PNG bytes: a palette of the few colours drawn (half the bytes, and
    quicker to write than RGB). Pillow lets other threads run meanwhile (`draw_all`)."""
    from PIL import Image

    buffer = io.BytesIO()
    image.quantize(256, method=Image.Quantize.FASTOCTREE).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def svg(cells: Any, counts: Any, title: str, ranges: Sequence[str]) -> str:
    """The heatmap as an SVG document (text as text; the same bytes for the same numbers)."""
    rows, cols = len(cells), len(cells[0]) if len(cells) else 0
    width = _width(cols)
    cw, ch, xs, ys = _cells(rows, cols)
    font = 'font-family="DejaVu Sans, Arial, Helvetica, sans-serif"'
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" viewBox="0 0 {width} {HEIGHT}" {font} shape-rendering="crispEdges">',
        f'<rect width="{width}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{(LEFT + width - RIGHT) / 2:.1f}" y="{TOP - 10}" font-size="{SIZES["title"]}" text-anchor="middle">{escape(title)}</text>',
    ]
    for r, y in enumerate(ys):
        for c, x in enumerate(xs):
            value, count = float(cells[r][c]), int(counts[r][c])
            fill = _hex(colour(value)) if count else EMPTY
            ink = _ink(value, count)
            shown = f"{value:.2f}" if count else NO_VALUE
            out.append(
                f'<rect x="{x - cw / 2:.1f}" y="{y - ch / 2:.1f}" width="{cw:.1f}" height="{ch:.1f}" fill="{fill}"/>'
                f'<text x="{x:.1f}" y="{y - 0.12 * ch:.1f}" font-size="{SIZES["value"]}" fill="{ink}" text-anchor="middle" '
                f'dominant-baseline="central">{shown}</text>'
                f'<text x="{x:.1f}" y="{y + 0.25 * ch:.1f}" font-size="{SIZES["count"]}" fill="{ink}" text-anchor="middle" '
                f'dominant-baseline="central">n={count}</text>'
            )
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{width - LEFT - RIGHT}" height="{BOTTOM - TOP}" fill="none" stroke="black"/>')
    for label, y in zip(list(DEPTH_LABELS)[:rows], ys):
        out.append(
            f'<text x="{LEFT - 8}" y="{y:.1f}" font-size="{SIZES["tick"]}" text-anchor="end" dominant-baseline="central">{label}</text>'
        )
    for name, x in zip(ranges, xs):
        out.append(
            f'<line x1="{x:.1f}" y1="{BOTTOM}" x2="{x:.1f}" y2="{BOTTOM + 5}" stroke="black"/>'
            f'<text x="{x:.1f}" y="{BOTTOM + 22}" font-size="{SIZES["tick"]}" text-anchor="middle">{escape(str(name))}</text>'
        )
    out.append(
        f'<text x="{(LEFT + width - RIGHT) / 2:.1f}" y="{HEIGHT - 16}" font-size="{SIZES["label"]}" text-anchor="middle">'
        "context length (tokens)</text>"
    )
    mid = (TOP + BOTTOM) / 2
    out.append(
        f'<text x="24" y="{mid:.1f}" font-size="{SIZES["label"]}" text-anchor="middle" transform="rotate(-90 24 {mid:.1f})">'
        "needle depth</text>"
    )
    x0 = width - RIGHT + BAR_GAP
    stops = "".join(f'<stop offset="{k / (len(RDYLGN) - 1):.3f}" stop-color="{c}"/>' for k, c in enumerate(RDYLGN))
    out.append(f'<defs><linearGradient id="bar" x1="0" y1="1" x2="0" y2="0">{stops}</linearGradient></defs>')
    out.append(f'<rect x="{x0}" y="{TOP}" width="{BAR_WIDTH}" height="{BOTTOM - TOP}" fill="url(#bar)" stroke="black"/>')
    for k in range(6):
        y = BOTTOM - k * (BOTTOM - TOP) / 5
        out.append(
            f'<line x1="{x0 + BAR_WIDTH}" y1="{y:.1f}" x2="{x0 + BAR_WIDTH + 5}" y2="{y:.1f}" stroke="black"/>'
            f'<text x="{x0 + BAR_WIDTH + 8}" y="{y:.1f}" font-size="{SIZES["tick"]}" dominant-baseline="central">{k / 5:.1f}</text>'
        )
    bx = x0 + BAR_WIDTH + 52
    out.append(
        f'<text x="{bx}" y="{mid:.1f}" font-size="{SIZES["label"]}" text-anchor="middle" transform="rotate(-90 {bx} {mid:.1f})">'
        "accuracy</text>"
    )
    out.append("</svg>\n")
    return "\n".join(out)


def draw_heatmap(
    cells: Sequence[Sequence[float]],
    counts: Sequence[Sequence[int]],
    title: str,
    path_stem: Path,
    ranges: Sequence[str] = CONTEXT_RANGES,
    grids: dict[tuple[int, int], _Grid] | None = None,
) -> list[Path]:
    """Write `path_stem`.png and .svg for a 5 x 11 grid (5 x 15 with the extended ranges) of cell
    accuracies and sample counts; `grids` keeps the PNG frames for the next heatmaps of a shape."""
    shape = (len(cells), len(cells[0]) if len(cells) else 0)
    grids = {} if grids is None else grids
    grid = grids.get(shape)
    if grid is None:
        grid = grids[shape] = _Grid(*shape)
    path_stem = Path(path_stem)
    path_stem.parent.mkdir(parents=True, exist_ok=True)
    png, vector = path_stem.with_name(path_stem.name + ".png"), path_stem.with_name(path_stem.name + ".svg")
    write_atomic(png, grid.png(cells, counts, title, ranges))
    write_atomic(vector, svg(cells, counts, title, ranges))
    return [png, vector]


DIGEST_FILE = ".drawn"  # beside the heatmaps: the digest of the metrics they were drawn from


def _plan(metrics: dict[str, Any]) -> list[tuple[str, dict[str, Any], str, Sequence[str]]]:
    """(file stem, block, title, ranges) of every heatmap `metrics` asks for: the overall first,
    then the tasks in the paper's order; then the same over the extended ranges."""
    plan: list[tuple[str, dict[str, Any], str, Sequence[str]]] = []
    tasks = metrics["tasks"]
    names = ([("overall", metrics["overall"])] if metrics.get("overall") else []) + [(t, tasks[t]) for t in paper_order(tasks)]
    for name, block in names:
        title = f"MM-NIAH {name}: {100 * block['overall']:.1f} (mean over context ranges; grey = no samples, scored 0)"
        plan.append((name, block, title, CONTEXT_RANGES))
    ext = metrics.get("extended")
    if ext:
        names = ([("overall", ext["overall"])] if ext.get("overall") else []) + [
            (t, ext["tasks"][t]) for t in paper_order(ext["tasks"])
        ]
        for name, block in names:
            title = f"MM-NIAH {name}, extended ranges (not official; 64k ends at 128k): {100 * block['overall']:.1f}"
            plan.append((f"{name}_extended", block, title, ext["context_ranges"]))
    return plan


def _digest(plan: Sequence[tuple[str, dict[str, Any], str, Sequence[str]]]) -> str:
    """What the heatmaps show (cells, counts, titles, ranges) and the drawing code, as a digest."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for name, block, title, ranges in plan:
        h.update(json.dumps([name, block.get("cells"), block.get("counts"), title, list(ranges)], default=str).encode())
    return h.hexdigest()


def draw_all(metrics: dict[str, Any], out_dir: Path) -> list[Path]:
    """One heatmap per task in `metrics` (from `aggregate`), plus the overall when it exists; with
    an `extended` block (rows past 128k), also `{name}_extended` over the 15 extended ranges.

    Heatmaps already drawn from the same numbers (a finished run rerun) are kept as they are;
    otherwise a sentence on stderr says what is being drawn (a few seconds after the last answer)."""
    out_dir = Path(out_dir)
    plan = _plan(metrics)
    digest = _digest(plan)
    paths = [out_dir / f"{name}{suffix}" for name, *_ in plan for suffix in (".png", ".svg")]
    stamp = out_dir / DIGEST_FILE
    try:
        current = stamp.read_text(encoding="utf-8").strip() == digest and all(p.is_file() for p in paths)
    except OSError:
        current = False
    if current:
        return paths
    print(f"drawing {len(plan)} MM-NIAH heatmaps (PNG and SVG) into {out_dir} ...", file=sys.stderr, flush=True)
    stamp.unlink(missing_ok=True)
    drawn: list[Path] = []
    grids: dict[tuple[int, int], _Grid] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(2, thread_name_prefix="heatmaps") as pool:  # the PNGs encoded on two cores
        jobs = []
        for name, block, title, ranges in plan:  # the text drawn here, one heatmap after another (one font)
            cells, counts = block["cells"], block["counts"]
            shape = (len(cells), len(cells[0]) if len(cells) else 0)
            grid = grids[shape] if shape in grids else grids.setdefault(shape, _Grid(*shape))
            jobs.append((out_dir / f"{name}.png", pool.submit(_encode, grid.image(cells, counts, title, ranges))))
            write_atomic(out_dir / f"{name}.svg", svg(cells, counts, title, ranges))
        for path, job in jobs:
            write_atomic(path, job.result())
            drawn += [path, path.with_suffix(".svg")]
    write_atomic(stamp, digest + "\n")
    return drawn
