"""`build mc_bench_sft` reads a large COCO-format file decoded with only the annotation keys it
uses (the segmentation polygons skipped by the decoder): the same DetectionSet as the plain load,
for well-formed files and for the odd annotations the plain path tolerates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from needlepoint.benchmarks.mc_bench.sft import coco
from needlepoint.core.errors import DataError


def _file(path: Path, annotations: list[Any], federated: bool = False) -> Path:
    images = [
        {"id": 1, "width": 640, "height": 480, "file_name": "a.jpg", "license": 3},
        {"id": 2, "width": 320.0, "height": 240, "coco_url": "http://x/b.jpg"},
        {"id": 3, "width": 100, "height": 100, "file_name": "c.jpg"},
    ]
    if federated:
        images[0]["neg_category_ids"] = [2]
        images[1]["not_exhaustive_category_ids"] = [1]
        images[2]["neg_category_ids"] = []
    data = {
        "info": {"year": 2017},
        "images": images,
        "annotations": annotations,
        "categories": [
            {"id": 1, "name": "traffic_light", "supercategory": "outdoor"},
            {"id": 2, "name": "dog"},
        ],
    }
    path.write_text(json.dumps(data))
    return path


def _annotations() -> list[dict[str, Any]]:
    polygon = [[float(v) for v in range(40)]]
    return [
        {"id": 10, "image_id": 1, "category_id": 1, "bbox": [10, 20, 30, 40], "iscrowd": 0, "segmentation": polygon, "area": 5.0},
        {"id": 11, "image_id": 1, "category_id": 2, "bbox": [0.5, 0.5, 600, 470.25], "segmentation": polygon},
        {"id": 12, "image_id": 2, "category_id": 2, "bbox": [5, 5, 0.5, 10]},  # degenerate: under 1 px wide
        {"id": 13, "image_id": 2, "category_id": 1, "bbox": [5, 5, 10, 10], "iscrowd": 1},  # crowd
        {"id": 14, "image_id": 99, "category_id": 1, "bbox": [1, 1, 5, 5]},  # unknown image
        {"id": 15, "image_id": 3, "category_id": 7, "bbox": [1, 1, 5, 5]},  # unknown category
        {"image_id": 3, "category_id": 1, "bbox": [1, 1, 5, 5]},  # no id
        {"id": None, "image_id": 3, "category_id": 1, "bbox": [1, 1, 5, 5]},  # a null id
        {"id": 16, "category_id": 1, "bbox": [1, 1, 5, 5]},  # no image
        {"id": 17, "image_id": 3.0, "category_id": 2, "bbox": [1, 2, 50, 60]},  # a float image id, as Python reads it
        {"id": 18, "image_id": 3, "category_id": 2, "bbox": "x"},  # a bbox that is no box
        {"id": 19, "image_id": 3, "category_id": 2},  # no bbox
    ]


def _as_dict(ds: coco.DetectionSet) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ds.__dataclass_fields__:
        value = getattr(ds, name)
        out[name] = value.tolist() if isinstance(value, np.ndarray) else value
    return out


@pytest.mark.parametrize("federated", [False, True])
def test_the_compact_decode_reads_what_the_plain_load_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, federated: bool
) -> None:
    path = _file(tmp_path / "instances.json", _annotations(), federated)
    plain = coco.read_detections(path)
    assert not isinstance(coco._read(path)[1][0], coco._Annotation)  # a small file: the plain load
    monkeypatch.setattr(coco, "COMPACT_FROM_BYTES", 0)
    images, annotations, _ = coco._read(path)
    assert all(isinstance(a, coco._Annotation) for a in annotations)  # the typed decode took it
    assert not hasattr(annotations[0], "segmentation") and images[0]["license"] == 3
    compact = coco.read_detections(path)
    assert _as_dict(compact) == _as_dict(plain)
    assert compact.skipped == {"unknown image or category": 5, "crowd": 1, "degenerate": 3}
    assert compact.ann_ids.tolist() == [10, 11, 17]


def test_a_file_the_typed_decode_cannot_take_is_read_the_plain_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = [
        *_annotations(),
        42,
        {"id": 20, "image_id": 3, "category_id": 2, "bbox": [1, 2, float("inf"), 4]},
        {"id": 21, "image_id": 1, "category_id": 1, "bbox": [1, 1, 9, 9], "name": "\ud83d\udc27"},
    ]
    path = _file(tmp_path / "instances.json", odd)
    plain = coco.read_detections(path)
    monkeypatch.setattr(coco, "COMPACT_FROM_BYTES", 0)
    assert not isinstance(coco._read(path)[1][0], coco._Annotation)  # 42 is not an object; Infinity is no JSON
    assert _as_dict(coco.read_detections(path)) == _as_dict(plain)
    assert plain.skipped["unknown image or category"] == 6


def test_a_file_of_another_shape_is_still_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coco, "COMPACT_FROM_BYTES", 0)
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({"images": [], "annotations": {}}))
    with pytest.raises(DataError, match="has no lists 'images', 'annotations' and 'categories'"):
        coco.read_detections(path)
    path.write_text("{not json")
    with pytest.raises(DataError, match="is not valid JSON"):
        coco.read_detections(path)
