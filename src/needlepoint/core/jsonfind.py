"""Finding the JSON value in a model's free text.

Models wrap JSON in prose, in one or several fenced blocks, or leave it bare at the end. This is the
one JSON finder in needlepoint; the rule is the Ref-Adv authors' (see docs/protocols/ref-adv-s.md) and
MC-Bench reuses it. A reply is hostile input: JSON nested deeper than MAX_DEPTH (no answer is) is
no JSON, never a RecursionError; a server's whole answer is parsed by `loads`, which turns the
standard parser's RecursionError into the ValueError every caller already handles.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json)?(.*?)```", re.IGNORECASE | re.DOTALL)
_DECODER = json.JSONDecoder()
_MISSING = object()
MAX_DEPTH = 100
"""The deepest nesting of arrays and objects read from a reply (an answer nests 2 to 4 deep)."""


def loads(text: str | bytes) -> Any:
    """JSON text from a server (an HTTP answer's body) as a value; ValueError when it is not JSON,
    also when it nests deeper than the standard parser can follow (its RecursionError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None


def find_json(text: str) -> Any:
    """Return the JSON value a reply carries, or raise LookupError when there is none.

    Fenced blocks are tried from the last to the first; the first that parses wins. Failing that,
    the first `[` or `{` from which a JSON value decodes that ends exactly at the end of the
    right-stripped text. Text nested deeper than MAX_DEPTH holds no JSON value.
    """
    for block in reversed(_FENCE.findall(text)):
        content = block.strip()
        if not content:
            continue
        if _depth(content) > MAX_DEPTH:
            continue
        try:
            return loads(content)
        except ValueError:
            continue
    text = text.rstrip()
    if _depth(text) > MAX_DEPTH:
        raise LookupError(f"no JSON value found (nested deeper than {MAX_DEPTH} levels)")
    value = _trailing_value(text)
    if value is _MISSING:
        raise LookupError("no JSON value found")
    return value


def _depth(text: str) -> int:
    """The deepest nesting of `[`/`{` in `text` outside JSON strings, in one pass (so that a hostile
    reply costs linear time, not one parse attempt per bracket)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:  # the usual reply: no scan needed
        return 0
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return deepest


def _trailing_value(text: str) -> Any:
    end = len(text)
    for i, ch in enumerate(text):
        if ch not in "[{":
            continue
        try:
            value, stop = _DECODER.raw_decode(text, i)
        except ValueError:
            continue
        except RecursionError:  # a quote before the brackets hid their depth from `_depth`: hostile
            return _MISSING  # text, and one such attempt per bracket would cost minutes
        if stop == end:
            return value
    return _MISSING
