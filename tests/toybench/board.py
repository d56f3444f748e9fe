"""The toy benchmark on a leaderboard: one board, accuracy first."""

from __future__ import annotations

from collections.abc import Sequence

from needlepoint.contract import Board, BoardRow, Run, count, pct


def boards(runs: Sequence[Run]) -> list[Board]:
    board = Board("toy_shapes", "Toy shapes (accuracy %)", ["model"], ["n", "Acc"], counts=frozenset({"n"}))
    for run in sorted(runs, key=lambda r: -(pct(r.metrics.get("accuracy")) or -1)):
        board.rows.append(BoardRow([run.label], [count(run.metrics.get("n")), pct(run.metrics.get("accuracy"))], str(run.dir)))
    return [board]
