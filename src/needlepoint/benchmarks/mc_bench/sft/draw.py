"""Drawing one sample of a kind: the image pair, the description, the boxes per image and group.

Every random choice goes through one `random.Random`, in a fixed order, so a seed fixes the
output. The kinds are interleaved by a deterministic schedule that keeps each kind's count within
one of its share at every prefix (the count of N samples is exact up to rounding).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from needlepoint.benchmarks.mc_bench.sft.coco import ABSENT, PRESENT, UNKNOWN
from needlepoint.benchmarks.mc_bench.sft.pairs import Pools
from needlepoint.benchmarks.mc_bench.sft.templates import templates_for
from needlepoint.core.errors import DataError

ATTEMPTS = 200


@dataclass(frozen=True)
class AnswerBox:
    """One answer box: its group, source annotation id, and absolute xyxy in its image."""

    group: int
    ann_id: int
    box: tuple[float, float, float, float]


@dataclass(frozen=True)
class Draft:
    """One drawn sample before it is written."""

    kind: str
    pair: tuple[int, int]  # image indices, pair order
    text: str
    boxes: tuple[tuple[AnswerBox, ...], tuple[AnswerBox, ...]]
    groups: tuple[str, ...]  # what each group is (category name or expression), group g at g-1


def _box(values: np.ndarray) -> tuple[float, float, float, float]:
    x1, y1, x2, y2 = values.tolist()
    return x1, y1, x2, y2


def schedule(shares: Sequence[float], n: int) -> Iterator[int]:
    """Kind indices for n samples: at each step the kind furthest behind its share (ties: the
    first), so counts track the shares at every prefix; constant memory."""
    counts = [0] * len(shares)
    for i in range(n):
        k = max(range(len(shares)), key=lambda j: (shares[j] * (i + 1) - counts[j], -j))
        counts[k] += 1
        yield k


class Drawer:
    """Draws samples of each kind from the pools, with the rules in pairs.py and templates.py."""

    def __init__(self, pools: Pools, refs: dict[int, tuple[str, ...]], rng: random.Random) -> None:
        self.p, self.ds, self.refs, self.rng = pools, pools.ds, refs, rng
        self.same_super_pairs = 0
        self.pairs = 0
        self.both_with_targets = [0, 0]  # cat_both samples with boxes in both images, all cat_both

    def draw(self, kind: str) -> Draft:
        """One sample of `kind`; DataError when the data cannot supply it."""
        fn = getattr(self, "_" + kind)
        for _ in range(ATTEMPTS):
            got: Draft | None = fn()
            if got is not None:
                self.pairs += 1
                self.same_super_pairs += self.p.shares_supercategory(*got.pair)
                if kind == "cat_both":
                    self.both_with_targets[0] += all(got.boxes)
                    self.both_with_targets[1] += 1
                return got
        raise DataError(
            f"the annotations cannot supply samples of kind {kind} (no suitable image pair in {ATTEMPTS} draws); "
            f"set --share-{kind.replace('_', '-')} 0 or give a larger detection set"
        )

    # --- helpers -------------------------------------------------------------------------
    def _anchor(self) -> tuple[int, int]:
        a = int(self.p.with_boxes[self.rng.randrange(len(self.p.with_boxes))])
        cats = self.ds.usable_categories(a)
        return a, cats[self.rng.randrange(len(cats))]

    def _text(self, kind: str, second: bool = False, **values: str) -> str:
        options = templates_for(kind, second)
        return options[self.rng.randrange(len(options))].format(**values)

    def _boxes(self, image: int, cat: int, group: int) -> tuple[AnswerBox, ...]:
        return tuple(AnswerBox(group, aid, _box(box)) for aid, box in self.ds.boxes(image, cat))

    def _ref_box(self, row: int) -> AnswerBox:
        return AnswerBox(1, int(self.ds.ann_ids[row]), _box(self.ds.ann_box[row]))

    def _sentence(self, row: int) -> str:
        options = self.refs[int(self.ds.ann_ids[row])]
        return options[self.rng.randrange(len(options))]

    def _name(self, cat: int) -> str:
        return self.ds.categories[cat].name

    def _ordered(
        self, a: int, b: int, boxes_a: tuple[AnswerBox, ...], boxes_b: tuple[AnswerBox, ...]
    ) -> tuple[tuple[int, int], tuple[tuple[AnswerBox, ...], tuple[AnswerBox, ...]]]:
        """(pair, boxes) with the anchor placed first or second at random."""
        if self.rng.random() < 0.5:
            return (a, b), (boxes_a, boxes_b)
        return (b, a), (boxes_b, boxes_a)

    # --- kinds ---------------------------------------------------------------------------
    def _cat_one(self, kind: str, position: int) -> Draft | None:
        a, c = self._anchor()
        b = self.p.partner(self.rng, a, c)
        if b is None:
            return None
        boxes = self._boxes(a, c, 1)
        pair = (a, b) if position == 0 else (b, a)
        per_image = (boxes, ()) if position == 0 else ((), boxes)
        return Draft(kind, pair, self._text(kind, name=self._name(c)), per_image, (self._name(c),))

    def _cat_first(self) -> Draft | None:
        return self._cat_one("cat_first", 0)

    def _cat_second(self) -> Draft | None:
        return self._cat_one("cat_second", 1)

    def _cat_both(self) -> Draft | None:
        a, c0 = self._anchor()
        b = self.p.partner(self.rng, a, c0)
        if b is None:
            return None
        cats = self.ds.usable_categories(a)
        shared = [c for c in cats if self.ds.status(b, c) == PRESENT]
        options = shared or [c for c in cats if self.ds.status(b, c) == ABSENT]
        if not options:
            return None
        c = options[self.rng.randrange(len(options))]
        pair, boxes = self._ordered(a, b, self._boxes(a, c, 1), self._boxes(b, c, 1))
        return Draft("cat_both", pair, self._text("cat_both", name=self._name(c)), boxes, (self._name(c),))

    def _ref_one(self) -> Draft | None:
        if not len(self.p.ref_rows):
            return None
        row = int(self.p.ref_rows[self.rng.randrange(len(self.p.ref_rows))])
        a, c = int(self.ds.ann_image[row]), int(self.ds.ann_cat[row])
        b = self.p.partner(self.rng, a, c)
        if b is None:
            return None
        second = self.rng.random() < 0.5
        sentence = self._sentence(row)
        text = self._text("ref_one", second, ref=sentence)
        box = (self._ref_box(row),)
        pair, boxes = ((b, a), ((), box)) if second else ((a, b), (box, ()))
        return Draft("ref_one", pair, text, boxes, (sentence,))

    def _ref_both(self) -> Draft | None:
        if not len(self.p.ref_rows):
            return None
        r1 = int(self.p.ref_rows[self.rng.randrange(len(self.p.ref_rows))])
        a, c = int(self.ds.ann_image[r1]), int(self.ds.ann_cat[r1])
        r2 = self.p.partner(self.rng, a, c, refs=True)
        if r2 is None:
            return None
        s1, s2 = self._sentence(r1), self._sentence(r2)
        pair = (a, int(self.ds.ann_image[r2]))
        text = self._text("ref_both", ref=s1, ref2=s2)
        return Draft("ref_both", pair, text, ((self._ref_box(r1),), (self._ref_box(r2),)), (f"{s1} | {s2}",))

    def _two_groups(self) -> Draft | None:
        a, c0 = self._anchor()
        b = self.p.partner(self.rng, a, c0)
        if b is None:
            return None
        union = sorted(set(self.ds.usable_categories(a)) | set(self.ds.usable_categories(b)))
        cands = [c for c in union if self.ds.status(a, c) != UNKNOWN and self.ds.status(b, c) != UNKNOWN]
        if len(cands) < 2:
            return None
        c1, c2 = self.rng.sample(cands, 2)
        n1, n2 = self._name(c1), self._name(c2)
        if n1 == n2:
            return None
        boxes_a = self._boxes(a, c1, 1) + self._boxes(a, c2, 2)
        boxes_b = self._boxes(b, c1, 1) + self._boxes(b, c2, 2)
        pair, boxes = self._ordered(a, b, boxes_a, boxes_b)
        return Draft("two_groups", pair, self._text("two_groups", name=n1, name2=n2), boxes, (n1, n2))

    def _negative(self) -> Draft | None:
        a, c0 = self._anchor()
        b = self.p.partner(self.rng, a, c0)
        if b is None:
            return None
        hard = self.p.cats_by_super[self.p.super_of(c0)]
        every = range(len(self.ds.categories))
        first, second = (hard, every) if self.rng.random() < 0.5 else (every, hard)
        for pool in (first, second):
            options = [c for c in pool if self.ds.status(a, c) == ABSENT and self.ds.status(b, c) == ABSENT]
            if options:
                c = options[self.rng.randrange(len(options))]
                pair, boxes = self._ordered(a, b, (), ())
                return Draft("negative", pair, self._text("negative", name=self._name(c)), boxes, (self._name(c),))
        return None
