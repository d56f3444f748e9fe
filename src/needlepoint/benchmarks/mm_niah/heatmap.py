"""MM-NIAH heatmaps: needle depth (rows) by context range (columns), as in the paper.

Each cell shows its accuracy and, small, how many samples it rests on, so a cell built on 2 samples
is visible; empty cells (scored 0 by the official aggregate) are grey. matplotlib is imported only
when drawing, with the Agg canvas, so scoring never needs a display.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mm_niah.aggregate import DEPTH_LABELS
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_RANGES, paper_order
from needlepoint.core.files import write_atomic


class _Grid:
    """One figure for every heatmap of a shape (depths x ranges), redrawn in place: the axes, the
    colour bar and the cell labels are laid out once (at fixed positions, no layout engine), and a
    heatmap only sets the cells' colours, labels, tick names and title before it is saved."""

    def __init__(self, rows: int, cols: int) -> None:
        import numpy as np
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        width = 13 if cols <= 11 else 17
        self.fig = Figure(figsize=(width, 5))
        FigureCanvasAgg(self.fig)
        left, right = 0.9 / width, 1.6 / width
        self.ax = self.fig.add_axes((left, 0.13, 1 - left - right, 0.78))
        bar = self.fig.add_axes((1 - right + 0.25 / width, 0.13, 0.18 / width, 0.78))
        self.image = self.ax.imshow(np.zeros((rows, cols)), cmap=_colormap(), vmin=0.0, vmax=1.0, aspect="auto")
        self.fig.colorbar(self.image, cax=bar, label="accuracy")
        self.values = [
            [self.ax.text(c, r - 0.12, "", ha="center", va="center", fontsize=10) for c in range(cols)] for r in range(rows)
        ]
        self.counts = [
            [self.ax.text(c, r + 0.25, "", ha="center", va="center", fontsize=6.5) for c in range(cols)] for r in range(rows)
        ]
        self.ax.set_xlabel("context length (tokens)")
        self.ax.set_ylabel("needle depth")
        self.ax.set_yticks(range(rows), list(DEPTH_LABELS)[:rows])

    def draw(self, cells: Any, counts: Any, title: str, ranges: Sequence[str], path_stem: Path) -> list[Path]:
        import numpy as np

        self.image.set_data(np.ma.masked_where(counts == 0, cells))
        for row in range(cells.shape[0]):
            for col in range(cells.shape[1]):
                value, count = cells[row, col], counts[row, col]
                ink = "white" if count and (value < 0.2 or value > 0.85) else "black"
                self.values[row][col].set(text=f"{value:.2f}" if count else "–", color=ink)
                self.counts[row][col].set(text=f"n={count}", color=ink)
        self.ax.set_xticks(range(cells.shape[1]), list(ranges)[: cells.shape[1]])
        self.ax.set_title(title)
        path_stem = Path(path_stem)
        path_stem.parent.mkdir(parents=True, exist_ok=True)
        paths = [path_stem.with_name(path_stem.name + suffix) for suffix in (".png", ".svg")]
        for path, dpi in zip(paths, (120, "figure")):
            buffer = io.BytesIO()  # into memory, then written atomically
            # SVG text as text (searchable, and no glyph outlines to compute), without a date or
            # random ids: the same numbers give the same bytes, whichever run drew them.
            self.fig.savefig(buffer, format=path.suffix[1:], dpi=dpi, metadata={"Date": None} if path.suffix == ".svg" else None)
            write_atomic(path, buffer.getvalue())
        return paths


def draw_heatmap(
    cells: Sequence[Sequence[float]],
    counts: Sequence[Sequence[int]],
    title: str,
    path_stem: Path,
    ranges: Sequence[str] = CONTEXT_RANGES,
    grids: dict[tuple[int, int], _Grid] | None = None,
) -> list[Path]:
    """Write `path_stem`.png and .svg for a 5 x 11 grid (5 x 15 with the extended ranges) of cell
    accuracies and sample counts; `grids` keeps the figures for the next heatmaps of a shape."""
    import numpy as np
    from matplotlib import rc_context

    values = np.asarray(cells, dtype=float)
    numbers = np.asarray(counts, dtype=int)
    grids = {} if grids is None else grids
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "needlepoint-heatmap"}):
        grid = grids.get(values.shape)
        if grid is None:
            grid = grids[values.shape] = _Grid(*values.shape)
        return grid.draw(values, numbers, title, ranges, path_stem)


def _colormap() -> Any:
    from matplotlib import colormaps

    return colormaps["RdYlGn"].with_extremes(bad="#d9d9d9")


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
    for name, block, title, ranges in plan:
        drawn += draw_heatmap(block["cells"], block["counts"], title, out_dir / name, ranges, grids)
    write_atomic(stamp, digest + "\n")
    return drawn
