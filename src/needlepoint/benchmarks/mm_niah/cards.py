"""What an MM-NIAH report card shows beyond the question: the document the model was given, its
needles marked, and the document's images, then the image options of a multiple-choice task, each
captioned with the letter the prompt gives it ("option A"), as the model saw them (a RAG record
shows what retrieval kept instead: rag_results.add_rag).

Cheap, because a report of long documents must not cost more than the run: the row is read again
in one read (`NiahSample.row`, its CRC-32 checked) and the card is cut out of its text by a few
searches (each needle's first occurrence, the sentence ends and image marks around it), never by
walking the whole document (its cutting into sentences cost 3.7 ms a 30k-token document, the
most of a report's cards; docs/performance.md). The records hold the text as sent, but not the
needles: the row is what names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from needlepoint.benchmarks.mm_niah.data import NiahSample
from needlepoint.benchmarks.mm_niah.rag_results import EXCERPT
from needlepoint.contract.base import ReportImage, ReportItem

__all__ = ["add_document", "document_parts", "image_captions"]

LABEL = "document (needles highlighted; long stretches between them shortened)"
PLACEHOLDER = "<image>"
SENTENCE_ENDS = (".", "!", "?")  # a sentence ends after one of these (rag.split_pieces cuts there too)


def image_captions(sample: NiahSample, row: dict[str, Any] | None = None) -> list[str]:
    """The caption of each of the sample's images, in prompt order: "Image N" for the document's,
    "option A", "option B", ... for the image options that follow them (`choices_image_path`: the
    letters the prompt gives them, data.full_text); every image is "Image N" when the row cannot
    be read again (the data file changed or moved since the run)."""
    shown = [f"Image {n}" for n in range(1, len(sample.images) + 1)]
    meta = row.get("meta") if isinstance(row, dict) else None
    options = meta.get("choices_image_path") if isinstance(meta, dict) and not meta.get("choices") else None
    if not isinstance(options, list) or not options:
        return shown
    first = len(sample.images) - len(options)
    if first < 0:
        return shown
    return shown[:first] + [f"option {chr(ord('A') + i)}" for i in range(min(len(options), 26))] + shown[first + 26 :]


def _sentence_start(text: str, at: int) -> int:
    """Where the sentence holding position `at` starts: after the last sentence end or image mark before it."""
    ends = [text.rfind(c, 0, at) + 1 for c in SENTENCE_ENDS]
    mark = text.rfind(PLACEHOLDER, 0, at)
    return max(*ends, mark + len(PLACEHOLDER) if mark >= 0 and mark + len(PLACEHOLDER) <= at else 0)


def _sentence_end(text: str, at: int) -> int:
    """Where the sentence holding position `at - 1` ends: after the first sentence end from there,
    or at the next image mark, or at the end of the text."""
    found = [i + 1 for c in SENTENCE_ENDS if (i := text.find(c, max(at - 1, 0))) >= 0]
    if (mark := text.find(PLACEHOLDER, at)) >= 0:
        found.append(mark)
    return min(found, default=len(text))


def _image_marks(text: str) -> list[int]:
    """Where each image mark of `text` starts."""
    from needlepoint.core import marks

    return marks.positions(text, PLACEHOLDER)


def document_parts(context: str, needles: Any, image_names: Sequence[str] = ()) -> list[tuple[str, bool]]:
    """The document as the card shows it: text runs in order, True for the needles' sentences (a
    text needle's first occurrence, widened to its sentences; an image needle's `<image>` mark, by
    the file name `image_names` gives each mark), runs between them longer than 3 x EXCERPT cut
    to their ends around an ellipsis. A few searches a needle, whatever the document's length."""
    spans: list[tuple[int, int]] = []
    marks_at: list[int] | None = None
    for needle in needles if isinstance(needles, list) else ():
        if not isinstance(needle, str) or not needle:
            continue
        if (start := context.find(needle)) >= 0:
            spans.append((_sentence_start(context, start), _sentence_end(context, start + len(needle))))
        elif needle in image_names:
            marks_at = _image_marks(context) if marks_at is None else marks_at
            spans += [(at, at + len(PLACEHOLDER)) for at, name in zip(marks_at, image_names) if name == needle]
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    parts: list[tuple[str, bool]] = []
    at = 0
    for start, end in [*merged, [len(context), len(context)]]:
        if start > at:
            text = context[at:start]
            parts.append((f"{text[:EXCERPT]} […] {text[-EXCERPT:]}" if len(text) > 3 * EXCERPT else text, False))
        if end > start:
            parts.append((context[start:end], True))
        at = max(at, end)
    return parts


def add_document(item: ReportItem, sample: NiahSample) -> None:
    """Give `item` the sample's document as text runs (the needles' sentences marked, an image as
    its `<image>` mark, long runs without a needle cut to their ends: `document_parts`) and the
    sample's images in prompt order, the image options captioned with their letters; the card
    stays as it is when the data file changed or moved since the run."""
    from needlepoint.benchmarks.mm_niah.data import haystack
    from needlepoint.core.errors import DataError

    try:
        row = sample.row()
        context = haystack(row)
    except (DataError, OSError, ValueError, KeyError):
        return
    if context:
        meta = row.get("meta")
        meta = meta if isinstance(meta, dict) else {}
        names = [str(n) for n in row.get("images_list") or []]
        item.context = document_parts(context, meta.get("needles"), names)
        item.context_label = LABEL
    item.images = [ReportImage(image, caption=caption) for image, caption in zip(sample.images, image_captions(sample, row))]
