"""MM-NIAH heatmaps: needle depth (rows) by context range (columns), as in the paper.

Each cell shows its accuracy and, small, how many samples it rests on, so a cell built on 2 samples
is visible; empty cells (scored 0 by the official aggregate) are grey. matplotlib is imported only
when drawing, with the Agg canvas, so scoring never needs a display.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mm_niah.aggregate import CONTEXT_RANGES, DEPTH_LABELS
from needlepoint.store import write_atomic


def draw_heatmap(
    cells: Sequence[Sequence[float]],
    counts: Sequence[Sequence[int]],
    title: str,
    path_stem: Path,
    ranges: Sequence[str] = CONTEXT_RANGES,
) -> list[Path]:
    """Write `path_stem`.png and .svg for a 5 x 11 grid (5 x 15 with the extended ranges) of cell
    accuracies and sample counts."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    values = np.asarray(cells, dtype=float)
    numbers = np.asarray(counts, dtype=int)
    shown = np.ma.masked_where(numbers == 0, values)
    colours = _colormap()

    fig = Figure(figsize=(13 if values.shape[1] <= 11 else 17, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(shown, cmap=colours, vmin=0.0, vmax=1.0, aspect="auto")
    for row in range(values.shape[0]):
        for col in range(values.shape[1]):
            value, count = values[row, col], numbers[row, col]
            ink = "white" if count and (value < 0.2 or value > 0.85) else "black"
            label = f"{value:.2f}" if count else "–"
            ax.text(col, row - 0.12, label, ha="center", va="center", fontsize=10, color=ink)
            ax.text(col, row + 0.25, f"n={count}", ha="center", va="center", fontsize=6.5, color=ink)
    ax.set_xticks(range(values.shape[1]), list(ranges)[: values.shape[1]])
    ax.set_yticks(range(values.shape[0]), list(DEPTH_LABELS)[: values.shape[0]])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("needle depth")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="accuracy")

    path_stem = Path(path_stem)
    path_stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [path_stem.with_name(path_stem.name + suffix) for suffix in (".png", ".svg")]
    for path, dpi in zip(paths, (120, "figure")):
        buffer = io.BytesIO()
        fig.savefig(buffer, format=path.suffix[1:], dpi=dpi)  # into memory, then written atomically
        write_atomic(path, buffer.getvalue())
    return paths


def _colormap() -> Any:
    from matplotlib import colormaps

    return colormaps["RdYlGn"].with_extremes(bad="#d9d9d9")


def draw_all(metrics: dict[str, Any], out_dir: Path) -> list[Path]:
    """One heatmap per task in `metrics` (from `aggregate`), plus the overall when it exists; with
    an `extended` block (rows past 128k), also `{name}_extended` over the 15 extended ranges."""
    out_dir = Path(out_dir)
    paths: list[Path] = []
    blocks = list(metrics["tasks"].items())
    if metrics.get("overall"):
        blocks.append(("overall", metrics["overall"]))
    for name, block in blocks:
        title = f"MM-NIAH {name}: {100 * block['overall']:.1f} (mean over context ranges; grey = no samples, scored 0)"
        paths += draw_heatmap(block["cells"], block["counts"], title, out_dir / name)
    ext = metrics.get("extended")
    if ext:
        blocks = list(ext["tasks"].items()) + ([("overall", ext["overall"])] if ext.get("overall") else [])
        for name, block in blocks:
            title = f"MM-NIAH {name}, extended ranges (not official; 64k ends at 128k): {100 * block['overall']:.1f}"
            paths += draw_heatmap(block["cells"], block["counts"], title, out_dir / f"{name}_extended", ext["context_ranges"])
    return paths
