"""Ref-Adv-s on a leaderboard (`needlepoint report`): the layout of the authors' results table."""

from __future__ import annotations

from collections.abc import Sequence

from needlepoint.benchmarks.ref_adv.scoring import BINS
from needlepoint.contract.boards import Board, BoardRow, Run, answer_label, at, ci_level, count, interval, pct

__all__ = ["boards"]

REF_BINS = tuple(label for label, _, _ in BINS)


def boards(runs: Sequence[Run]) -> list[Board]:
    """One board in the layout of the authors' results table (Acc at three IoU thresholds, Acc@0.5
    by distractor count), best Acc@0.5 first."""
    board = Board(
        "ref_adv_s",
        "Ref-Adv-s (Acc %, first box; bins: Acc@0.5 by distractor count)",
        ["model", "prompt"],
        ["n", "Acc@0.5", "Acc@0.75", "Acc@0.9", *REF_BINS, "parse fail"],
        counts=frozenset({"n", "parse fail"}),
        headline="Acc@0.5",
    )
    for run in sorted(runs, key=lambda r: -(pct(r.metrics.get("acc@0.5")) or -1)):
        m = run.metrics
        values = [
            count(m.get("n")),
            *(pct(m.get(f"acc@{t}")) for t in ("0.5", "0.75", "0.9")),
            *(pct(at(m, "bins", b, "acc@0.5")) for b in REF_BINS),
            count(m.get("parse_fail")),
        ]
        names = [None, *(f"acc@{t}" for t in ("0.5", "0.75", "0.9")), *(f"bins/{b}/acc@0.5" for b in REF_BINS), None]
        found = [interval(m, n) if n else None for n in names]
        labels = [run.label, answer_label(str(run.option("prompt_mode") or ""), run)]
        board.rows.append(BoardRow(labels, values, str(run.dir), intervals=found, level=ci_level(m)))
    return [board]
