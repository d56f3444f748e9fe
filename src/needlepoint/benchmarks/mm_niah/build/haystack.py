"""One haystack: corpus pieces gathered to a target length (spooled to disk), then written out as
one release row with the needles placed at their depths.

Layout of a context: lines joined by a line break; a line is a paragraph (sentences joined by one
space) or `<image>` alone. Pieces are sentences and images. Token counts are exact under the
`tokens.text_tokens` rule and are summed piece by piece: a cl100k pre-token never spans a space
before a sentence or the break after a line, so a sentence's count (with its leading space, and the
line break when it ends a line) adds up to the segment's count; lines that get a needle are
recounted whole. Memory holds one line at a time: the gathered pieces wait in a spool file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from needlepoint.benchmarks.mm_niah.build import tokens
from needlepoint.benchmarks.mm_niah.build.corpus import CorpusImage, Item, Paragraph

IMAGES_PER_TEXT_TOKENS = 2000  # about one image per 2k text tokens (the paper), so images do not dominate;
# and never more image tokens than text tokens before them, which is what binds in short documents


class CorpusExhausted(Exception):
    """The corpus ran out before the haystack was full."""


@dataclass
class Unit:
    """A piece from the corpus stream: a sentence (`starts_line` when it opens a paragraph) or an image."""

    sentence: str | None = None
    starts_line: bool = False
    image: CorpusImage | None = None


class PieceStream:
    """Sentences and images of the corpus, in order, across documents; each is taken once."""

    def __init__(self, docs: Iterator[list[Item]]) -> None:
        self._docs = docs
        self._units: Iterator[Unit] = iter(())

    def _flatten(self, items: list[Item]) -> Iterator[Unit]:
        for item in items:
            if isinstance(item, Paragraph):
                for i, s in enumerate(item.sentences):
                    yield Unit(sentence=s, starts_line=i == 0)
            else:
                yield Unit(image=item)

    def next(self) -> Unit:
        while True:
            unit = next(self._units, None)
            if unit is not None:
                return unit
            doc = next(self._docs, None)
            if doc is None:
                raise CorpusExhausted
            self._units = self._flatten(doc)


@dataclass
class GatherStats:
    """Corpus images left out of haystacks, for the manifest."""

    images_thinned: int = 0  # beyond one image per 2k text tokens, or more image than text tokens
    images_too_long: int = 0  # would push the haystack past its length range
    sentences_too_long: int = 0
    haystacks_without_image: int = 0


@dataclass
class Gathered:
    """A spooled haystack: its file, line count, token total (no needles), images (line, position, tokens)."""

    spool: Path
    lines: int
    total: int
    text_tokens: int
    images: list[tuple[int, int, int]] = field(default_factory=list)


def gather(
    stream: PieceStream,
    target: int,
    upper: int,
    extra: int,
    slack: int,
    spool: Path,
    max_tiles: int,
    store_image: Callable[[CorpusImage], str],
    stats: GatherStats,
) -> Gathered:
    """Take pieces until haystack + `extra` (needle) tokens reach `target` + `slack`, leaving out
    any piece that would bring them within `slack` of `upper`.

    Each spool line is a JSON object: a paragraph {"s": sentences, "k": their counts (each with its
    leading space), "nl": the last sentence's count with the line break, null on the last line} or
    an image {"i": name, "n": tokens}. `total` counts a line break after every line but the last.
    """
    sentences: list[str] = []
    counts: list[int] = []
    lines = 0
    total = 0  # tokens so far, the open paragraph without its line break
    text = 0
    images: list[tuple[int, int, int]] = []
    image_tokens = 0

    with spool.open("w", encoding="utf-8") as fh:

        def close_paragraph() -> None:
            nonlocal lines, total, text
            if sentences:
                sep = "" if len(sentences) == 1 else " "
                with_break = tokens.count(sep + sentences[-1] + "\n")
                fh.write(json.dumps({"s": sentences, "k": counts, "nl": with_break}, ensure_ascii=False) + "\n")
                total += with_break - counts[-1]
                text += with_break - counts[-1]
                lines += 1
                sentences.clear()
                counts.clear()

        def after_image() -> None:
            nonlocal total, text
            if images and images[-1][0] == lines - 1:
                total += 1  # the line break after the image line opens the next text segment
                text += 1

        while total + extra < target + slack:
            unit = stream.next()
            if unit.image is not None:
                im = unit.image
                n = tokens.image_tokens(im.width, im.height, max_tiles)
                if len(images) * IMAGES_PER_TEXT_TOKENS > text or image_tokens + n > text:
                    stats.images_thinned += 1
                    continue
                if total + extra + n + 1 >= upper - slack:
                    stats.images_too_long += 1
                    continue
                close_paragraph()
                after_image()
                images.append((lines, total, n))
                image_tokens += n
                fh.write(json.dumps({"i": store_image(im), "n": n}) + "\n")
                lines += 1
                total += n
                continue
            sentence = unit.sentence or ""
            opens = unit.starts_line or not sentences
            n = tokens.count(("" if opens else " ") + sentence)
            if total + extra + n + 1 >= upper - slack:
                stats.sentences_too_long += 1
                continue
            if opens:
                close_paragraph()
                after_image()
            sentences.append(sentence)
            counts.append(n)
            total += n
            text += n
        if sentences:
            fh.write(json.dumps({"s": sentences, "k": counts, "nl": None}, ensure_ascii=False) + "\n")
            lines += 1
    return Gathered(spool, lines, total, text, images)


def read_spool(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)


# --- writing a row ------------------------------------------------------------------------------


@dataclass
class Insert:
    """Something placed at a depth: a text statement, or image lines (names and tokens)."""

    target: float  # position in haystack tokens
    statement: str | None = None
    images: list[tuple[str, int]] = field(default_factory=list)
    index: int = 0


@dataclass
class Written:
    """Totals of a written context."""

    text_tokens: int = 0
    image_tokens: int = 0
    images_list: list[str] = field(default_factory=list)


class ContextWriter:
    """Writes context lines as a JSON string into `out`, counting tokens; one line of lookahead
    tells whether a line is the last (the last line has no line break)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.pending: tuple[str, Any] | None = None
        self.first = True
        self.totals = Written()

    def add_text(self, sentences: list[str], counts: tuple[int, int] | None) -> None:
        """A paragraph; `counts` (with, without the break) when known, else it is recounted."""
        self._push(("t", (sentences, counts)))

    def add_image(self, name: str, n: int) -> None:
        self._push(("i", (name, n)))

    def _push(self, line: tuple[str, Any]) -> None:
        if self.pending is not None:
            self._emit(self.pending, last=False)
        self.pending = line

    def finish(self) -> Written:
        if self.pending is not None:
            self._emit(self.pending, last=True)
            self.pending = None
        return self.totals

    def _emit(self, line: tuple[str, Any], last: bool) -> None:
        kind, payload = line
        if kind == "t":
            sentences, counts = payload
            body = " ".join(sentences)
            if counts is None:
                n = tokens.count(body + ("" if last else "\n"))
            else:
                n = counts[1] if last else counts[0]
            self.totals.text_tokens += n
        else:
            name, n_img = payload
            body = tokens.PLACEHOLDER
            self.totals.image_tokens += n_img
            self.totals.text_tokens += 0 if last else 1  # the line break after it opens the next segment
            self.totals.images_list.append(name)
        self.out.write(json.dumps(body + ("" if last else "\n"), ensure_ascii=False)[1:-1])


def write_context(
    gathered: Gathered,
    inserts: list[Insert],
    writer: ContextWriter,
    skip_image_line: int | None = None,
    image_hook: Callable[[str, int], str] | None = None,
) -> list[int]:
    """Stream the spooled haystack into `writer` with each insert at the piece boundary nearest its
    target (a statement joins the paragraph there; images split it). Returns, per insert (by
    `index`), the haystack token position where it landed. `skip_image_line` leaves one image line
    out (an image moved to an insert); `image_hook(name, i)` may rename the i-th corpus image."""
    queue = sorted(inserts, key=lambda x: (x.target, x.index))
    landed: dict[int, int] = {}
    pos = 0
    image_index = 0

    def due(threshold: float) -> list[Insert]:
        out = []
        while queue and queue[0].target < threshold:
            ins = queue.pop(0)
            landed[ins.index] = pos
            out.append(ins)
        return out

    for number, line in enumerate(read_spool(gathered.spool)):
        last_line = number == gathered.lines - 1
        if "i" in line:
            if number == skip_image_line:
                continue
            size = line["n"] + (0 if last_line else 1)
            for ins in due(pos + size / 2):
                _write_insert(writer, ins)
            name = line["i"] if image_hook is None else image_hook(line["i"], image_index)
            image_index += 1
            writer.add_image(name, line["n"])
            pos += size
            continue
        sentences, counts, with_break = line["s"], line["k"], line["nl"]
        out: list[str] = []
        touched = with_break is None  # the last line is recounted: something may follow it now
        for j, (s, k) in enumerate(zip(sentences, counts)):
            size = with_break if j == len(sentences) - 1 and with_break is not None else k
            for ins in due(pos + size / 2):
                touched = True
                if ins.statement is not None:
                    out.append(ins.statement)
                else:
                    if out:
                        writer.add_text(out, None)
                    out = []
                    _write_insert(writer, ins)
            out.append(s)
            pos += size
        writer.add_text(out, None if touched else (sum(counts) - counts[-1] + with_break, sum(counts)))
    for ins in queue:  # past the end
        landed[ins.index] = pos
        _write_insert(writer, ins)
    return [landed[i] for i in sorted(landed)]


def _write_insert(writer: ContextWriter, ins: Insert) -> None:
    if ins.statement is not None:
        writer.add_text([ins.statement], None)
    for name, n in ins.images:
        writer.add_image(name, n)
