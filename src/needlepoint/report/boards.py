"""The leaderboard's contracts under their first import path, for benchmark plugins written
against it: they live in needlepoint.contract.boards (the benchmarks' contract layer)."""

from needlepoint.contract.boards import (
    CORRUPT,
    Board,
    BoardRow,
    Cell,
    Corrupt,
    PublishedRow,
    Run,
    at,
    count,
    obj,
    pct,
    progress_mark,
)

__all__ = ["CORRUPT", "Board", "BoardRow", "Cell", "Corrupt", "PublishedRow", "Run", "at", "count", "obj", "pct", "progress_mark"]
