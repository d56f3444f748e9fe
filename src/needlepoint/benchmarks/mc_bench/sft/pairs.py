"""Which images may be drawn, and the pair drawing rule.

The rule: an anchor image is drawn uniformly among the images that have a usable box, and one of
its usable categories is drawn uniformly (`ref_*` kinds: an annotation with a referring expression
is drawn uniformly instead). The partner is drawn, with probability SAME_SUPERCATEGORY, uniformly
among the images holding a usable box of a category of the same supercategory as the anchor's
category, and otherwise uniformly among all images (images without any box included); a draw of
the anchor itself is repeated. So pairs share a supercategory far more often than chance (the
manifest records both rates), and "both images" and "two groups" prompts find targets in both
images often. A file without supercategories (LVIS) makes each category its own supercategory.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from needlepoint.benchmarks.mc_bench.sft.coco import DetectionSet

SAME_SUPERCATEGORY = 0.7


@dataclass
class Pools:
    """The images and annotations samples are drawn from (excluded images already removed)."""

    ds: DetectionSet
    images: np.ndarray  # every allowed image
    with_boxes: np.ndarray  # allowed images with at least one usable category
    by_super: dict[str, np.ndarray]  # allowed images with a usable category of that supercategory
    ref_rows: np.ndarray  # annotation rows with referring expressions, on allowed images
    refs_by_super: dict[str, np.ndarray]
    cats_by_super: dict[str, list[int]]

    def super_of(self, cat: int) -> str:
        return self.ds.categories[cat].supercategory

    def partner(self, rng: random.Random, anchor: int, cat: int, refs: bool = False) -> int | None:
        """The second image for `anchor` by the rule above (with `refs`: an image with a referring
        expression); None when no other image can be drawn."""
        everything = self.ref_rows if refs else self.images
        same = (self.refs_by_super if refs else self.by_super)[self.super_of(cat)]
        pool = same if rng.random() < SAME_SUPERCATEGORY and len(same) else everything
        rows = pool if refs else None
        for _ in range(20):
            pick = int(pool[rng.randrange(len(pool))])
            image = int(self.ds.ann_image[pick]) if rows is not None else pick
            if image != anchor:
                return pick
        return None

    def shares_supercategory(self, a: int, b: int) -> bool:
        """Whether two images have usable categories of a common supercategory."""
        sa = {self.super_of(c) for c in self.ds.usable_categories(a)}
        return any(self.super_of(c) in sa for c in self.ds.usable_categories(b))


def build_pools(ds: DetectionSet, allowed: np.ndarray, ref_rows: np.ndarray) -> Pools:
    """Pools over the images where `allowed` (bool per image) holds; `ref_rows` are the rows of
    usable annotations that have referring expressions."""
    images = np.flatnonzero(allowed)
    key = np.unique(ds.ann_image * len(ds.categories) + ds.ann_cat)
    img, cat = key // len(ds.categories), key % len(ds.categories)
    ok = allowed[img] & np.fromiter((int(c) not in ds.unusable[int(i)] for i, c in zip(img, cat, strict=True)), bool, len(img))
    img, cat = img[ok], cat[ok]
    supers = sorted({c.supercategory for c in ds.categories})
    sup_index = {s: k for k, s in enumerate(supers)}
    cat_super = np.array([sup_index[c.supercategory] for c in ds.categories], np.int64)
    by_super = {}
    for s, k in sup_index.items():
        by_super[s] = np.unique(img[cat_super[cat] == k])
    ref_rows = ref_rows[allowed[ds.ann_image[ref_rows]]] if len(ref_rows) else ref_rows
    ref_super = cat_super[ds.ann_cat[ref_rows]] if len(ref_rows) else np.zeros(0, np.int64)
    refs_by_super = {s: ref_rows[ref_super == k] for s, k in sup_index.items()}
    cats_by_super: dict[str, list[int]] = {s: [] for s in supers}
    for i, c in enumerate(ds.categories):
        cats_by_super[c.supercategory].append(i)
    return Pools(ds, images, np.unique(img), by_super, ref_rows, refs_by_super, cats_by_super)
