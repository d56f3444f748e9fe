"""A solver the toy benchmark declares, with a flag of its own: the default path with a hint
appended to every prompt."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from needlepoint.contract import Benchmark, Conversation, Message, Option, Parsed
from needlepoint.solvers import SolveContext, read_reply


class Hinted:
    name = "hinted"
    options = (Option("--hint", "a sentence appended to every prompt"),)

    def __init__(self, benchmark: Benchmark, hint: str = "Look carefully.") -> None:
        self.benchmark = benchmark
        self.hint = hint

    def identity(self) -> dict[str, Any]:
        return {"hint": self.hint}

    def label(self, model: str) -> str:
        return f"{model} (hinted)"

    def models(self) -> Mapping[str, Any]:
        return {}

    async def solve(self, sample: Any, ctx: SolveContext) -> Parsed:
        asked = self.benchmark.prompt(sample).messages[0]
        conversation = Conversation([Message("user", [*asked.images, f"{asked.text} {self.hint}"])])
        ctx.request(conversation)
        return read_reply(self.benchmark, sample, await ctx.complete(conversation))
