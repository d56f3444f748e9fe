"""The kinds of training sample, their default shares and their description templates.

A template writes only the *description*; the instruction around it is needlepoint's MC-Bench
eval prompt (built by `McBench.prompt`), so a model is trained on the words it is evaluated with.
Placeholders: `{name}`, `{name2}` (category names), `{ref}`, `{ref2}` (referring expressions).

| kind | description | answer |
|---|---|---|
| cat_first | a category, in the first image | its boxes in image 1, none in image 2 |
| cat_second | a category, in the second image | none in image 1, its boxes in image 2 |
| cat_both | a category, in the two images | its boxes in both images (group 1) |
| ref_one | a referring expression, in one named image | that one box |
| ref_both | one expression per image | the two boxes (group 1) |
| two_groups | two categories as two groups | group 1: the first category's boxes, group 2: the second's |
| negative | a category present in neither image | no box at all |
"""

from __future__ import annotations

KINDS: tuple[str, ...] = ("cat_first", "cat_second", "cat_both", "ref_one", "ref_both", "two_groups", "negative")
REF_KINDS: tuple[str, ...] = ("ref_one", "ref_both")

NEGATIVE_SHARE = 0.143
"""MC-Bench's share of samples without any box: 286 of the 2,000 descriptions of
mc-bench_v0.2_val.json have no box in either image (tests recompute it from the release)."""

DEFAULT_SHARES: dict[str, float] = {
    "cat_first": 0.15,
    "cat_second": 0.15,
    "cat_both": 0.20,
    "ref_one": 0.10,
    "ref_both": 0.10,
    "two_groups": 1.0 - 0.15 - 0.15 - 0.20 - 0.10 - 0.10 - NEGATIVE_SHARE,
    "negative": NEGATIVE_SHARE,
}

TEMPLATES: dict[str, tuple[str, ...]] = {
    "cat_first": ("every {name} in the first image", "each {name} in Image 1", "all instances of {name} in the first image"),
    "cat_second": ("every {name} in the second image", "each {name} in Image 2", "all instances of {name} in the second image"),
    "cat_both": (
        "every {name} in the two images",
        "each {name} in Image 1 and Image 2",
        "all instances of {name} in both images",
    ),
    "ref_one": ("{ref}, in the first image", "in Image 1: {ref}"),  # ref_one's second-image form is in REF_ONE_SECOND
    "ref_both": ("{ref} in the first image, and {ref2} in the second image", "in Image 1: {ref}; in Image 2: {ref2}"),
    "two_groups": (
        "every {name} and every {name2} in the two images, as two groups: group 1 for {name}, group 2 for {name2}",
        "each {name} (group 1) and each {name2} (group 2) in Image 1 and Image 2",
    ),
    "negative": (),  # negatives use the cat_both templates: the same question, with no answer
}
REF_ONE_SECOND: tuple[str, ...] = ("{ref}, in the second image", "in Image 2: {ref}")


def templates_for(kind: str, second: bool = False) -> tuple[str, ...]:
    """The templates a sample of `kind` is written with (`second`: ref_one in image 2)."""
    if kind == "negative":
        return TEMPLATES["cat_both"]
    if kind == "ref_one" and second:
        return REF_ONE_SECOND
    return TEMPLATES[kind]
