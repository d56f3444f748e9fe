"""MM-NIAH's difference heatmap: per task (and overall), needle depth by context range, each
cell the difference of the cell's score (a run against the first) on the paired samples, as an
HTML table coloured from red (the run lost) through white to blue (it gained)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from needlepoint.compare.order import task_sorted
from needlepoint.compare.runs import Pairing
from needlepoint.report.html import esc

__all__ = ["GRID_BENCHMARKS", "grid_metrics", "heatmaps_html"]

GRID_BENCHMARKS = ("mm_niah",)  # benchmarks whose metrics hold a depth x length grid per task (`cells`, `counts`)


def grid_metrics(pairing: Pairing) -> list[dict[str, Any]] | None:
    """Each run's metrics on the paired samples (the benchmark's own score), where the benchmark
    has a grid; None for the others."""
    if pairing.runs[0].benchmark not in GRID_BENCHMARKS:
        return None
    return [pairing.read(run, "score", run.bench.score) for run in pairing.runs]


def _colour(diff: float) -> str:
    """White at 0, full blue at +1 (100 points), full red at -1."""
    t = min(1.0, abs(diff))
    fade = round(255 * (1 - 0.85 * t))
    return f"rgb({fade},{fade},255)" if diff > 0 else f"rgb(255,{fade},{fade})" if diff < 0 else "#ffffff"


def _points(diff: float) -> str:
    """A difference in points, signed; 0 without a sign."""
    text = f"{100 * diff:+.0f}"
    return "0" if text in ("+0", "-0") else text


def _grid(title: str, first: dict[str, Any], other: dict[str, Any], ranges: Sequence[str], depths: Sequence[str]) -> str:
    cells_a, cells_b = first.get("cells") or [], other.get("cells") or []
    counts = first.get("counts") or []
    head = "".join(f"<th>{esc(r)}</th>" for r in ranges)
    rows = []
    for d, depth in enumerate(depths):
        tds = []
        for c in range(len(ranges)):
            try:
                n, a, b = counts[d][c], cells_a[d][c], cells_b[d][c]
            except (IndexError, TypeError):
                n, a, b = 0, None, None
            if not n or a is None or b is None:
                tds.append('<td class="empty">–</td>')
                continue
            diff = float(b) - float(a)
            tds.append(
                f'<td style="background:{_colour(diff)}" title="{esc(f"{100 * a:.1f} -> {100 * b:.1f} on {n} samples")}" '
                f'data-diff="{diff:.6f}">{_points(diff)}<br><small>n={int(n)}</small></td>'
            )
        rows.append(f"<tr><th>{esc(depth)}</th>{''.join(tds)}</tr>")
    return (
        f'<h3>{esc(title)}</h3>\n<table class="heat"><thead><tr><th>depth \\ context</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def heatmaps_html(metrics: Sequence[dict[str, Any]], letters: Sequence[str], order: Sequence[str] = ()) -> str:
    """The difference heatmaps of each run against the first (points: 100 x the score's difference),
    the tasks in `order` (the paper's: compare.order.paper_tasks) where given."""
    first = metrics[0]
    ranges = [str(r) for r in first.get("context_ranges") or []]
    depths = [str(d) for d in first.get("depth_bins") or []]
    if not ranges or not depths:
        return ""
    parts = [
        '<h2 id="heatmaps">Difference by context length and needle depth</h2>\n'
        '<p class="note">each cell: the score of the run minus the first run\'s, in points, on the paired samples of that '
        "cell (n); blue: the run scores higher, red: lower, grey: no sample</p>"
    ]
    tasks = task_sorted(list((first.get("tasks") or {}).keys()), str, order)
    for k in range(1, len(metrics)):
        other = metrics[k]
        label = f"{letters[k]} - {letters[0]}"
        if isinstance(first.get("overall"), dict) and isinstance(other.get("overall"), dict):
            parts.append(_grid(f"{label}: overall", first["overall"], other["overall"], ranges, depths))
        for task in tasks:
            a, b = first["tasks"].get(task), (other.get("tasks") or {}).get(task)
            if isinstance(a, dict) and isinstance(b, dict):
                parts.append(_grid(f"{label}: {task}", a, b, ranges, depths))
    return "\n".join(parts)
