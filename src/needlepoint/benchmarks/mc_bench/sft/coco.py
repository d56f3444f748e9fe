"""A COCO-format detection file (COCO, LVIS, Objects365, OmniLabel exported to COCO) read into
compact columns: the images, the usable boxes, and what is known about each image's categories.

Skipped and counted: crowd annotations, degenerate boxes (not four finite numbers, under 1 px wide
or high, or outside the image after clipping), and annotations naming an unknown image or
category. A skipped annotation still tells that its category is present in its image, so no
sample ever asks for that category there (its answer could not be complete) or uses it as a
negative. LVIS-style files (images with `neg_category_ids`) are federated: a category counts as
absent from an image only when listed there as verified absent, and `not_exhaustive_category_ids`
make a category unusable on that image. Images without `file_name` (LVIS) take the last part of
`coco_url`.

A large file (COCO train's is 445 MB, LVIS's twice that) is decoded with only the annotation keys
the builder reads (`_Annotation`): the segmentation polygons, most of such a file, are skipped by
the decoder and never become Python objects, so the peak stays under 1 GB where a plain load
needs 2.7 GB. Whatever that typed decode cannot take (an annotation that is not an object, a
number msgspec cannot hold, an escaped surrogate) goes the plain way, with the same result. The
decoder is msgspec's, the `build` extra, imported only for such a file (the types it fills are plain
dataclasses, so this module imports without it).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from needlepoint.core.errors import DataError
from needlepoint.core.jsonl import BOM, read_bytes, read_json

PRESENT, ABSENT, UNKNOWN = 1, 0, -1
MIN_SIDE = 1.0  # a box narrower or lower than this many pixels is degenerate
COMPACT_FROM_BYTES = 64 << 20  # files from this size on are decoded with the annotation keys only
HINT = "give a COCO-format detection file (--coco instances.json)"
BUILD_EXTRA = "build"  # the optional install with msgspec (pyproject.toml's optional-dependencies)


@dataclass(slots=True)
class _Annotation:
    """The keys of an annotation the builder reads; a missing one reads as null, which fails as a
    missing key does (no image, category or id has the id null). Slots: as small as a msgspec
    Struct, and decoded as fast (msgspec fills dataclasses too)."""

    id: Any = None
    image_id: Any = None
    category_id: Any = None
    bbox: Any = None
    iscrowd: Any = None


@dataclass
class _Compact:
    images: list[Any]
    annotations: list[_Annotation]
    categories: list[Any]


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


@dataclass(frozen=True)
class Category:
    """A category with its supercategory (the category's own name when the file has none)."""

    id: int
    name: str
    supercategory: str


@dataclass
class DetectionSet:
    """Images (by index), usable boxes sorted by image, and per image the categories present
    (usable or not), the ones that may not be asked for, and (LVIS) the verified absent ones."""

    source: Path
    categories: list[Category]
    file_names: list[str]
    image_ids: np.ndarray  # int64, per image index
    sizes: np.ndarray  # float64 (n, 2): width, height
    ann_ids: np.ndarray  # int64, usable annotations, sorted by (image, category, file order)
    ann_image: np.ndarray  # int64 image index
    ann_cat: np.ndarray  # int64 category index
    ann_box: np.ndarray  # float64 (m, 4) xyxy, clipped to the image
    start: np.ndarray  # int64 (n + 1): image i's annotations are rows start[i]:start[i+1]
    present: list[frozenset[int]]
    unusable: list[frozenset[int]]
    verified_absent: list[frozenset[int]] | None  # None: exhaustive annotations (COCO)
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def n_images(self) -> int:
        return len(self.file_names)

    def status(self, image: int, cat: int) -> int:
        """PRESENT (usable boxes, complete), ABSENT (known to hold none) or UNKNOWN."""
        if cat in self.unusable[image]:
            return UNKNOWN
        if cat in self.present[image]:
            return PRESENT
        if self.verified_absent is None or cat in self.verified_absent[image]:
            return ABSENT
        return UNKNOWN

    def usable_categories(self, image: int) -> list[int]:
        """The categories that may be asked for on `image` and have boxes there, sorted."""
        return sorted(c for c in self.present[image] if c not in self.unusable[image])

    def boxes(self, image: int, cat: int) -> list[tuple[int, np.ndarray]]:
        """(annotation id, xyxy box) of every usable box of `cat` in `image`, in file order."""
        lo, hi = int(self.start[image]), int(self.start[image + 1])
        rows = np.flatnonzero(self.ann_cat[lo:hi] == cat) + lo
        return [(int(self.ann_ids[r]), self.ann_box[r]) for r in rows]


def _fail(path: Path, what: str) -> DataError:
    return DataError(f"{path} {what}; give a COCO-format detection file (images, annotations, categories)")


def _file_name(im: dict[str, Any]) -> str | None:
    name = im.get("file_name")
    if isinstance(name, str) and name:
        return name
    url = im.get("coco_url")
    return url.rsplit("/", 1)[-1] if isinstance(url, str) and url else None


def _boxes_xyxy(raw: list[Any], sizes: np.ndarray) -> np.ndarray:
    """COCO [x, y, w, h] per annotation as xyxy clipped to its image (`sizes`: width, height per
    row); a row that is not four finite numbers becomes NaN."""
    try:
        arr = np.array(raw, dtype=np.float64)
        if arr.shape != (len(raw), 4):
            raise ValueError
    except (TypeError, ValueError):
        arr = np.full((len(raw), 4), np.nan)
        for k, b in enumerate(raw):
            try:
                if isinstance(b, list) and len(b) == 4:
                    arr[k] = [float(v) for v in b]
            except (TypeError, ValueError):
                pass
    x1, y1 = np.clip(arr[:, 0], 0, sizes[:, 0]), np.clip(arr[:, 1], 0, sizes[:, 1])
    x2 = np.clip(arr[:, 0] + arr[:, 2], 0, sizes[:, 0])
    y2 = np.clip(arr[:, 1] + arr[:, 3], 0, sizes[:, 1])
    return np.stack([x1, y1, x2, y2], axis=1)


def _sets(n: int, img: np.ndarray, cat: np.ndarray, n_cats: int) -> list[set[int]]:
    """Per image, the set of categories of the given (image, category) rows."""
    out: list[set[int]] = [set() for _ in range(n)]
    for key in np.unique(img * n_cats + cat).tolist():
        out[key // n_cats].add(key % n_cats)
    return out


def _read(path: Path) -> tuple[list[Any], list[Any], list[Any]]:
    """The file's images, annotations and categories: a large file through `_Compact` where it
    decodes so, any other file (and a large one that does not) as plain JSON."""
    raw = read_bytes(path, HINT)
    if len(raw) >= COMPACT_FROM_BYTES and not _SURROGATE_ESCAPE.search(raw):
        try:
            import msgspec  # the build extra, needed only here
        except ImportError:
            raise DataError(_needs_msgspec(path, len(raw))) from None
        try:
            got = msgspec.json.decode(raw[len(BOM) :] if raw.startswith(BOM) else raw, type=_Compact)
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        else:
            return got.images, got.annotations, got.categories
    del raw
    data = read_json(path, HINT)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("images", "annotations", "categories")):
        raise _fail(path, "has no lists 'images', 'annotations' and 'categories'")
    return data["images"], data["annotations"], data["categories"]


def _needs_msgspec(path: Path, size: int) -> str:
    """The one sentence when a large file meets an install without msgspec: such a file is not
    loaded whole (the module's docstring), so the extra that brings msgspec is named."""
    return (
        f"reading {path} ({size >> 20} MB) with only the keys the builder uses needs msgspec; "
        f"install the {BUILD_EXTRA} extra with pip install -e '.[{BUILD_EXTRA}]'"
    )


def _fields(annotations: list[Any]) -> Iterator[tuple[Any, Any, Any, Any, Any] | None]:
    """(image_id, category_id, id, iscrowd, bbox) of each annotation (null where missing: no image
    or category has the id null, and no int is made of it), or None for one that is not an object."""
    for ann in annotations:
        if isinstance(ann, _Annotation):
            yield ann.image_id, ann.category_id, ann.id, ann.iscrowd, ann.bbox
        elif isinstance(ann, dict):
            yield ann.get("image_id"), ann.get("category_id"), ann.get("id"), ann.get("iscrowd"), ann.get("bbox")
        else:
            yield None


def read_detections(path: Path) -> DetectionSet:
    """Read and index a COCO-format detection file; DataError on a file of another shape."""
    images, annotations, raw_categories = _read(path)
    categories, cat_index = _categories(path, raw_categories)
    del raw_categories
    n = len(images)
    file_names: list[str] = []
    image_ids = np.empty(n, np.int64)
    sizes = np.empty((n, 2), np.float64)
    index: dict[int, int] = {}
    federated = any(isinstance(im, dict) and "neg_category_ids" in im for im in images)
    absent: list[frozenset[int]] = []
    unusable: list[set[int]] = []
    for i, im in enumerate(images):
        name = _file_name(im) if isinstance(im, dict) else None
        try:
            iid, w, h = int(im["id"]), float(im["width"]), float(im["height"])
        except (KeyError, TypeError, ValueError):
            raise _fail(path, f"has image {i} without an integer id, a width and a height") from None
        if name is None:
            raise _fail(path, f"has image {iid} without a file_name (or coco_url)")
        if iid in index:
            raise _fail(path, f"lists image id {iid} twice")
        index[iid] = i
        file_names.append(name)
        image_ids[i], sizes[i] = iid, (w, h)
        unusable.append({cat_index[c] for c in im.get("not_exhaustive_category_ids", ()) if c in cat_index})
        if federated:
            absent.append(frozenset(cat_index[c] for c in im.get("neg_category_ids", ()) if c in cat_index))
    skipped: Counter[str] = Counter()
    m = len(annotations)
    rows_img, rows_cat, rows_id = np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.int64)
    known, crowd = np.ones(m, bool), np.zeros(m, bool)
    raw: list[Any] = []
    for k, fields in enumerate(_fields(annotations)):
        try:
            if fields is None:
                raise TypeError("not an object")
            image_id, category_id, ann_id, iscrowd, bbox = fields
            rows_img[k], rows_cat[k], rows_id[k] = index[image_id], cat_index[category_id], ann_id
            crowd[k] = bool(iscrowd)
            raw.append(bbox)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
            known[k] = False
            raw.append(None)
    del annotations
    skipped["unknown image or category"] += int(m - known.sum())
    rows_img[~known] = rows_cat[~known] = 0
    box = _boxes_xyxy(raw, sizes[rows_img])
    del raw
    with np.errstate(invalid="ignore"):
        good = np.isfinite(box).all(axis=1) & (box[:, 2] - box[:, 0] >= MIN_SIDE) & (box[:, 3] - box[:, 1] >= MIN_SIDE)
    degenerate = known & ~crowd & ~good
    skipped["crowd"] += int(np.count_nonzero(known & crowd))
    skipped["degenerate"] += int(np.count_nonzero(degenerate))
    skipped = Counter({k: v for k, v in skipped.items() if v})
    n_cats = len(categories)
    present = _sets(n, rows_img[known], rows_cat[known], n_cats)
    bad = known & (crowd | degenerate)
    for i, cats in enumerate(_sets(n, rows_img[bad], rows_cat[bad], n_cats)):
        unusable[i] |= cats
    use = known & ~crowd & good
    ann_img, ann_cat = rows_img[use], rows_cat[use]
    order = np.lexsort((np.arange(len(ann_img)), ann_cat, ann_img))
    ann_img, ann_cat = ann_img[order], ann_cat[order]
    return DetectionSet(
        source=path,
        categories=categories,
        file_names=file_names,
        image_ids=image_ids,
        sizes=sizes,
        ann_ids=rows_id[use][order],
        ann_image=ann_img,
        ann_cat=ann_cat,
        ann_box=box[use][order],
        start=np.searchsorted(ann_img, np.arange(n + 1)).astype(np.int64),
        present=[frozenset(p) for p in present],
        unusable=[frozenset(u) for u in unusable],
        verified_absent=absent if federated else None,
        skipped=skipped,
    )


def _categories(path: Path, raw: list[Any]) -> tuple[list[Category], dict[int, int]]:
    out: list[Category] = []
    for k, c in enumerate(raw):
        try:
            cid, name = int(c["id"]), str(c["name"]).strip()
        except (KeyError, TypeError, ValueError):
            raise _fail(path, f"has category {k} without an integer id and a name") from None
        if not name:
            raise _fail(path, f"has category {cid} with an empty name")
        sup = c.get("supercategory")
        out.append(Category(cid, name.replace("_", " "), str(sup) if sup else name))
    out.sort(key=lambda c: c.id)
    index = {c.id: i for i, c in enumerate(out)}
    if len(index) != len(out):
        raise _fail(path, "lists a category id twice")
    if not out:
        raise _fail(path, "has no categories")
    return out, index
