"""Small asyncio helpers shared by the clients and the solvers."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

__all__ = ["gather_all", "run"]

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


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`asyncio.run(main())`, its event loop made while SIGINT and SIGTERM wait: a signal whose
    handler raised (needlepoint's SIGTERM ends the program with an exception; Ctrl-C's
    KeyboardInterrupt) inside the loop's construction left a half-made loop, whose finaliser
    printed a traceback, and a coroutine never awaited. Such a signal now reaches its handler once
    the loop exists, where the runner closes it. Python 3.10 (no `asyncio.Runner`) and threads
    other than the main one use `asyncio.run` as it is."""
    if sys.version_info < (3, 11) or threading.current_thread() is not threading.main_thread():
        return asyncio.run(main())
    with _Held() as held:
        runner = asyncio.Runner()
        runner.get_loop()  # the runner's loop, made now
    with runner:
        held.deliver()
        return runner.run(main())


class _Held:
    """SIGINT and SIGTERM noted rather than handled inside the block; `deliver` then raises each
    noted signal again, to the handlers as they were (the main thread only: where Python runs them)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.noted: list[int] = []
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _Held:
        self.previous = {s: signal.signal(s, lambda signum, _frame: self.noted.append(signum)) for s in self.SIGNALS}
        return self

    def __exit__(self, *_: object) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)  # None: a handler set outside Python

    def deliver(self) -> None:
        for signum in self.noted:
            signal.raise_signal(signum)
