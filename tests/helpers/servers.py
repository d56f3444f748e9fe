"""The simulated model as the tests start it: the model names it lists, and a server that counts the
chat requests it answers at once (the others are SimulatedServer itself, with `keep_requests`)."""

from __future__ import annotations

import asyncio
from typing import Any

from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer

# The model names the tests ask for; the `serve` fixture lists them in GET /v1/models unless told otherwise.
TEST_MODELS = (SIMULATED_MODEL_NAME, "sim-model", "m", "org/m", "org/sim-model", "sim/mc-bench", "org/niah-model")


class CountingServer(SimulatedServer):
    """Counts the chat requests being answered at once (`most`: the peak), keeping every request.
    With `hold` > 0 each request waits until `hold` are in flight together (or 10 s pass), so that
    requests sent one after another never reach it."""

    hold: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.keep_requests = True
        self.active = 0
        self.most = 0

    async def _chat(self, request: Any) -> Any:
        self.active += 1
        self.most = max(self.most, self.active)
        try:
            for _ in range(1000 if self.hold else 0):
                if self.most >= self.hold:
                    break
                await asyncio.sleep(0.01)
            return await super()._chat(request)
        finally:
            self.active -= 1


def count_piece_writes(monkeypatch: Any) -> list[int]:
    """Spy on bodies sent as `Pieces` (models/http): the returned list gets, per attempt written
    that way, its number of pieces."""
    from needlepoint.models import http

    written: list[int] = []
    real_write = http._PiecesPayload.write_with_length

    async def write(self: Any, writer: Any, content_length: int | None) -> None:
        written.append(len(self._value.parts))
        await real_write(self, writer, content_length)

    monkeypatch.setattr(http._PiecesPayload, "write_with_length", write)
    return written
