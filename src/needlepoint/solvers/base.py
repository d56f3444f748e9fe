"""What a solver is to the runner, and the context through which it reaches models and tools.

A run is dataset + solver + scorer (inspect_ai's Task): the benchmark loads samples and scores
records; a solver turns one sample into a parsed answer. The default solver is the benchmark's own
path (prompt, ask, parse, one repair turn); others (the agentic and RAG baselines) may ask several
models and call tools. Every call goes through the `SolveContext`, which writes it into the
record as a turn, so resume, `--retry-failed`, the report and the run identity work alike for
every solver.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from needlepoint.contract.base import Benchmark, Parsed
from needlepoint.core import errors, status
from needlepoint.core.conversation import MAIN, Conversation, Generation, Model, Reply  # MAIN re-exported
from needlepoint.core.options import Option
from needlepoint.core.records import Turn
from needlepoint.core.structured import without_schema
from needlepoint.solvers.calls import CallCache, CallLog, calls_path, conversation_key
from needlepoint.solvers.sent import sent_messages

__all__ = ["MAIN", "DropsCalls", "RequestGate", "SolveContext", "Solver", "TakesOptions", "reply_from_turn", "reply_turn"]

T = TypeVar("T")


class RequestGate(Protocol):
    """What a model request consults before it is sent and tells when it is answered (usage.Budget):
    `refusal()` is None when the request may go (it is then in flight until `release()`), else the
    sentence why not; `charge(model, usage)` counts an answer's usage; `stop_reason()` is the
    sentence of a refusal once there was one (the runner then takes no more samples)."""

    def refusal(self) -> str | None: ...

    def stop_reason(self) -> str | None: ...

    def release(self) -> None: ...

    def charge(self, model: Any, usage: Mapping[str, Any] | None) -> None: ...


class Solver(Protocol):
    """Turns one sample into a parsed answer through `ctx`; sync work only through `ctx`'s calls.

    `name` is the registry name (`--solver`); `identity()` the settings that change answers (part
    of the run identity, empty for the default solver so older runs keep their hash); `label(model)`
    the model name a leaderboard shows (e.g. `gpt-4o + grounding-dino-base (agentic)`); `models()`
    the models and tools it needs besides the main one, by role, so that the caller checks their
    endpoints and closes them (each may have `check_endpoints()` / `aclose()`).

    Optional, each a protocol of its own that the caller tests with `isinstance`:
    - `options` (`TakesOptions`): the class's own `needlepoint eval` flags (read through
      `needlepoint.solvers.solver_options(cls)`);
    - `dropped_calls` (`DropsCalls`): the call kinds it drops from a sample's cache once they have
      served, kept in the sample's own file (solvers/calls.py);
    - `answer_schema()` (`needlepoint.core.structured.AnswersInJson`): the JSON schema of the main
      model's answer under `--structured-output`, where the solver's answer is not the benchmark's.
    """

    name: str

    def identity(self) -> dict[str, Any]:
        """The solver's settings that change answers; {} for the default solver."""
        ...

    def label(self, model: str) -> str:
        """The name a leaderboard row gives the system made of `model` and this solver."""
        ...

    def models(self) -> Mapping[str, Any]:
        """Models and tools besides the main model, by role (e.g. {"localizer": model})."""
        ...

    async def solve(self, sample: Any, ctx: SolveContext) -> Parsed:
        """One sample's answer (or parse/request error). Raise DataError for an input fault."""
        ...


@runtime_checkable
class TakesOptions(Protocol):
    """A solver class with flags of its own: `needlepoint eval` adds them (in a group per solver)
    and passes the given ones to the constructor by their `dest`."""

    options: Sequence[Option]


@runtime_checkable
class DropsCalls(Protocol):
    """A solver that removes answered calls of these kinds from a sample's cache once they have
    served (`ctx.calls.drop`); the run keeps them in the sample's own file (solvers/calls.py)."""

    dropped_calls: Collection[str]


def reply_turn(reply: Reply, role: str, model: str) -> Turn:
    """A model call as a record keeps it."""
    turn: Turn = {
        "role": role,
        "model": model,
        "reply": reply.text,
        "finish_reason": reply.finish_reason,
        "latency_s": round(reply.latency_s, 4),
        "attempts": reply.attempts,
        "usage": reply.usage,
        "request_bytes": reply.request_bytes,
        "error": reply.error,
        "error_kind": reply.error_kind,
        "endpoint": reply.endpoint,
    }
    if reply.reasoning is not None:
        turn["reasoning"] = reply.reasoning
    return turn


def reply_from_turn(turn: Mapping[str, Any]) -> Reply:
    """The Reply an answered turn recorded (a call answered from the sample's cache)."""
    return Reply(
        text=str(turn.get("reply") or ""),
        finish_reason=turn.get("finish_reason"),
        usage=turn.get("usage"),
        latency_s=float(turn.get("latency_s") or 0.0),
        attempts=int(turn.get("attempts") or 1),
        request_bytes=int(turn.get("request_bytes") or 0),
        reasoning=turn.get("reasoning"),
        endpoint=turn.get("endpoint"),
    )


class SolveContext:
    """One sample's access to models and tools; every call lands in `turns` (the record's).

    - `await ctx.complete(conversation, generation=None, role="model")` asks the model of `role`
      and records a turn {role, model, reply, finish_reason, latency_s, attempts, usage,
      request_bytes, error, error_kind, endpoint, reasoning?, sent} (`sent`: the messages as
      sent, solvers/sent.py); an answered call is stored in the sample's call cache
      (solvers/calls.py) as it arrives, and the same request in a resumed run is answered from
      there (its turn marked `reused`);
    - `await ctx.answered(kind, key, call, save, load)` does the same for any other paid call
      (an embedding batch, a token count): `call()`'s answer from the cache, or called and stored;
    - `await ctx.tool(name, call, summary=None)` awaits `call()` (an embedder's coroutine) and
      records a turn {role: "tool", tool, latency_s, error, error_kind, result}; `await
      ctx.tool_sync(name, fn, *args, summary=None)` does the same for blocking work (a detector),
      run in a worker thread;
    - `ctx.note(**fields)` keeps solver facts (kept pieces, needle ranks) under record["solver"];
    - `ctx.request(conversation)` records the first request's summary; `ctx.repaired()` marks a
      repair turn;
    - `ctx.run_dir` is the run folder, where a solver may cache what a resume should not redo
      (under `cache/<solver name>/`).
    """

    def __init__(
        self,
        benchmark: Benchmark,
        sample: Any,
        models: Mapping[str, Model],
        base: Generation,
        run_dir: Path | None = None,
        gate: RequestGate | None = None,
        calls: CallLog | None = None,
    ) -> None:
        self.benchmark = benchmark
        self.sample = sample
        self.models = models
        self.run_dir = run_dir  # the run folder, for a solver's caches (e.g. <run>/cache/rag/); None outside a run
        self.generation = benchmark.generation(sample, base)
        self.turns: list[Turn] = []
        self.notes: dict[str, Any] = {}
        self.request_summary: dict[str, Any] | None = None
        self.repair_used = False
        # the sample's call cache: from the run's log (`calls`, runner.run), else a file of its own in `run_dir`
        self.calls = (
            calls.cache(sample.id)
            if calls is not None
            else CallCache(calls_path(run_dir, sample.id))
            if run_dir is not None
            else None
        )
        self.reused_calls = 0  # calls answered from the cache (a resumed sample)
        self.gate = gate  # the run's budget (usage.Budget), consulted before each model request

    def model(self, role: str = MAIN) -> Model:
        """The model serving `role`; KeyError names the roles there are."""
        if role not in self.models:
            raise KeyError(f"no model for role {role!r}; the run has {', '.join(self.models)}")
        return self.models[role]

    def request(self, conversation: Conversation) -> None:
        """Record what the first request held (no image bytes)."""
        if self.request_summary is None:
            self.request_summary = conversation.summary()

    def repaired(self) -> None:
        """Mark that a repair turn was sent."""
        self.repair_used = True

    def note(self, **fields: Any) -> None:
        """Keep JSON-ready solver facts in the record (under "solver")."""
        self.notes.update(fields)

    async def complete(
        self,
        conversation: Conversation,
        generation: Generation | None = None,
        role: str = MAIN,
        about: Mapping[str, Any] | None = None,
    ) -> Reply:
        """Ask the model of `role`; the reply (or its failure) is recorded as a turn. `about`
        (JSON-ready) says what the call was for, e.g. the phrase a localizer was asked to box;
        it is kept in the turn under "about" and shown in the report."""
        model = self.model(role)
        if generation is None:  # the answer schema (--structured-output) is the main model's answer's only
            generation = self.generation if role == MAIN else without_schema(self.generation)
        key = conversation_key(role, model.name, conversation, generation)
        stored = self.calls.take(key) if self.calls is not None else None
        reencode = bool(getattr(model, "reencode_images", False))
        if stored is not None and isinstance(stored.get("turn"), dict):
            self.reused_calls += 1
            sent = await sent_messages(conversation, reencode)  # not in the cache: the same request, described again
            reused = cast(Turn, dict(stored["turn"]))  # JSON read back, of the shape reply_turn wrote
            reused["sent"], reused["reused"] = sent, True
            self.turns.append(reused)
            return reply_from_turn(stored["turn"])
        refused = self.gate.refusal() if self.gate is not None else None
        sending = asyncio.ensure_future(sent_messages(conversation, reencode))
        try:
            if refused is not None:  # not sent: a transient failure, requested again by a rerun with a larger budget
                reply = Reply(error=refused, error_kind=status.BACKEND_ERROR, attempts=0)
            else:
                try:
                    reply = await model.complete(conversation, generation)
                finally:
                    if self.gate is not None:
                        self.gate.release()
                if self.gate is not None and (not reply.error or reply.usage is not None):  # a billed invalid answer too
                    self.gate.charge(model.name, reply.usage)
        except BaseException:
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
            raise
        turn = reply_turn(reply, role, model.name)
        if about:
            turn["about"] = dict(about)
        if not reply.error and self.calls is not None:  # on disk first: a kill from here on costs nothing
            self.calls.put(key, "chat", turn=turn)
        turn["sent"] = await sending
        self.turns.append(turn)
        return reply

    async def answered(
        self, kind: str, key: str, call: Callable[[], Awaitable[T]], save: Callable[[T], Any], load: Callable[[Any], T]
    ) -> T:
        """A paid call other than a chat turn (an embedding batch, a token count): its answer from
        the sample's call cache when an earlier attempt got one (`load(saved)`), else `call()`,
        whose answer is stored (`save(answer)`, JSON-ready) the moment it arrives. `key` names the
        request (calls.key_of of what it asks); a failed call raises and stores nothing."""
        stored = self.calls.take(key) if self.calls is not None else None
        if stored is not None and "answer" in stored:
            try:
                got = load(stored["answer"])
            except (ValueError, KeyError, TypeError):
                got = None  # a damaged entry: ask again
            if got is not None:
                self.reused_calls += 1
                return got
        result = await call()
        if self.calls is not None:
            self.calls.put(key, kind, answer=save(result))
        return result

    async def tool(
        self,
        name: str,
        call: Callable[[], Awaitable[T]],
        summary: Callable[[T], Any] | None = None,
        about: Mapping[str, Any] | None = None,
    ) -> T:
        """Await a tool call, recording its latency and result summary (`summary(result)`, JSON-ready)
        or its failure: an errors.RequestError (or any exception with a `kind` of status.REQUEST_FAILURES, as
        the embedding client raises) is recorded with that kind and raised again. `about` as for
        `complete`."""
        started = time.perf_counter()
        turn: Turn = {"role": "tool", "tool": name, "error": None, "error_kind": None}
        if about:
            turn["about"] = dict(about)
        try:
            result = await call()
        except Exception as exc:
            kind = getattr(exc, "kind", None)
            if kind in status.REQUEST_FAILURES:
                turn["error"], turn["error_kind"] = str(exc), kind
                turn["latency_s"] = round(time.perf_counter() - started, 4)
                self.turns.append(turn)
                raise errors.RequestError(str(kind), str(exc)) from exc
            raise
        turn["latency_s"] = round(time.perf_counter() - started, 4)
        if summary is not None:
            turn["result"] = summary(result)
        self.turns.append(turn)
        return result

    async def tool_sync(
        self,
        name: str,
        fn: Callable[..., T],
        *args: Any,
        summary: Callable[[T], Any] | None = None,
        about: Mapping[str, Any] | None = None,
    ) -> T:
        """`tool` for blocking work (a detector's forward pass, a local embedding model): `fn(*args)`
        runs in a worker thread, so that the other samples' requests keep flowing."""
        loop = asyncio.get_running_loop()
        return await self.tool(name, lambda: loop.run_in_executor(None, functools.partial(fn, *args)), summary, about)
