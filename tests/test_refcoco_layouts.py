"""RefCOCO's three layouts, each built here as its producer writes it: the converted JSONL files
(InternVL's and Qwen-VL's evaluators' download), the lmms-lab parquet sets (their card's columns,
a row an object with several expressions, `bbox` as COCO x, y, width, height) and the original
`refs(unc).p` + `instances.json` (lichengunc/refer), the pickle read as plain data only. Bad input
is one sentence and exit code 2."""

from __future__ import annotations

import io
import json
import pickle
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from helpers import one_sentence, run_quiet
from PIL import Image

from needlepoint.benchmarks.refcoco.benchmark import RefCoco
from needlepoint.benchmarks.refcoco.refer import read_plain_pickle
from needlepoint.contract import DataError


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (90, 120, 150)).save(out, format="PNG")
    return out.getvalue()


def write_jsonl(folder: Path, split: str, rows: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for row in rows:
        image = folder / row["image"]
        if not image.exists():
            image.parent.mkdir(parents=True, exist_ok=True)
            image.write_bytes(png(int(row["width"]), int(row["height"])))
    path = folder / f"{split}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def row(image: str, sent: str, bbox: list[float], w: int = 64, h: int = 48) -> dict[str, Any]:
    return {"image": image, "sent": sent, "bbox": bbox, "width": w, "height": h}


def test_the_converted_jsonl_layout_one_file_per_split(tmp_path: Path) -> None:
    data = tmp_path / "refcoco"
    write_jsonl(
        data, "refcoco_val", [row("train2014/a.png", "left man", [1, 2, 30, 40]), row("train2014/b.png", "cup", [0, 0, 10, 10])]
    )
    write_jsonl(
        data / "refcoco+", "refcoco+_testB", [row("train2014/a.png", "man in red", [5, 5, 20, 20])]
    )  # Qwen-VL's subfolders
    (data / "notes.jsonl").write_text("{}\n", encoding="utf-8")  # not named as a split: not read
    dataset = RefCoco(model_family="internvl").load(data)
    assert [(s.id, s.caption, s.gt, s.width, s.height) for s in dataset] == [
        ("refcoco_val/0", "left man", (1.0, 2.0, 30.0, 40.0), 64.0, 48.0),
        ("refcoco_val/1", "cup", (0.0, 0.0, 10.0, 10.0), 64.0, 48.0),
        ("refcoco+_testB/0", "man in red", (5.0, 5.0, 20.0, 20.0), 64.0, 48.0),
    ]
    assert dataset[0].image.path == data / "train2014" / "a.png"
    assert dataset.identity == {"layout": "jsonl", "splits_read": ["refcoco_val", "refcoco+_testB"]}
    only = RefCoco(model_family="internvl", splits="refcoco+_testB").load(data)
    assert [s.id for s in only] == ["refcoco+_testB/0"]
    # the images may live elsewhere: --images is the folder `image` paths start in
    images = tmp_path / "coco"
    write_jsonl(tmp_path / "other", "refcocog_test", [row("x.png", "dog", [1, 1, 5, 5])])
    images.mkdir()
    (tmp_path / "other" / "x.png").rename(images / "x.png")
    got = RefCoco(model_family="internvl", images=str(images)).load(tmp_path / "other")
    assert got[0].image.path == images / "x.png"


def write_parquet_set(folder: Path, split: str, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = folder / "data" / f"{split}-00000-of-00001.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def lmms_row(qid: str, answers: list[str], bbox: list[float], size: tuple[int, int], name: str) -> dict[str, Any]:
    """A row with the columns of the lmms-lab RefCOCO cards (image as the datasets Image struct)."""
    return {
        "question_id": qid,
        "image": {"bytes": png(*size), "path": name},
        "question": "Please carefully observe the area circled in the image and come up with a caption for the area.",
        "answer": answers,
        "segmentation": [1.0, 2.0, 3.0, 4.0],
        "bbox": bbox,
        "iscrowd": 0,
        "file_name": name,
    }


def test_the_lmms_lab_parquet_sets_one_sample_per_expression(tmp_path: Path) -> None:
    root = tmp_path / "hf"
    write_parquet_set(
        root / "RefCOCOg", "val", [lmms_row("1", ["the man on the left", "a man in a coat"], [10, 20, 30, 15], (80, 60), "a.jpg")]
    )
    write_parquet_set(root / "RefCOCOg", "test", [lmms_row("2", ["a cat"], [0, 0, 8, 8], (40, 30), "b.jpg")])
    write_parquet_set(root / "RefCOCO", "test", [lmms_row("3", ["not an evaluation split"], [0, 0, 8, 8], (40, 30), "c.jpg")])
    write_parquet_set(root / "RefCOCOplus", "testA", [lmms_row("4", ["blue shirt"], [1, 2, 3, 4], (50, 40), "d.jpg")])
    dataset = RefCoco(model_family="internvl").load(root)
    # bbox is x, y, width, height: [10, 20, 30, 15] is [10, 20, 40, 35]; the size is the image's
    assert [(s.id, s.caption, s.gt, s.width, s.height) for s in dataset] == [
        ("refcoco+_testA/0", "blue shirt", (1.0, 2.0, 4.0, 6.0), 50.0, 40.0),
        ("refcocog_val/0", "the man on the left", (10.0, 20.0, 40.0, 35.0), 80.0, 60.0),
        ("refcocog_val/1", "a man in a coat", (10.0, 20.0, 40.0, 35.0), 80.0, 60.0),
        ("refcocog_test/0", "a cat", (0.0, 0.0, 8.0, 8.0), 40.0, 30.0),
    ]
    assert dataset.identity["layout"] == "parquet"
    assert dataset[1].image.key == dataset[2].image.key  # the two expressions share their object's image
    assert Image.open(io.BytesIO(dataset[1].image.read_bytes())).size == (80, 60)
    # one set's folder given directly
    assert [s.id for s in RefCoco(model_family="internvl").load(root / "RefCOCOplus")] == ["refcoco+_testA/0"]


def write_refer(folder: Path, name: str, refs: Any, images: Path) -> None:
    set_folder = folder / name
    set_folder.mkdir(parents=True)
    (set_folder / "refs(unc).p").write_bytes(pickle.dumps(refs, protocol=2))
    instances = {
        "images": [{"id": 7, "file_name": "COCO_train2014_000000000007.jpg", "width": 64, "height": 48}],
        "annotations": [{"id": 70, "image_id": 7, "bbox": [4, 6, 20, 10], "category_id": 1}],
        "categories": [{"id": 1, "name": "person"}],
    }
    (set_folder / "instances.json").write_text(json.dumps(instances), encoding="utf-8")
    images.mkdir(parents=True, exist_ok=True)
    (images / "COCO_train2014_000000000007.jpg").write_bytes(png(64, 48))


def ref(split: str, *sents: str) -> dict[str, Any]:
    """A ref as refer writes it: plain dicts, lists, strings and numbers."""
    return {
        "ref_id": 1,
        "ann_id": 70,
        "image_id": 7,
        "split": split,
        "category_id": 1,
        "file_name": "COCO_train2014_000000000007_70.jpg",
        "sent_ids": list(range(len(sents))),
        "sentences": [{"sent": s, "raw": s.upper(), "tokens": s.split(), "sent_id": i} for i, s in enumerate(sents)],
    }


def test_the_original_release_read_as_plain_data(tmp_path: Path) -> None:
    images = tmp_path / "train2014"
    write_refer(
        tmp_path / "data", "refcoco", [ref("train", "skip me"), ref("testB", "left guy", "man"), ref("val", "right")], images
    )
    dataset = RefCoco(model_family="internvl", images=str(images)).load(tmp_path / "data")
    assert [(s.id, s.caption, s.gt, s.width) for s in dataset] == [
        ("refcoco_val/0", "right", (4.0, 6.0, 24.0, 16.0), 64.0),
        ("refcoco_testB/0", "left guy", (4.0, 6.0, 24.0, 16.0), 64.0),
        ("refcoco_testB/1", "man", (4.0, 6.0, 24.0, 16.0), 64.0),
    ]
    assert dataset.identity["layout"] == "refer"


def test_a_pickle_that_names_any_python_object_is_refused_unread(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (open, (str(marker), "w"))  # what a hostile refs file could make pickle.load do

    path = tmp_path / "refs(unc).p"
    path.write_bytes(pickle.dumps([{"split": "val", "sentences": Payload()}]))
    with pytest.raises(DataError, match=r"names the Python object (builtins|io)\.open"):
        read_plain_pickle(path)
    assert not marker.exists()
    path.write_bytes(pickle.dumps([OrderedDict(split="val")]))  # harmless, but still an object
    with pytest.raises(DataError, match="collections.OrderedDict"):
        read_plain_pickle(path)
    path.write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="not a readable pickle"):
        read_plain_pickle(path)
    # through the command line: one sentence, exit 2
    images = tmp_path / "im"
    write_refer(tmp_path / "bad", "refcoco", [ref("val", "x")], images)
    (tmp_path / "bad" / "refcoco" / "refs(unc).p").write_bytes(pickle.dumps([Payload()]))
    code, err = run_quiet(
        ["eval", "refcoco", "--data", str(tmp_path / "bad"), "--model", "m", "--model-family", "internvl", "--dry-run"]
    )
    assert code == 2 and "does not unpickle objects" in one_sentence(err)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        (lambda d: write_jsonl(d, "refcoco_val", [{"image": "a.png", "sent": "x", "width": 64, "height": 48}]), "lacks bbox"),
        (lambda d: write_jsonl(d, "refcoco_val", [row("../outside.png", "x", [0, 0, 1, 1])]), "stay inside"),
        (lambda d: write_jsonl(d, "refcoco_val", [row("a.png", "x", [10, 0, 1, 1])]), "x2 >= x1"),
        (lambda d: write_jsonl(d, "refcoco_val", [row("a.png", "", [0, 0, 1, 1])]), "`sent`"),
        (lambda d: d.mkdir(), "none of the RefCOCO layouts"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(tmp_path: Path, setup: Any, words: str) -> None:
    data = tmp_path / "data"
    setup(data)
    code, err = run_quiet(["eval", "refcoco", "--data", str(data), "--model", "m", "--model-family", "internvl", "--dry-run"])
    assert code == 2 and words in one_sentence(err)


def test_asked_splits_must_be_there(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d", "refcoco_val", [row("a.png", "x", [0, 0, 1, 1])])
    argv = ["eval", "refcoco", "--data", str(tmp_path / "d"), "--model", "m", "--model-family", "internvl", "--dry-run"]
    code, err = run_quiet([*argv, "--splits", "refcocog_test"])
    assert code == 2 and "holds no refcocog_test" in one_sentence(err)
    code, err = run_quiet([*argv, "--splits", "refclef_val"])
    assert code == 2 and "--splits takes" in one_sentence(err)
