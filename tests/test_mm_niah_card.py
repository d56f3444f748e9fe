"""Issue 42.7 (MM-NIAH's run-report card): the expected option is labelled "expected" beside the
model's answer (never a second "answer"), and an image option's thumbnail carries the letter the
prompt gives it ("option A"), the document's images staying "Image N"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import small_niah

from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.cards import image_captions


def test_the_card_says_expected_and_letters_the_image_options(tmp_path: Path) -> None:
    folder, settings, _ = small_niah(tmp_path / "data")
    bench = MmNiah(**settings)
    samples = bench.load(folder)
    records: list[Any] = [{"id": s.id, "status": "done", "turns": [{"reply": "B"}], "answer": "B"} for s in samples]
    items = bench.report_items(samples, records)
    assert items and all("expected" in it.fields and "answer" not in it.fields for it in items)
    by_id = {s.id: s for s in samples}
    with_options = 0
    for it in items:
        sample = by_id[it.id]
        row: Any = sample.row()
        options = row["meta"].get("choices_image_path") if not row["meta"].get("choices") else None
        captions = image_captions(sample, row)
        assert len(captions) == len(sample.images)
        if options:
            with_options += 1
            letters = [chr(ord("A") + i) for i in range(len(options))]
            assert captions[-len(options) :] == [f"option {x}" for x in letters]
            assert captions[: -len(options)] == [f"Image {n}" for n in range(1, len(captions) - len(options) + 1)]
        else:
            assert captions == [f"Image {n}" for n in range(1, len(captions) + 1)]
    assert with_options  # the demo set has image-option tasks
