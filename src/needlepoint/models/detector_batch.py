"""One forward pass for the phrases of many samples: a small async batcher in front of a `Detector`.

The agentic solver asks for one phrase at a time (each phrase is its own recorded call), and many
samples are in flight at once. A forward pass per phrase would leave the GPU mostly idle, so the
batcher collects the requests that arrive within a few milliseconds (or until `max_rows` phrases
wait), groups the phrases of each image, and runs one `Detector.detect` over all of them in a
worker thread. While a pass runs, new requests wait and go together into the next one.

The detector is loaded on first use (or by `check()`, which a run calls before its folder exists,
so that a bad model folder is one sentence, not a failed sample per sample). Each answer carries the
phrase's best box and every box ranked (`Located.ranked`); images are decoded by `decode` (the
localizer's: at their stored size).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.models.detector import Detection, Detector, Ranked
from needlepoint.models.extra import rgb_image

__all__ = ["BatchedDetector", "Located"]


@dataclass(frozen=True)
class Located:
    """A phrase's best box from the detector, with what the record keeps of its pass: the decoded
    image's size (width, height) the box is in pixels of, the phrases the pass held (`rows`) and
    its duration (`forward_s`, image decoding included); `ranked`: every box of the phrase by score."""

    detection: Detection
    size: tuple[int, int]
    rows: int
    forward_s: float
    ranked: Ranked


@dataclass
class _Request:
    image: ImageRef
    phrase: str
    future: asyncio.Future[Located]


class BatchedDetector:
    """A detector shared by every sample of a run; `await locate(image, phrase)` from any task."""

    def __init__(
        self,
        load: Callable[[], Detector],
        name: str,
        window_s: float = 0.005,
        max_rows: int = 32,
        decode: Callable[[ImageRef], Any] = rgb_image,
    ) -> None:
        self.name = name
        self._load = load
        self._decode = decode
        self._detector: Detector | None = None
        self.window_s = window_s
        self.max_rows = max_rows
        self._pending: list[_Request] = []
        self._timer: asyncio.TimerHandle | None = None
        self._running = False
        self._tasks: set[asyncio.Future[None]] = set()  # the passes in flight (asyncio keeps only weak references)
        self.passes: list[int] = []  # phrases per forward pass, in order (for tests and perf)

    @property
    def detector(self) -> Detector:
        """The loaded detector (loading it on first use)."""
        if self._detector is None:
            self._detector = self._load()
        return self._detector

    async def check(self) -> None:
        """Load the detector now (in a worker thread): a bad folder or device fails before the run."""
        await asyncio.get_running_loop().run_in_executor(None, lambda: self.detector)

    async def aclose(self) -> None:
        """Nothing to close: the model stays loaded for the next run of this process."""

    async def locate(self, image: ImageRef, phrase: str) -> Located:
        """The best box of `phrase` on `image`, computed in a pass shared with other requests."""
        loop = asyncio.get_running_loop()
        request = _Request(image, phrase, loop.create_future())
        self._pending.append(request)
        if not self._running:
            if len(self._pending) >= self.max_rows:
                self._flush()
            elif self._timer is None:
                self._timer = loop.call_later(self.window_s, self._flush)
        return await request.future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running or not self._pending:
            return
        batch, self._pending = self._pending[: self.max_rows], self._pending[self.max_rows :]
        self._running = True
        task = asyncio.ensure_future(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[_Request]) -> None:
        try:
            loop = asyncio.get_running_loop()
            try:
                found = await loop.run_in_executor(None, self._detect, batch)
            except BaseException as exc:  # every waiter gets the failure (a DataError for a bad image)
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                for r, located in zip(batch, found):
                    if r.future.done():
                        continue
                    if isinstance(located, Exception):  # this request's image could not be read
                        r.future.set_exception(located)
                    else:
                        r.future.set_result(located)
        finally:
            self._running = False
            if self._pending:  # what arrived during the pass has waited long enough
                self._flush()

    def _detect(self, batch: list[_Request]) -> list[Located | Exception]:
        """One `Detector.detect` over the batch, the phrases of each image together (runs in a
        thread); a request whose image cannot be read gets its DataError, the others their boxes."""
        started = time.perf_counter()
        order: dict[tuple[str, Any, int | None], int] = {}
        unreadable: dict[tuple[str, Any, int | None], Exception] = {}
        queries: list[tuple[Any, list[str]]] = []
        slots: list[tuple[int, int] | Exception] = []
        for r in batch:
            key = (r.image.key, r.image.path, r.image.max_side)
            if key not in order and key not in unreadable:
                try:
                    decoded = self._decode(r.image)
                except DataError as exc:
                    unreadable[key] = exc
                else:
                    order[key] = len(queries)
                    queries.append((decoded, []))
            if key in unreadable:
                slots.append(unreadable[key])
                continue
            i = order[key]
            slots.append((i, len(queries[i][1])))
            queries[i][1].append(r.phrase)
        detector = self.detector
        ranked = detector.rank(queries) if queries else []
        rows = len(batch) - sum(isinstance(s, Exception) for s in slots)
        self.passes.append(rows)
        elapsed = round(time.perf_counter() - started, 4)
        out: list[Located | Exception] = []
        for s in slots:
            if isinstance(s, Exception):
                out.append(s)
                continue
            found = ranked[s[0]][s[1]]
            out.append(Located(found.best(detector.threshold), queries[s[0]][0].size, rows, elapsed, found))
        return out
