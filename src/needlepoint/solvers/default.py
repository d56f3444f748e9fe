"""The default solver: the benchmark's own path. Prompt, ask, parse, one repair turn."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from needlepoint.contract.base import Benchmark, Parsed
from needlepoint.core import status
from needlepoint.core.conversation import Reply
from needlepoint.solvers.base import SolveContext

__all__ = ["DefaultSolver", "read_reply"]


def read_reply(benchmark: Benchmark, sample: Any, reply: Reply) -> Parsed:
    """A reply as the benchmark's answer, or the error that stands in: the request failure's kind,
    or NO_CONTENT when a reasoning model thought but gave no answer (not worth a repair turn)."""
    if reply.error:
        return Parsed(error=reply.error_kind or status.BACKEND_ERROR)
    if not reply.text.strip() and reply.reasoning:
        return Parsed(error=status.NO_CONTENT)
    return benchmark.parse(sample, reply.text)


class DefaultSolver:
    """One model, the benchmark's prompt and parser, one repair turn on a parse error."""

    name = "default"

    def __init__(self, benchmark: Benchmark) -> None:
        self.benchmark = benchmark

    def identity(self) -> dict[str, Any]:
        return {}  # absent from the run identity: runs from before solvers keep their hash

    def label(self, model: str) -> str:
        return model

    def models(self) -> Mapping[str, Any]:
        return {}

    async def solve(self, sample: Any, ctx: SolveContext) -> Parsed:
        bench = self.benchmark
        conversation = bench.prompt(sample)
        ctx.request(conversation)
        reply = await ctx.complete(conversation)
        parsed = read_reply(bench, sample, reply)
        if not reply.error and parsed.error and parsed.error != status.NO_CONTENT:
            repair = bench.followup(sample, parsed, reply.finish_reason)
            if repair is not None:
                ctx.repaired()
                second = await ctx.complete(conversation.with_turn(reply.text, repair))
                parsed = read_reply(bench, sample, second)
        return parsed
