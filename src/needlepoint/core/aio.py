"""Small asyncio helpers shared by the clients and the solvers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

__all__ = ["gather_all"]

T = TypeVar("T")


async def gather_all(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Await every call; on the first failure cancel the rest (their answers never came) and raise it."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
