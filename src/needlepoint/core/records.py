"""The record of one sample, as records.jsonl keeps it: typed, with the benchmark's fields apart.

Core fields are the runner's; the benchmark's per-sample judgement (`Benchmark.judge`) lives under
`scores`, so that it can never overwrite a core field, and a solver's own facts under `solver`.
Records written before this layout kept the judgement at the top level: `scores(record)` reads
both layouts.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

__all__ = ["CORE_KEYS", "Record", "RunHeader", "Turn", "outcome", "scores"]


class Turn(TypedDict, total=False):
    """One call of a sample: a model turn (role = the model's role) or a tool call (role "tool")."""

    role: str  # "model" (the --model), another model's role (e.g. "localizer"), or "tool"
    model: str  # the model's name (model turns)
    tool: str  # the tool's name (tool turns)
    reply: str
    finish_reason: str | None
    latency_s: float
    attempts: int
    usage: dict[str, Any] | None
    request_bytes: int
    error: str | None
    error_kind: str | None  # a status.REQUEST_FAILURES value when `error` is set
    endpoint: str | None
    reasoning: str  # only when the model sent reasoning
    result: Any  # a tool's result summary
    about: dict[str, Any]  # what the call was for (SolveContext.complete/tool's `about`)
    sent: list[dict[str, Any]]  # the messages as sent (solvers/sent.py; model turns)
    reused: bool  # answered from the sample's call cache (a resumed sample)


class Record(TypedDict, total=False):
    """One line of records.jsonl."""

    id: str
    status: str  # a status value
    turns: list[Turn]
    repair_used: bool
    request: dict[str, Any]  # Conversation.summary() of the first request
    answer: Any
    parse_error: str | None
    error: str  # when status is a failure: what went wrong, scrubbed of credentials
    traceback: str  # when status is internal_error
    scores: dict[str, Any]  # Benchmark.judge's fields
    solver: dict[str, Any]  # a solver's own facts (SolveContext.note)
    elapsed_s: float


CORE_KEYS = frozenset(Record.__annotations__)


def outcome(record: Record) -> Record:
    """A record without its turns (what each call sent and got back: on a long document, the
    document itself): what a running figure reads, small enough to hold for every sample of a run."""
    return cast(Record, {k: v for k, v in record.items() if k != "turns"})


class RunHeader(TypedDict, total=False):
    """run.json: what `evaluate` (and `merge`) write when a run folder opens, and update as it runs."""

    needlepoint: str  # the version that created the run
    hash: str  # hash of `identity`: the run folder's key
    identity: dict[str, Any]  # what changes answers or scores (config.identity)
    config: dict[str, Any]  # RunConfig.public(): the settings, credentials left out
    created: str  # "%Y-%m-%dT%H:%M:%S%z"
    status: str  # "running", "complete", "incomplete", "merging"
    model_label: str  # a solver's name of the system, where it differs from the model
    last_started: str
    finished: str
    sampling_sent: list[dict[str, Any]]  # the distinct sampling parameters the requests carried
    endpoints: list[dict[str, Any]]  # requests and errors per endpoint (endpoints.add_stats)
    merged_from: list[dict[str, Any]]  # a merge's shards: {shard, run, hash}
    wall_s: float  # seconds `evaluate` spent on the run, summed over its resumes (usage.py)


def scores(record: Record) -> dict[str, Any]:
    """The benchmark's per-sample fields of a record, in either layout (under `scores`, or at the
    top level in records written before the key existed)."""
    nested = record.get("scores")
    if isinstance(nested, dict):
        return nested
    return {k: v for k, v in record.items() if k not in CORE_KEYS}
