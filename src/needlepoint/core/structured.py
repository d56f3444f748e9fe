"""`--structured-output`: the main model's requests carry the answer's JSON schema as OpenAI's
`response_format` {"type": "json_schema", ...}, which vLLM and SGLang turn into constrained
decoding (vLLM's older `guided_json` keys are ignored by recent servers, so they are never sent).

The schema is declared where the answer is defined: a benchmark's `answer_schema()` (Ref-Adv-s's
boxes, MC-Bench's image/group/box object), or a solver's when its main model answers something else
(the agentic reasoner's phrases). It travels in the Generation's extra body keys, so it is part of
the run identity and of run.json's `sampling_sent`; `identity` also marks the run with
`structured_output`, which the leaderboard shows as its own protocol ("+ schema").

Every answer schema is bounded (boxschema.py), so a reply that follows it has at most
`longest_reply(schema)` bytes, and a byte-level tokenizer's tokens are never more than its bytes:
with --max-tokens at least that, the grammar always closes the JSON before the token limit. That
holds only without free whitespace, which JSON grammars allow between any two tokens by default:
vLLM turns it off per server, not per request (`--structured-outputs-config
{"backend": "xgrammar", "disable_any_whitespace": true}`; the request's own
`structured_outputs.disable_any_whitespace` is ignored by 0.32), so `--serve vllm` starts vLLM with
it (`COMPACT_JSON_FLAGS`) and a server started by hand needs it too.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from needlepoint.core.conversation import Generation
from needlepoint.core.errors import DataError

__all__ = [
    "COMPACT_JSON_FLAGS",
    "FRACTION_DIGITS",
    "LABEL",
    "RESPONSE_FORMAT",
    "AnswersInJson",
    "answer_schema",
    "longest_reply",
    "response_format",
    "with_schema",
    "without_schema",
]

RESPONSE_FORMAT = "response_format"
LABEL = " + schema"  # the leaderboard's mark of a run whose answers were constrained by the schema
# vLLM's server flag that drops free whitespace from JSON grammars; vLLM refuses it with its default
# backend "auto", so the backend is named: xgrammar, whose bounds FRACTION_DIGITS describes
COMPACT_JSON_FLAGS = ("--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}))
# the fraction digits xgrammar (vLLM's default backend) allows a `number` with a minimum and a maximum
FRACTION_DIGITS = 6
_LITERALS = {"boolean": len("false"), "null": len("null")}


def longest_reply(schema: dict[str, Any]) -> int:
    """The most bytes of compact JSON (no whitespace) that follows `schema`: an upper bound on the
    tokens of a constrained reply. ValueError names the first unbounded part (an array without
    maxItems, a number without minimum and maximum, a string without maxLength): such a schema
    lets a constrained model write forever."""
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        if schema.get("additionalProperties", True) is not False:
            raise ValueError("an object that allows additional properties is unbounded")
        # every property present: keys quoted, a colon each, commas between, braces around
        return 2 + max(len(props) - 1, 0) + sum(len(json.dumps(k)) + 1 + longest_reply(v) for k, v in props.items())
    if kind == "array":
        if "maxItems" not in schema:
            raise ValueError("an array without maxItems is unbounded")
        n = int(schema["maxItems"])
        return 2 + max(n - 1, 0) + n * longest_reply(schema.get("items", {}))
    if kind in ("integer", "number"):
        if "minimum" not in schema or "maximum" not in schema:
            raise ValueError(f"a {kind} without minimum and maximum is unbounded")
        whole = max(len(str(int(schema["minimum"]))), len(str(int(schema["maximum"]))))
        return whole if kind == "integer" else whole + 1 + FRACTION_DIGITS
    if kind == "string":
        if "maxLength" not in schema:
            raise ValueError("a string without maxLength is unbounded")
        return 2 + 6 * int(schema["maxLength"])  # quotes, and at most 6 bytes a character (a \\uXXXX escape)
    if kind in _LITERALS:
        return _LITERALS[kind]
    raise ValueError(f"no length bound for a schema of type {kind!r}")


def response_format(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """The `response_format` body value that asks for JSON of `schema`."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@runtime_checkable
class AnswersInJson(Protocol):
    """A benchmark or a solver whose main model answers in JSON of a known shape (optional verb
    `answer_schema`), for `--structured-output`.

    Declared here, where it is used, because the core lies below the benchmark and solver contracts;
    `needlepoint.contract` re-exports it with the other verbs' protocols."""

    def answer_schema(self) -> dict[str, Any] | None:
        """The bounded JSON schema of the answer (boxschema.py); None when this configuration's
        answer is not JSON (e.g. grounding tokens, a prompt file of the user's)."""
        ...


def answer_schema(benchmark: object, solver: object, benchmark_name: str) -> tuple[dict[str, Any], str]:
    """The JSON schema of the main model's answer and its name: the solver's (`AnswersInJson`)
    when it declares one, else the benchmark's; DataError when neither answers in JSON."""
    for owner, name in ((solver, getattr(solver, "name", "solver")), (benchmark, benchmark_name)):
        schema = owner.answer_schema() if isinstance(owner, AnswersInJson) else None
        if schema is not None:
            return schema, f"{benchmark_name}_{name}" if owner is solver else benchmark_name
    raise DataError(
        f"--structured-output needs an answer schema, and {benchmark_name} with solver {getattr(solver, 'name', '?')} "
        "has none (its answers are not JSON); drop --structured-output"
    )


def with_schema(generation: Generation, schema: dict[str, Any], name: str) -> Generation:
    """`generation` whose requests ask for JSON of `schema`; DataError when --extra-body already
    sets a response_format (two answers to one question)."""
    if RESPONSE_FORMAT in generation.extra:
        raise DataError("--extra-body sets response_format and --structured-output sets it too; pass one of them")
    return replace(generation, extra={**generation.extra, RESPONSE_FORMAT: response_format(schema, name)})


def without_schema(generation: Generation) -> Generation:
    """`generation` without the answer schema: for the calls of other roles (a localizer's boxes)."""
    if RESPONSE_FORMAT not in generation.extra:
        return generation
    return replace(generation, extra={k: v for k, v in generation.extra.items() if k != RESPONSE_FORMAT})
