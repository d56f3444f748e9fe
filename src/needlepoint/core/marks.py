"""Where a short mark (`<image>`, `</s>`, a request body's image slot) occurs in a long text, found quickly.

`str.split`, `str.count` and `in` search a long text with a general algorithm, about 2 GB/s here:
70-80 us each for one 150 KB MM-NIAH document, and a request met the document three times that
way. A document holds few marks, so `positions` looks for the mark's first character (a `memchr`,
many times faster) and compares the rest where it stands: 8 us for the same document. A text
where that character is common (markup) is handed to the general search after `_STRAY` misses,
so no text costs more than about twice the general search.
"""

from __future__ import annotations

from typing import AnyStr

__all__ = ["positions", "split"]

_STRAY = 256  # first characters met that start no mark, before the general search takes over


def positions(text: AnyStr, mark: AnyStr) -> list[int]:
    """Where each occurrence of `mark` starts in `text`, left to right and not
    overlapping: the occurrences `text.split(mark)` cuts at and `text.count(mark)` counts (str or
    bytes). ValueError on an empty mark, as `str.split` raises."""
    if not mark:
        raise ValueError("empty mark")
    head, width = mark[:1], len(mark)
    found: list[int] = []
    stray = 0
    at = text.find(head)
    while at >= 0:
        if text.startswith(mark, at):
            found.append(at)
            at = text.find(head, at + width)
            continue
        stray += 1
        if stray > _STRAY:
            return found + _searched(text, mark, at + 1)
        at = text.find(head, at + 1)
    return found


def _searched(text: AnyStr, mark: AnyStr, start: int) -> list[int]:
    """`positions` from `start` by the general search."""
    found: list[int] = []
    at = text.find(mark, start)
    while at >= 0:
        found.append(at)
        at = text.find(mark, at + len(mark))
    return found


def split(text: AnyStr, mark: AnyStr) -> list[AnyStr]:
    """`text.split(mark)`, by `positions`."""
    pieces: list[AnyStr] = []
    start = 0
    for at in positions(text, mark):
        pieces.append(text[start:at])
        start = at + len(mark)
    pieces.append(text[start:])
    return pieces
