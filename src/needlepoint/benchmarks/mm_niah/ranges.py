"""MM-NIAH's tasks and context ranges: the names the scorer, the report and the declaration share
(a module of constants, so that reading the declaration imports no numpy)."""

from __future__ import annotations

__all__ = ["CONTEXT_EDGES", "CONTEXT_RANGES", "EXTENDED_EDGES", "EXTENDED_RANGES", "TASKS"]

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
