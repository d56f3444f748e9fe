"""`--structured-output`: the main model's requests carry the answer's JSON schema as OpenAI's
`response_format` {"type": "json_schema", ...}, which vLLM and SGLang turn into constrained
decoding (vLLM's older `guided_json` keys are ignored by recent servers, so they are never sent).

The schema is declared where the answer is defined: a benchmark's `answer_schema()` (Ref-Adv-s's
boxes, MC-Bench's image/group/box object), or a solver's when its main model answers something else
(the agentic reasoner's phrases). It travels in the Generation's extra body keys, so it is part of
the run identity and of run.json's `sampling_sent`; `identity` also marks the run with
`structured_output`, which the leaderboard shows as its own protocol ("+ schema").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from needlepoint.conversation import Generation
from needlepoint.errors import DataError

__all__ = ["LABEL", "RESPONSE_FORMAT", "answer_schema", "response_format", "with_schema", "without_schema"]

RESPONSE_FORMAT = "response_format"
LABEL = " + schema"  # the leaderboard's mark of a run whose answers were constrained by the schema


def response_format(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """The `response_format` body value that asks for JSON of `schema`."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def answer_schema(benchmark: Any, solver: Any, benchmark_name: str) -> tuple[dict[str, Any], str]:
    """The JSON schema of the main model's answer and its name: the solver's (`answer_schema()`)
    when it declares one, else the benchmark's; DataError when neither answers in JSON."""
    for owner, name in ((solver, getattr(solver, "name", "solver")), (benchmark, benchmark_name)):
        declared = getattr(owner, "answer_schema", None)
        schema = declared() if callable(declared) else None
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
