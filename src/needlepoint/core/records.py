"""The record of one sample, as records.jsonl keeps it: typed, with the benchmark's fields apart.

Core fields are the runner's; the benchmark's per-sample judgement (`Benchmark.judge`) lives under
`scores`, so that it can never overwrite a core field, and a solver's own facts under `solver`.
Records written before this layout kept the judgement at the top level: `scores(record)` reads
both layouts.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

__all__ = [
    "CORE_KEYS",
    "LONG_TURN_CHARS",
    "TEXT_END_CHARS",
    "Record",
    "RunHeader",
    "Turn",
    "kept_texts",
    "outcome",
    "part_chars",
    "scores",
]

LONG_TURN_CHARS = 20_000  # a turn whose text is longer is a document: its long parts are kept by their ends
TEXT_END_CHARS = 200  # characters kept at each end of such a part


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
    sent: list[dict[str, Any]]  # the messages as sent (solvers/sent.py; model turns; long documents by their ends: kept_texts)
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


def kept_texts(parts: list[str]) -> list[dict[str, Any]]:
    """The text parts of one turn as its record keeps them (`Turn.sent`): verbatim, except in a
    turn of more than LONG_TURN_CHARS characters of text (a long document: an MM-NIAH sample holds
    hundreds of thousands), where a part longer than three times TEXT_END_CHARS is kept by its
    length and its ends, {type: text, chars, head, tail}, which is what the run page shows of it.
    The document is the data file's (the run's identity names the data and the version that built
    the prompt from it); a record holding it again made records.jsonl as large as the data's text,
    read back by every resume, score and report (issue 45)."""
    long = sum(map(len, parts)) > LONG_TURN_CHARS
    return [_kept(text) if long and len(text) > 3 * TEXT_END_CHARS else {"type": "text", "text": text} for text in parts]


def _kept(text: str) -> dict[str, Any]:
    return {"type": "text", "chars": len(text), "head": text[:TEXT_END_CHARS], "tail": text[-TEXT_END_CHARS:]}


def part_chars(part: dict[str, Any]) -> int:
    """The characters a text part of a turn's `sent` stood for: its text's, or a part kept by its
    ends (`kept_texts`) its whole length."""
    chars = part.get("chars")
    return chars if isinstance(chars, int) else len(str(part.get("text") or ""))
