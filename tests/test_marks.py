"""marks: the quick search for a short mark in a long text gives what str.split and str.count give
(and bytes.split, for a request body)."""

from __future__ import annotations

import random

import pytest

from needlepoint.benchmarks.mm_niah.data import haystack, image_pieces, placeholders
from needlepoint.core import marks

ALPHABET = ["<", "<", "i", "m", "a", "g", "e", ">", "/", "s", " ", "é", "😀", "<image>", "</s>", "<<"]


@pytest.mark.parametrize("mark", ["<image>", "</s>", "<<", "aa", "<"])
def test_positions_and_split_agree_with_str_on_random_texts(mark: str) -> None:
    rng = random.Random(26)
    for _ in range(400):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 1200)))
        found = marks.positions(text, mark)
        assert len(found) == text.count(mark), text
        assert marks.split(text, mark) == text.split(mark), text
        assert all(text.startswith(mark, at) for at in found)
        raw, raw_mark = text.encode(), mark.encode()  # bytes: a request body cut at its image slots
        assert marks.split(raw, raw_mark) == raw.split(raw_mark), text


def test_a_text_full_of_stray_first_characters_is_searched_in_full() -> None:
    """Past the stray characters that start no mark, the general search finds the rest."""
    text = "a<b" * 2000 + "<image>" + "<" * 300 + "x<image>y" + "<imag" * 50 + "<image>"
    assert marks.split(text, "<image>") == text.split("<image>")
    assert len(marks.positions(text, "<image>")) == 3
    with pytest.raises(ValueError):
        marks.positions(text, "")  # as str.split refuses an empty separator (it would never end)


def test_the_mm_niah_document_helpers_follow_the_authors_rule() -> None:
    row = {"context": "a</s>b<image>c</s><image>", "question": "q"}
    assert haystack(row) == "ab<image>c<image>"
    assert haystack({"context": "no marks <image> here"}) == "no marks <image> here"
    assert image_pieces("x<image>y<image>") == ["x", "y", ""]
    assert placeholders("<image><image>x<imag") == 2
