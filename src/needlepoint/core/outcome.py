"""What became of a run's samples, counted once for every benchmark: answered and failed samples
(by `status` kind) for `metrics.json`, and the end-of-run advice printed on stderr.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from needlepoint.core import status
from needlepoint.core.numeric import usable_tokens
from needlepoint.core.records import Record

NO_CONTENT_SHARE = 0.1  # warn when more than this share of the answered samples had no content
_LIMIT = re.compile(r"maximum (?:context|model) length (?:is|of) (\d+)", re.I)


def run_counts(records: Sequence[Record]) -> dict[str, Any]:
    """Answered and failed samples, the failures by kind (a `status` value), as metrics.json keeps them."""
    by_kind: dict[str, int] = {}
    for r in records:
        kind = r.get("status")
        if kind in status.FAILED:
            by_kind[kind] = by_kind.get(kind, 0) + 1
    failed = sum(by_kind.values())
    return {"answered": len(records) - failed, "failed": failed, "failed_by_kind": dict(sorted(by_kind.items()))}


def has_metrics(metrics: dict[str, Any]) -> bool:
    """Whether metrics.json holds headline metrics: False for a run with nothing answered, whose
    metrics.json holds only the `run` and `usage` blocks (api.finish)."""
    return any(key not in ("run", "usage") for key in metrics)


def _prompt_size(record: Record) -> tuple[int, int]:
    """(prompt tokens from the server's usage, request bytes) of a record's first turn; 0 when unknown."""
    turns = record.get("turns") or [{}]
    tokens = usable_tokens(turns[0].get("usage"))  # the one rule for usage counts (numeric.py)
    return (tokens[0] if tokens is not None else 0), int(turns[0].get("request_bytes") or 0)


def _context_line(records: Sequence[Record], too_long: list[Record]) -> str:
    limit = next((m.group(1) for r in too_long if (m := _LIMIT.search(str(r.get("error") or "")))), None)
    line = f"{len(too_long)} sample(s) exceed the model's context"
    line += f" ({limit} tokens, the server says)" if limit else ""
    fit = [_prompt_size(r) for r in records if r.get("status") == status.DONE]
    tokens = max((t for t, _ in fit), default=0)
    size = max((b for _, b in fit), default=0)
    if tokens:
        line += f"; the longest prompt that fit had {tokens} prompt tokens"
    elif size:
        line += f"; the longest request that fit had {size} bytes (the server reported no token counts)"
    shortest = min((b for r in too_long if (b := _prompt_size(r)[1])), default=0)
    if shortest:
        line += f", the shortest that did not {shortest} bytes"
    return line + ": serve a longer context (vLLM --max-model-len) or send smaller images (--max-image-side)"


def summary_lines(records: Sequence[Record]) -> list[str]:
    """The end-of-run advice: failures by kind, what `--retry-failed` would request again, the
    context overflows, and replies without content."""
    lines: list[str] = []
    counts = run_counts(records)
    by_kind = counts["failed_by_kind"]
    if by_kind:
        kinds = ", ".join(f"{n} {k}" for k, n in by_kind.items())
        lines.append(f"{counts['failed']} sample(s) failed ({kinds}); listed in metrics.json under run.failed_ids")
        retryable = sum(n for k, n in by_kind.items() if k in status.RETRYABLE)
        if retryable:
            lines.append(f"rerun with --retry-failed to request the {retryable} transient failure(s) again")
        if by_kind.get(status.INTERNAL_ERROR):
            lines.append(
                f"{by_kind[status.INTERNAL_ERROR]} internal_error(s): a fault in needlepoint itself, not in the model or the data; "
                "the tracebacks are in records.jsonl (please report them); --retry-failed does not request these again"
            )
        lasting = [k for k in by_kind if k not in status.RETRYABLE and k != status.INTERNAL_ERROR]
        if lasting:
            lines.append(
                f"{', '.join(lasting)}: the server refuses these samples as they are; --retry-failed does not request them again"
            )
    too_long = [r for r in records if r.get("status") == status.CONTEXT_TOO_LONG]
    if too_long:
        lines.append(_context_line(records, too_long))
    if by_kind.get(status.TOO_MANY_IMAGES):
        lines.append(
            f"{by_kind[status.TOO_MANY_IMAGES]} sample(s) have more images than the server accepts per prompt "
            "(vLLM: raise --limit-mm-per-prompt)"
        )
    answered = [r for r in records if r.get("status") == status.DONE]
    empty = sum(1 for r in answered if r.get("parse_error") == status.NO_CONTENT)
    if answered and empty > NO_CONTENT_SHARE * len(answered):
        lines.append(
            f"warning: {empty} of {len(answered)} replies had no content, only reasoning (the model's thinking "
            "ran out of tokens?); raise --max-tokens"
        )
    return lines
