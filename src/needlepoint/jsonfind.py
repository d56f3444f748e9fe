"""Finding the JSON value in a model's free text.

Models wrap JSON in prose, in one or several fenced blocks, or leave it bare at the end. This is the
one JSON finder in needlepoint; the rule is the Ref-Adv authors' (see docs/protocols/ref-adv-s.md) and
MC-Bench reuses it.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json)?(.*?)```", re.IGNORECASE | re.DOTALL)
_DECODER = json.JSONDecoder()
_MISSING = object()


def find_json(text: str) -> Any:
    """Return the JSON value a reply carries, or raise LookupError when there is none.

    Fenced blocks are tried from the last to the first; the first that parses wins. Failing that,
    the first `[` or `{` from which a JSON value decodes that ends exactly at the end of the
    right-stripped text.
    """
    for block in reversed(_FENCE.findall(text)):
        content = block.strip()
        if not content:
            continue
        try:
            return json.loads(content)
        except ValueError:
            continue
    value = _trailing_value(text.rstrip())
    if value is _MISSING:
        raise LookupError("no JSON value found")
    return value


def _trailing_value(text: str) -> Any:
    end = len(text)
    for i, ch in enumerate(text):
        if ch not in "[{":
            continue
        try:
            value, stop = _DECODER.raw_decode(text, i)
        except ValueError:
            continue
        if stop == end:
            return value
    return _MISSING
