"""What an MM-NIAH report card shows beyond the question: the document the model was given, its
needles marked, and the document's images, then the image options of a multiple-choice task, each
captioned with the letter the prompt gives it ("option A"), as the model saw them (a RAG record
shows what retrieval kept instead: rag_results.add_rag)."""

from __future__ import annotations

from typing import Any

from needlepoint.benchmarks.mm_niah.data import NiahSample
from needlepoint.benchmarks.mm_niah.rag_results import context_parts
from needlepoint.contract.base import ReportImage, ReportItem

__all__ = ["add_document", "image_captions"]

LABEL = "document (needles highlighted; long stretches between them shortened)"


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


def add_document(item: ReportItem, sample: NiahSample) -> None:
    """Give `item` the sample's document as text runs (the needles' pieces marked, an image as its
    `<image>` piece, long runs without a needle cut to their ends) and the sample's images in prompt
    order, the image options captioned with their letters; the card stays as it is when the data
    file changed or moved since the run."""
    from needlepoint.benchmarks.mm_niah.rag import document_from_row
    from needlepoint.core.errors import DataError

    try:
        row = sample.row()
        doc = document_from_row(row, sample.images)
    except (DataError, OSError, ValueError):
        return
    if doc.pieces:
        note = {"kept": [[0, len(doc.pieces) - 1]], "needles": [{"pieces": list(n.pieces)} for n in doc.needles]}
        item.context = context_parts(doc.pieces, note)
        item.context_label = LABEL
    item.images = [ReportImage(image, caption=caption) for image, caption in zip(sample.images, image_captions(sample, row))]
