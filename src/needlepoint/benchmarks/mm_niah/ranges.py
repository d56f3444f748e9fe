"""MM-NIAH's tasks and context ranges: the names the scorer, the report and the declaration share
(a module of constants, so that reading the declaration imports no numpy)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CONTEXT_EDGES", "CONTEXT_RANGES", "EXTENDED_EDGES", "EXTENDED_RANGES", "PAPER_TASKS", "TASKS", "paper_order"]

TASKS = (
    "retrieval-text",
    "retrieval-image",
    "counting-text",
    "counting-image",
    "reasoning-text",
    "reasoning-image",
)
CONTEXT_EDGES = (1000, 2000, 4000, 8000, 12000, 16000, 24000, 32000, 40000, 48000, 64000)
CONTEXT_RANGES = tuple(f"{edge // 1000}k" for edge in CONTEXT_EDGES)
EXTENDED_EDGES = CONTEXT_EDGES + (128000, 256000, 512000, 1000000)
EXTENDED_RANGES = CONTEXT_RANGES + ("128k", "256k", "512k", "1M")
# The order the paper's tables give the tasks (text needles, then image needles): every table,
# board and heatmap list shows them in this order (TASKS stays the order the data is read in).
PAPER_TASKS = (
    "retrieval-text",
    "counting-text",
    "reasoning-text",
    "retrieval-image",
    "counting-image",
    "reasoning-image",
)


def paper_order(names: Iterable[str]) -> list[str]:
    """`names` with the MM-NIAH tasks in the paper's order; other names (e.g. "overall") after
    them, in the order given."""
    names = list(names)
    known = [n for n in PAPER_TASKS if n in names]
    return known + [n for n in names if n not in PAPER_TASKS]
