"""One rule for numbers read from data files, prediction files, model replies and flags.

A number is a JSON/Python int or float (numpy scalars too), not a boolean, finite, and within the
range of a float (an integer such as 10**400 is not: it overflows every computation downstream).
Sizes (widths, heights, areas, lengths) must also not be negative. Every reader checks through
here, so NaN, infinities and huge integers are refused with one sentence everywhere.

The same holds for the other field types a file carries: a count or id (`integer`) is a whole
number in its range, never 2.5, "five" or 10**30; a flag (`boolean`) is true or false, never "yes".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from needlepoint.core.errors import DataError

FLOAT_MAX = 1.7976931348623157e308


def is_number(value: Any) -> bool:
    """Whether `value` is a Python int or float, not a bool (NaN and infinities included: a page
    shows them as they are)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    """Whether `value` is a finite real number that fits a float (not a bool)."""
    if isinstance(value, bool) or not hasattr(value, "__float__") or isinstance(value, (str, bytes)):
        return False
    if isinstance(value, int):
        return -FLOAT_MAX <= value <= FLOAT_MAX
    try:
        return math.isfinite(value)
    except (TypeError, ValueError, OverflowError):
        return False


def finite(value: Any, where: str, what: str = "a value", hint: str = "fix that value") -> float:
    """`value` as a float; DataError saying `where` it is and what is wrong otherwise."""
    if not is_finite(value):
        raise DataError(f"{where}: {what} is {_show(value)}, not a finite number; {hint}")
    return float(value)


def size(value: Any, where: str, what: str = "a size", hint: str = "fix that value") -> float:
    """A finite number that is not negative (a width, height, area or length)."""
    number = finite(value, where, what, hint)
    if number < 0:
        raise DataError(f"{where}: {what} is {_show(value)}, a negative size; {hint}")
    return number


MAX_EXACT = 2**53  # the largest whole number every reader (a float, JavaScript) holds exactly


def integer(value: Any, where: str, what: str, hint: str = "fix that value", minimum: int = 0, maximum: int = MAX_EXACT) -> int:
    """A count or id read from a file: a whole number (an integral float such as 3.0 counts, as
    pandas writes them; a boolean, a string or 2.5 does not) from `minimum` to `maximum`;
    DataError saying `where` it is and what is wrong otherwise."""
    whole_float = isinstance(value, float) and value.is_integer()
    if isinstance(value, bool) or not (isinstance(value, int) or whole_float or _is_numpy_int(value)):
        raise DataError(f"{where}: {what} is {_show(value)}, not a whole number; {hint}")
    number = int(value)
    if number < minimum:
        raise DataError(f"{where}: {what} is {_show(value)}; it must be at least {minimum}; {hint}")
    if number > maximum:
        raise DataError(f"{where}: {what} is {_show(value)}; it must be at most {maximum:,}; {hint}")
    return number


def boolean(value: Any, where: str, what: str, hint: str = "fix that value", default: bool = False) -> bool:
    """A flag read from a file: JSON true or false (null or absent: `default`); "yes", 1 or "true"
    are refused, so that no spelling is read one way here and another way elsewhere."""
    if value is None:
        return default
    if not isinstance(value, bool) and type(value).__name__ != "bool_":  # numpy's bool from a parquet column
        raise DataError(f"{where}: {what} is {_show(value)}, not true or false; {hint}")
    return bool(value)


def _is_numpy_int(value: Any) -> bool:
    return hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu" and getattr(value, "ndim", 1) == 0


def is_box(value: Any) -> bool:
    """Four finite numbers in a list or tuple."""
    return isinstance(value, (list, tuple)) and len(value) == 4 and all(is_finite(v) for v in value)


def flag(name: str, value: Any, minimum: float | None = None, strict: bool = False, maximum: float | None = None) -> None:
    """Check a numeric command-line setting (a flag, or a --solver-option that stands for one):
    finite, at least (or above, when `strict`) `minimum`, at most `maximum`."""
    if value is None:
        return
    if not is_finite(value):
        raise DataError(f"{name} must be a finite number, not {_show(value)}")
    if minimum is not None and maximum is not None and not minimum <= value <= maximum:
        raise DataError(f"{name} must be between {minimum:g} and {maximum:g}, not {_show(value)}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        bound = "above" if strict else "at least"
        raise DataError(f"{name} must be {bound} {minimum:g}, not {_show(value)}")
    if maximum is not None and value > maximum:
        raise DataError(f"{name} must be at most {maximum:g}, not {_show(value)}")


def whole(name: str, value: Any, minimum: int) -> None:
    """Check a whole-number setting (a count, a budget): an int, not a bool, at least `minimum`."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise DataError(f"{name} must be a whole number, not {_show(value)}")
    flag(name, value, minimum)


def _show(value: Any) -> str:
    from needlepoint.core.text import writable

    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**60:
        return f"an integer of {len(str(abs(value)))} digits"
    text = writable(repr(value))
    return text if len(text) <= 60 else text[:57] + "..."


def whole_number(value: Any, maximum: int) -> int | None:
    """`value` as an int when it is a whole number (an int or an integral float, not a bool) of
    magnitude at most `maximum`; None otherwise (fractions, NaN, infinities, 1e300, 10**30): the
    check for a count or an id read from a model's reply, where an absurd number is no answer."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not is_finite(value):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if abs(value) <= maximum else None


def count_below(value: Any, bound: int) -> int | None:
    """`value` when it is a count a server may report: a JSON integer (not a bool, not a float
    such as 12.0 or 1e30) from 0 to below `bound`; None otherwise (the count is unknown)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
        return None
    return value


MAX_TURN_TOKENS = 10**9  # a turn's prompt, completion or reasoning count is below this (usage
# a server reports for one request), else that turn's usage is unknown
NO_USAGE = "the server sent no usage"


def unknown_usage(usage: Any) -> str | None:
    """Why a turn's `usage` says nothing usable (a clause, e.g. "prompt_tokens is 12.5, not a
    whole number from 0 to 999,999,999"), or None when it is usable: `prompt_tokens` (and, where
    given, `completion_tokens` and the reasoning tokens) each a JSON integer from 0 to below
    MAX_TURN_TOKENS, the reasoning tokens no more than the completion tokens they are part of."""
    if not isinstance(usage, Mapping) or "prompt_tokens" not in usage:
        reason = usage.get("unknown") if isinstance(usage, Mapping) else None
        return reason if isinstance(reason, str) and reason else NO_USAGE
    details = usage.get("completion_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, Mapping) else usage.get("reasoning_tokens")
    counts = {"prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens", 0)}
    counts["reasoning_tokens"] = 0 if reasoning is None else reasoning
    for name, value in counts.items():
        if count_below(value, MAX_TURN_TOKENS) is None:
            return f"{name} is {_show(value)}, not a whole number from 0 to {MAX_TURN_TOKENS - 1:,}"
    if counts["reasoning_tokens"] > counts["completion_tokens"]:
        return (
            f"reasoning_tokens {counts['reasoning_tokens']:,} exceed the completion_tokens "
            f"{counts['completion_tokens']:,} they are part of"
        )
    return None


def usable_tokens(usage: Any) -> tuple[int, int, int] | None:
    """(prompt, completion, reasoning) tokens of a server's `usage`, or None when unknown
    (`unknown_usage`). Reasoning tokens are read from `completion_tokens_details.reasoning_tokens`
    (OpenAI, vLLM) or a top-level `reasoning_tokens`; an absent completion or reasoning count is 0."""
    if unknown_usage(usage) is not None:
        return None
    details = usage.get("completion_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, Mapping) else usage.get("reasoning_tokens")
    return int(usage["prompt_tokens"]), int(usage.get("completion_tokens", 0)), int(reasoning or 0)


def added_usage(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two requests' usage (`clean_usage`'s) as one: their counts summed where both are usable,
    else the usable one (or the first given): what a request cost over its attempts."""
    if first is None or second is None:
        return first if second is None else second
    a, b = usable_tokens(first), usable_tokens(second)
    if a is None or b is None:
        return first if b is None else second
    return clean_usage(
        {
            "prompt_tokens": a[0] + b[0],
            "completion_tokens": a[1] + b[1],
            "completion_tokens_details": {"reasoning_tokens": a[2] + b[2]},
        }
    )


def clean_usage(usage: Any) -> dict[str, Any]:
    """What a turn keeps of a server's `usage`: the counts when usable, else `{"unknown": why}`
    (no impossible number reaches the records, metrics.json or the report)."""
    tokens = usable_tokens(usage)
    if tokens is None:
        return {"unknown": unknown_usage(usage)}
    prompt, completion, reasoning = tokens
    kept: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if reasoning:
        kept["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return kept
