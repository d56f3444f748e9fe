"""What an MM-NIAH report card shows beyond the question: the document the model was given, its
needles marked, and the document's images (a RAG record shows what retrieval kept instead:
rag_results.add_rag)."""

from __future__ import annotations

from needlepoint.benchmarks.mm_niah.data import NiahSample
from needlepoint.benchmarks.mm_niah.rag_results import context_parts
from needlepoint.contract.base import ReportImage, ReportItem

__all__ = ["add_document"]

LABEL = "document (needles highlighted; long stretches between them shortened)"


def add_document(item: ReportItem, sample: NiahSample) -> None:
    """Give `item` the sample's document as text runs (the needles' pieces marked, an image as its
    `<image>` piece, long runs without a needle cut to their ends) and the sample's images in prompt
    order; the card stays as it is when the data file changed or moved since the run."""
    from needlepoint.benchmarks.mm_niah.rag import document
    from needlepoint.core.errors import DataError

    try:
        doc = document(sample)
    except (DataError, OSError, ValueError):
        return
    if doc.pieces:
        note = {"kept": [[0, len(doc.pieces) - 1]], "needles": [{"pieces": list(n.pieces)} for n in doc.needles]}
        item.context = context_parts(doc.pieces, note)
        item.context_label = LABEL
    item.images = [ReportImage(image) for image in sample.images]
