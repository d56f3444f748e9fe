"""How a model family writes boxes in text, read and written in one place per syntax.

A `Syntax` finds each box *container* in a reply (InternVL's `<box>[[...]]</box>`, PaliGemma's four
`<locNNNN>` tokens, ...), splits it into boxes and turns each into four numbers in the family's
box format (core/geometry.py: its scale and axis order). `read` adds what every syntax shares: an
`Image N:` line starts image N, a `group N` in a label (or in plain text once a server stripped the
label's tokens) sets the group of the boxes after it on that line (before it, for a syntax whose
label follows its boxes), and `none` says an empty answer
on purpose.

Reading is lenient only about what servers and models do to the syntax itself: vLLM drops special
tokens from the reply unless asked not to, so each syntax is read with its tokens and without them
where the rest still says what the numbers are; spaces, and the text models put around the boxes.
It is never lenient about another syntax: a box written in another family's way is not found (a
parse error upstream), and an opening token with no box after it is `Malformed`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["NUMBER", "Foreign", "Found", "GroundedBox", "Malformed", "Syntax"]

NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_IMAGE_LINE = re.compile(r"\b(?:image|img|picture)[ _]?(\d+)\s*:", re.IGNORECASE)
_GROUP = re.compile(r"\bgroup[ _]?(\d+)", re.IGNORECASE)
_NONE = re.compile(r"\b(?:none|nothing)\b", re.IGNORECASE)

Values = tuple[float, float, float, float]


@dataclass(frozen=True)
class GroundedBox:
    """One box read from a reply: its four numbers in the family's box format, the image line it
    stands on (the number the reply gave, None before any `Image N:`), and the group its label names
    (None when no `group N` came before it on its line)."""

    box: Values
    image: int | None
    group: int | None


class Malformed(ValueError):
    """An opening token of the syntax with no box after it, or a container holding something
    other than boxes."""


class Foreign(ValueError):
    """A reply that holds a box in another family's syntax (named in `syntax`)."""

    def __init__(self, syntax: str) -> None:
        super().__init__(f"a box in {syntax}'s syntax")
        self.syntax = syntax


@dataclass(frozen=True)
class Found:
    """What a reply holds in a syntax: its boxes in order, and whether it says `none` anywhere
    outside them (an empty answer given on purpose, not a reply in another syntax)."""

    boxes: list[GroundedBox]
    says_none: bool


def _four(match: re.Match[str]) -> Values:
    a, b, c, d = (float(v) for v in match.groups()[:4])
    return a, b, c, d


@dataclass(frozen=True)
class Syntax:
    """One family's way of writing boxes.

    `container`: one run of boxes as written (its `body` group holds the boxes); `box`: one box
    inside a body, its four groups the numbers (or what `values` turns into them); `separator`: what
    may stand between two boxes of a body; `opener`: the token that announces a container, so that
    one without a box after it is `Malformed`; `write`: four numbers (already in the family's box
    format) as one box in the syntax; `label`: a phrase as the syntax labels boxes (before them);
    `example`: one box with its corners named (x1, y1, ...), as prompts and repair turns show it;
    `tokens`: the syntax's special tokens, which a server may strip from the reply; `label_after`:
    the label follows its boxes (PaliGemma) rather than preceding them."""

    name: str
    container: re.Pattern[str]
    box: re.Pattern[str]
    write: Callable[[Sequence[float]], str]
    label: Callable[[str], str]
    example: str
    separator: str = r"\s*,?\s*"
    opener: str | None = None
    tokens: tuple[str, ...] = ()
    values: Callable[[re.Match[str]], Values] = _four
    label_after: bool = False
    _separator: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_separator", re.compile(self.separator))

    def boxes_in(self, body: str) -> list[Values]:
        """The boxes of one container's body, in order; Malformed when the body holds anything
        other than boxes and separators."""
        out: list[Values] = []
        pos = 0
        while pos < len(body):
            gap = self._separator.match(body, pos)
            if gap and gap.end() > pos:
                pos = gap.end()
                if pos == len(body):
                    break
            match = self.box.match(body, pos)
            if match is None:
                raise Malformed(f"{body[pos : pos + 40]!r} is not a box in {self.name}'s syntax")
            out.append(self.values(match))
            pos = match.end()
        if not out:
            raise Malformed(f"an empty box in {self.name}'s syntax")
        return out

    def find(self, text: str) -> list[tuple[int, Values]]:
        """(position, numbers) of every box in `text`, in order; Malformed when an opening token
        has no box after it or a container holds something else."""
        found: list[tuple[int, Values]] = []
        covered: set[int] = set()
        for match in self.container.finditer(text):
            covered.update(range(match.start(), match.end()))
            found.extend((match.start(), values) for values in self.boxes_in(match.group("body")))
        if self.opener is not None:
            for match in re.finditer(re.escape(self.opener), text):
                if match.start() not in covered:
                    raise Malformed(f"a {self.opener} without a box after it")
        return found

    def read(self, text: str) -> Found:
        """Every box of a reply in order, with its image line and group (see the module's note; a
        syntax whose label follows its boxes gives a `group N` to the boxes before it)."""
        marks = [(m.start(), 0, int(m.group(1))) for m in _IMAGE_LINE.finditer(text)]
        marks += [(m.start(), 1, int(m.group(1))) for m in _GROUP.finditer(text)]
        boxes = self.find(text)
        events = sorted([(pos, kind, i) for pos, kind, i in marks] + [(pos, 2, i) for i, (pos, _) in enumerate(boxes)])
        image: int | None = None
        group: int | None = None
        out: list[GroundedBox] = []
        unlabelled: list[int] = []  # label_after: the boxes of this line since its last label
        for _, kind, value in events:
            if kind == 0:
                image, group, unlabelled = value, None, []
            elif kind == 1 and self.label_after:
                for i in unlabelled:
                    out[i] = GroundedBox(out[i].box, out[i].image, value)
                unlabelled = []
            elif kind == 1:
                group = value
            else:
                unlabelled.append(len(out))
                out.append(GroundedBox(boxes[value][1], image, group))
        return Found(out, bool(_NONE.search(self.container.sub(" ", text))))

    def labelled_example(self, label: str) -> str:
        """`example` with a label, in the order the syntax writes them (prompts show it)."""
        return self.example + self.label(label) if self.label_after else self.label(label) + self.example

    def answer(self, boxes: Sequence[Sequence[float]], label: str | None = None) -> str:
        """Boxes as the family writes them: the label (when given) and each box in turn."""
        written = "".join(self.write(b) for b in boxes)
        if not label:
            return written
        return written + self.label(label) if self.label_after else self.label(label) + written
