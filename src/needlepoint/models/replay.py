"""A model that answers from a previous run's records: re-score, re-export or re-drive a run
(after a change to a parser or scorer) without a server, and check that it reproduces.

A record keeps the summary of its first request (`Conversation.summary()`: message count, image
keys, text length) and the replies of its model turns in order; a request is matched by the summary
of its first-request prefix and its turn number (a repair turn is the first request followed by
the reply and the repair text). Requests with the same summary are answered in the order of
their records. A request the records do not hold comes back as a `request_rejected` failure, never
as an exception.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from needlepoint.core import status
from needlepoint.core.conversation import MAIN, Conversation, Generation, Reply
from needlepoint.core.errors import DataError
from needlepoint.core.records import Record, Turn
from needlepoint.core.store import RECORDS, RunStore, read_records

__all__ = ["ReplayModel"]

_Key = tuple[str, int]


def _summary_key(summary: Any) -> str:
    return json.dumps(summary, sort_keys=True)


def _reply(turn: Turn) -> Reply:
    return Reply(
        text=turn.get("reply") or "",
        finish_reason=turn.get("finish_reason"),
        usage=turn.get("usage"),
        latency_s=float(turn.get("latency_s") or 0.0),
        attempts=int(turn.get("attempts") or 1),
        error=turn.get("error"),
        request_bytes=int(turn.get("request_bytes") or 0),
        error_kind=turn.get("error_kind"),
        reasoning=turn.get("reasoning"),
        endpoint=turn.get("endpoint"),
    )


class ReplayModel:
    """Answers each request with the reply a previous run's records hold for it.

    `role` picks the turns of one model (records written before turns had roles count as "model").
    """

    def __init__(self, records: Iterable[Record], name: str, role: str = MAIN) -> None:
        self.name = name
        self._answers: dict[_Key, deque[Reply]] = {}
        for rec in records:
            request = rec.get("request")
            if request is None:
                continue
            turns = [t for t in rec.get("turns") or [] if t.get("role", MAIN) == role]
            for i, turn in enumerate(turns):
                self._answers.setdefault((_summary_key(request), i), deque()).append(_reply(turn))

    @classmethod
    def from_run(cls, run_dir: Path, role: str = MAIN) -> ReplayModel:
        """The replay of a run folder; its model name is the run's."""
        header = RunStore.read_header(run_dir)
        if header is None:
            raise DataError(f"{run_dir} holds no run (no run.json); name a run folder written by `needlepoint eval`")
        config = header.get("config")
        config = config if isinstance(config, dict) else {}
        return cls(read_records(run_dir / RECORDS).values(), str(config.get("model") or "replay"), role)

    async def complete(self, conversation: Conversation, generation: Generation) -> Reply:
        """The recorded reply to this request (turn t of a first request with the same summary)."""
        n = len(conversation.messages)
        for turn in range(n // 2 + 1):
            first = n - 2 * turn
            if first < 1:
                break
            queue = self._answers.get((_summary_key(Conversation(conversation.messages[:first]).summary()), turn))
            if queue:
                return queue.popleft()
        return Reply(error="replay: the records hold no reply to this request", error_kind=status.REQUEST_REJECTED)

    async def aclose(self) -> None:
        """Nothing to release (present so that callers can treat every model alike)."""
