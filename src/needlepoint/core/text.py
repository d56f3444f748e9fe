"""Strings from files, argv and servers made writable: every one that is printed or stored.

A lone surrogate cannot be encoded as UTF-8: a JSON `"\\ud800"` escape decodes to one, and so does
each byte of a command-line argument or file name that is not UTF-8 (Python's surrogateescape).
Printing or storing such a string (run.json, a report, a leaderboard) raises UnicodeEncodeError;
`writable` replaces each lone surrogate by U+FFFD first.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogates(text: str) -> bool:
    """Whether `text` holds a lone surrogate (it cannot be written as UTF-8)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def writable(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (unchanged when it has none)."""
    return _SURROGATE.sub("\ufffd", text) if has_surrogates(text) else text


def shown(text: str) -> str:
    """`text` as a message quotes it: writable, and a surrogateescape'd byte shown as \\xNN."""
    if not has_surrogates(text):
        return repr(text)
    if _escaped_only(text):
        return "'" + text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") + "'"
    return repr(writable(text))


def _escaped_only(text: str) -> bool:
    return all("\udc80" <= c <= "\udcff" for c in _SURROGATE.findall(text))
