"""MC-Bench ground truth: the release file (or the authors' COCO-format file) read into samples,
images and boxes, and the COCO layout that the authors' evaluator reads, rebuilt from it.

Both files hold the same boxes with the same ids; the release file also carries each
description's prompt style and positive flag. Everything is validated on load so that a wrong
file ends in one sentence naming the file and the field, never in a traceback during scoring.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, NoReturn, cast

import numpy as np

from needlepoint.benchmarks.mc_bench.cocoeval import GtBoxes
from needlepoint.contract.base import DataError
from needlepoint.core.images import stays_inside
from needlepoint.core.jsonl import read_json
from needlepoint.core.numeric import is_finite as is_number

STYLES: tuple[str, ...] = ("Referring", "Comparison", "Reasoning")
_FIX = "use the MC-Bench release file (mc-bench_v0.2_val.json) or MC-Bench_coco_format.json as published"


@dataclass(frozen=True)
class GtSample:
    """One description: its image pair (pair order), prompt text and style."""

    id: str
    image_ids: tuple[int, int]
    text: str
    style: str | None  # None when read from the COCO-format file, which has no styles
    positive: bool | None  # the release flag; metrics use the boxes, not this flag


@dataclass(frozen=True)
class GtImage:
    """One image of a pair, with its size and its place in the pair (0 or 1)."""

    id: int
    file_name: str
    width: float
    height: float
    sample_id: str
    position: int


@dataclass(frozen=True)
class GtBox:
    """One annotated box; `bbox` is COCO [x, y, w, h] with the file's own number types."""

    id: int
    image_id: int
    category_id: int
    bbox: tuple[float, float, float, float]
    area: float
    iscrowd: int


@dataclass(frozen=True)
class GroundTruth:
    """Samples, images and boxes in file order; `categories` is [(id, name)] in file order."""

    source: str
    samples: tuple[GtSample, ...]
    images: tuple[GtImage, ...]
    boxes: tuple[GtBox, ...]
    categories: tuple[tuple[int, str], ...]

    @cached_property
    def image_by_id(self) -> dict[int, GtImage]:
        return {im.id: im for im in self.images}

    @cached_property
    def sample_by_id(self) -> dict[str, GtSample]:
        return {s.id: s for s in self.samples}

    @cached_property
    def arrays(self) -> GtBoxes:
        """The boxes as numpy columns, for the evaluators."""
        n = len(self.boxes)
        return GtBoxes(
            ann_id=np.fromiter((b.id for b in self.boxes), np.int64, n),
            image_id=np.fromiter((b.image_id for b in self.boxes), np.int64, n),
            category_id=np.fromiter((b.category_id for b in self.boxes), np.int64, n),
            bbox=np.array([b.bbox for b in self.boxes], dtype=np.float64).reshape(n, 4),
            area=np.fromiter((b.area for b in self.boxes), np.float64, n),
            iscrowd=np.fromiter((b.iscrowd for b in self.boxes), np.bool_, n),
        )

    def pair_image_id(self, image_id: int) -> int:
        """The other image of `image_id`'s pair."""
        a, b = self.sample_by_id[self.image_by_id[image_id].sample_id].image_ids
        return b if image_id == a else a

    def subset(self, sample_ids: Iterable[str]) -> GroundTruth:
        """The ground truth of the given samples only (file order kept, ids unchanged)."""
        wanted = {str(s) for s in sample_ids}
        unknown = sorted(wanted - self.sample_by_id.keys())
        if unknown:
            raise DataError(
                f"sample id {unknown[0]!r} is not in {self.source}; sample ids are the description ids "
                f"(0..{len(self.samples) - 1} in the release), pass only those"
            )
        if not wanted:
            raise DataError(f"no samples were selected from {self.source}; select at least one sample")
        images = tuple(im for im in self.images if im.sample_id in wanted)
        keep = {im.id for im in images}
        return GroundTruth(
            source=self.source,
            samples=tuple(s for s in self.samples if s.id in wanted),
            images=images,
            boxes=tuple(b for b in self.boxes if b.image_id in keep),
            categories=self.categories,
        )

    def to_coco(self) -> dict[str, Any]:
        """The COCO layout of MC-Bench_coco_format.json, which the authors' evaluator reads."""
        images, annotations = [], []
        for im in self.images:
            s = self.sample_by_id[im.sample_id]
            images.append(
                {
                    "id": im.id,
                    "file_name": im.file_name,
                    "pair_id": int(s.id),
                    "id_in_pair": im.position + 1,
                    "height": im.height,
                    "width": im.width,
                    "pair_image_id": self.pair_image_id(im.id),
                    "description": s.text,
                }
            )
        for b in self.boxes:
            s = self.sample_by_id[self.image_by_id[b.image_id].sample_id]
            annotations.append(
                {
                    "id": b.id,
                    "image_id": b.image_id,
                    "pair_id": int(s.id),
                    "category_id": b.category_id,
                    "area": b.area,
                    "bbox": list(b.bbox),
                    "iscrowd": b.iscrowd,
                    "pair_image_id": self.pair_image_id(b.image_id),
                    "description": s.text,
                }
            )
        categories = [{"id": c, "name": n} for c, n in self.categories]
        return {"images": images, "annotations": annotations, "categories": categories}


def load_groundtruth(path: str | Path) -> GroundTruth:
    """Read the release file or the COCO-format file (told apart by their fields)."""
    path = Path(path)
    return groundtruth_from_json(read_json(path, _FIX), str(path))


def groundtruth_from_json(data: Any, source: str) -> GroundTruth:
    """Validate parsed JSON in either layout and build the ground truth; `source` names it in errors."""
    r = _Reader(source)
    if not isinstance(data, dict):
        r.fail("the top level", "is not a JSON object")
    if "descriptions" in data:
        return _from_release(r, data)
    if "images" in data and "annotations" in data:
        return _from_coco(r, data)
    r.fail("the top level", "has neither 'descriptions' (release file) nor 'images' and 'annotations' (COCO file)")


class _Reader:
    """Field access that turns every defect into a DataError naming the file and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, what: str) -> NoReturn:
        raise DataError(f"{self.source}: {where} {what}; {_FIX}")

    def get_list(self, data: dict[str, Any], key: str) -> list[Any]:
        v = data.get(key)
        if not isinstance(v, list):
            self.fail(f"field '{key}'", "is missing or not a list")
        return v

    def get(self, obj: Any, key: str, where: str) -> Any:
        if not isinstance(obj, dict):
            self.fail(where, "is not a JSON object")
        if key not in obj:
            self.fail(where, f"has no field '{key}'")
        return obj[key]

    def get_int(self, obj: Any, key: str, where: str, allowed: Iterable[int] | None = None) -> int:
        v = self.get(obj, key, where)
        if not isinstance(v, int) or isinstance(v, bool):
            self.fail(f"{where} field '{key}'", f"is {v!r}, not an integer")
        if allowed is not None and v not in allowed:
            self.fail(f"{where} field '{key}'", f"is {v!r}, not one of {sorted(allowed)}")
        return v

    def get_number(self, obj: Any, key: str, where: str) -> float:
        v = self.get(obj, key, where)
        if not is_number(v):
            self.fail(f"{where} field '{key}'", f"is {v!r}, not a finite number")
        return cast(float, v)

    def get_size(self, obj: Any, key: str, where: str) -> float:
        v = self.get_number(obj, key, where)
        if v < 0:
            self.fail(f"{where} field '{key}'", f"is {v!r}, a negative size")
        return v

    def get_str(self, obj: Any, key: str, where: str) -> str:
        v = self.get(obj, key, where)
        if not isinstance(v, str):
            self.fail(f"{where} field '{key}'", f"is {v!r}, not a string")
        return v

    def file_name(self, obj: Any, where: str) -> str:
        v = self.get_str(obj, "file_name", where)
        if not stays_inside(v):
            self.fail(f"{where} field 'file_name'", f"is {v!r}, which does not stay inside the images folder")
        return v

    def box(self, obj: Any, where: str, categories: set[int], images: dict[int, GtImage]) -> GtBox:
        bbox = self.get(obj, "bbox", where)
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(is_number(x) for x in bbox):
            self.fail(f"{where} field 'bbox'", f"is {bbox!r}, not [x, y, w, h] finite numbers")
        if bbox[2] < 0 or bbox[3] < 0:
            self.fail(f"{where} field 'bbox'", f"is {bbox!r}, with a negative width or height")
        image_id = self.get_int(obj, "image_id", where)
        if image_id not in images:
            self.fail(f"{where} field 'image_id'", f"is {image_id}, which is not an image of the file")
        iscrowd = self.get_int(obj, "iscrowd", where, (0, 1))
        if iscrowd:
            self.fail(f"{where} field 'iscrowd'", "is 1, but MC-Bench boxes are never crowd regions")
        return GtBox(
            id=self.get_int(obj, "id", where),
            image_id=image_id,
            category_id=self.get_int(obj, "category_id", where, categories),
            bbox=tuple(bbox),
            area=self.get_size(obj, "area", where),
            iscrowd=iscrowd,
        )

    def categories(self, data: dict[str, Any]) -> tuple[tuple[int, str], ...]:
        out = []
        for i, c in enumerate(self.get_list(data, "categories")):
            out.append((self.get_int(c, "id", f"categories[{i}]"), self.get_str(c, "name", f"categories[{i}]")))
        if len({c for c, _ in out}) != len(out):
            self.fail("field 'categories'", "repeats a category id")
        return tuple(out)


def _check_unique(r: _Reader, ids: list[int], what: str) -> None:
    seen: set[int] = set()
    for i, v in enumerate(ids):
        if v in seen:
            r.fail(f"{what}[{i}] field 'id'", f"repeats id {v}")
        seen.add(v)


def _from_release(r: _Reader, data: dict[str, Any]) -> GroundTruth:
    categories = r.categories(data)
    raw_images = r.get_list(data, "images")
    owner: dict[int, tuple[int, int]] = {}  # image id -> (description id, place in pair)
    samples = []
    for i, d in enumerate(r.get_list(data, "descriptions")):
        where = f"descriptions[{i}]"
        did = r.get_int(d, "id", where)
        pair = r.get(d, "images_id", where)
        if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair):
            r.fail(f"{where} field 'images_id'", f"is {pair!r}, not a pair of image ids")
        style = r.get_str(d, "text_style", where)
        if style not in STYLES:
            r.fail(f"{where} field 'text_style'", f"is {style!r}, not one of {', '.join(STYLES)}")
        positive = r.get(d, "positive_sample", where)
        if not isinstance(positive, bool):
            r.fail(f"{where} field 'positive_sample'", f"is {positive!r}, not true or false")
        for place, image_id in enumerate(pair):
            if image_id in owner:
                r.fail(f"{where} field 'images_id'", f"reuses image {image_id}")
            owner[image_id] = (did, place)
        samples.append(GtSample(str(did), (pair[0], pair[1]), r.get_str(d, "text", where), style, positive))
    _check_unique(r, [int(s.id) for s in samples], "descriptions")
    images = []
    for i, im in enumerate(raw_images):
        where = f"images[{i}]"
        iid = r.get_int(im, "id", where)
        if iid not in owner:
            r.fail(where, f"(id {iid}) is in no description's 'images_id'")
        did, place = owner[iid]
        if r.get_int(im, "text_id", where) != did or r.get_int(im, "inter_img_id", where, (0, 1)) != place:
            r.fail(where, f"(id {iid}) disagrees with description {did}'s 'images_id' on text_id or inter_img_id")
        images.append(_image(r, im, where, iid, str(did), place))
    _check_unique(r, [im.id for im in images], "images")
    if len(images) != len(owner):
        missing = sorted(owner.keys() - {im.id for im in images})[0]
        r.fail("field 'images'", f"lacks image {missing}, which a description names")
    by_id = {im.id: im for im in images}
    cats = {c for c, _ in categories}
    boxes = []
    for i, a in enumerate(r.get_list(data, "annotations")):
        box = r.box(a, f"annotations[{i}]", cats, by_id)
        if r.get_int(a, "text_id", f"annotations[{i}]") != int(by_id[box.image_id].sample_id):
            r.fail(f"annotations[{i}] field 'text_id'", "does not match its image's description")
        boxes.append(box)
    _check_unique(r, [b.id for b in boxes], "annotations")
    return GroundTruth(r.source, tuple(samples), tuple(images), tuple(boxes), categories)


def _image(r: _Reader, im: Any, where: str, iid: int, sample_id: str, place: int) -> GtImage:
    width, height = r.get_number(im, "width", where), r.get_number(im, "height", where)
    if width <= 0 or height <= 0:
        r.fail(where, f"(id {iid}) has a width or height that is not positive")
    return GtImage(iid, r.file_name(im, where), width, height, sample_id, place)


def _from_coco(r: _Reader, data: dict[str, Any]) -> GroundTruth:
    categories = r.categories(data)
    images: list[GtImage] = []
    pairs: dict[int, list[Any]] = {}  # pair id -> [first/second image id, ..., description, pair_image_ids]
    for i, im in enumerate(r.get_list(data, "images")):
        where = f"images[{i}]"
        iid = r.get_int(im, "id", where)
        pid = r.get_int(im, "pair_id", where)
        place = r.get_int(im, "id_in_pair", where, (1, 2)) - 1
        slot = pairs.setdefault(pid, [None, None, r.get_str(im, "description", where), {}])
        if slot[place] is not None:
            r.fail(where, f"(id {iid}) is a second image {place + 1} of pair {pid}")
        slot[place] = iid
        slot[3][iid] = r.get_int(im, "pair_image_id", where)
        images.append(_image(r, im, where, iid, str(pid), place))
    _check_unique(r, [im.id for im in images], "images")
    samples = []
    for pid, (a, b, text, partner) in pairs.items():
        if a is None or b is None or partner[a] != b or partner[b] != a:
            r.fail(f"pair {pid}", "does not have two images that name each other in 'pair_image_id'")
        samples.append(GtSample(str(pid), (a, b), text, None, None))
    by_id = {im.id: im for im in images}
    cats = {c for c, _ in categories}
    boxes = [r.box(a, f"annotations[{i}]", cats, by_id) for i, a in enumerate(r.get_list(data, "annotations"))]
    _check_unique(r, [b.id for b in boxes], "annotations")
    return GroundTruth(r.source, tuple(samples), tuple(images), tuple(boxes), categories)
