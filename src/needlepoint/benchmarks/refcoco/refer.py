"""The original release (lichengunc/refer): `refs(unc).p` (RefCOCO, RefCOCO+) or `refs(umd).p`
(RefCOCOg, the umd split the model cards report) beside `instances.json`, in folders named
refcoco, refcoco+, refcocog (refer's `data/` layout) or `--data` one such folder itself.

refer.py reads the pickle with `pickle.load`, which runs whatever the file names. Here it is read by
an unpickler that refuses every global: the refs are plain lists, dicts, strings and numbers, and a
file that names any Python object is refused in one sentence, never loaded. Each ref holds
`split`, `ann_id`, `image_id` and `sentences` (each with `sent`); the box is the annotation's
COCO `bbox` (x, y, width, height) in `instances.json`, the image its `images` entry's `file_name`
(with `width` and `height`), found under `--images` (COCO's train2014 folder).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.refcoco.data import SPLITS, RefCocoSample, image_side, target_box
from needlepoint.contract import DataError, ImageRef, is_box, read_json, safe_file

__all__ = ["REFS", "PlainDataUnpickler", "read_plain_pickle", "read_refer_splits", "refer_sets"]

REFS = {"refcoco": "refs(unc).p", "refcoco+": "refs(unc).p", "refcocog": "refs(umd).p"}
"""The refs file of each set: UNC's splits for RefCOCO/+ (val, testA, testB), UMD's for RefCOCOg (val, test)."""


class ForbiddenGlobal(pickle.UnpicklingError):
    """A pickle names a Python object (a class, a function): `module.name`."""


class PlainDataUnpickler(pickle.Unpickler):
    """An unpickler of plain data only: every global (class, function, module attribute) is
    refused, so nothing in the file is ever called."""

    def find_class(self, module: str, name: str) -> Any:
        raise ForbiddenGlobal(f"{module}.{name}")


def read_plain_pickle(path: Path) -> Any:
    """The plain data (lists, dicts, strings, numbers) a pickle holds; DataError in one sentence
    when it names any Python object or cannot be read. Python 2 byte strings are read as UTF-8."""
    try:
        with path.open("rb") as fh:
            return PlainDataUnpickler(fh, encoding="utf-8", errors="replace").load()
    except ForbiddenGlobal as exc:
        raise DataError(
            f"{path} names the Python object {exc}, not only plain lists, dicts, strings and numbers; "
            "needlepoint does not unpickle objects: use the converted JSONL or the parquet sets instead"
        ) from None
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc.strerror or exc}); check --data") from None
    except Exception as exc:  # a damaged or foreign pickle raises many types
        raise DataError(
            f"{path} is not a readable pickle of plain data ({exc.__class__.__name__}); re-download the release"
        ) from None


def refer_sets(data: Path) -> dict[str, Path]:
    """The set folders that hold their refs file and instances.json, by set: `data` itself when it
    is named as a set (refcoco, refcoco+, refcocog), else such folders in it."""
    folders = [data] if data.name in REFS else [data / name for name in REFS]
    found = {f.name: f for f in folders if (f / REFS[f.name]).is_file() and (f / "instances.json").is_file()}
    if not found and data.name in REFS and (data / "instances.json").is_file():
        raise DataError(f"{data} holds instances.json but no {REFS[data.name]}; add it (the splits the model cards report)")
    return found


def _index(instances: Any, path: Path) -> tuple[dict[Any, dict[str, Any]], dict[Any, dict[str, Any]]]:
    """instances.json's annotations and images, by id."""
    if (
        not isinstance(instances, dict)
        or not isinstance(instances.get("annotations"), list)
        or not isinstance(instances.get("images"), list)
    ):
        raise DataError(f"{path} has no `annotations` and `images` lists; is it refer's instances.json?")
    anns = {a.get("id"): a for a in instances["annotations"] if isinstance(a, dict)}
    images = {i.get("id"): i for i in instances["images"] if isinstance(i, dict)}
    return anns, images


def _set_samples(name: str, folder: Path, wanted: set[str], images: Path) -> dict[str, list[RefCocoSample]]:
    refs_path = folder / REFS[name]
    refs = read_plain_pickle(refs_path)
    if not isinstance(refs, list):
        raise DataError(f"{refs_path} holds a {type(refs).__name__}, not the list of refs refer writes; re-download the release")
    anns, image_rows = _index(read_json(folder / "instances.json", "re-download the release"), folder / "instances.json")
    out: dict[str, list[RefCocoSample]] = {}
    for n, ref in enumerate(refs):
        where = f"{refs_path} ref {n}"
        if not isinstance(ref, dict) or not {"split", "ann_id", "image_id", "sentences"} <= set(ref):
            raise DataError(f"{where} is not a ref with split, ann_id, image_id and sentences; re-download the release")
        split = f"{name}_{ref['split']}"
        if split not in wanted:
            continue
        ann, image = anns.get(ref["ann_id"]), image_rows.get(ref["image_id"])
        if ann is None or image is None:
            raise DataError(
                f"{where}: annotation {ref['ann_id']} or image {ref['image_id']} is not in instances.json; re-download the release"
            )
        if not is_box(ann.get("bbox")):
            raise DataError(f"{where}: annotation {ref['ann_id']} has no bbox of four numbers; re-download the release")
        x, y, w, h = (float(v) for v in ann["bbox"])
        gt = target_box([x, y, x + w, y + h], where)
        file_name = str(image.get("file_name") or "")
        image_path, regular = safe_file(images, file_name, where)
        if not regular:
            raise DataError(f"{where}: image {image_path} does not exist; pass --images, COCO's train2014 folder")
        width, height = image_side(image.get("width"), where, "width"), image_side(image.get("height"), where, "height")
        sentences = ref["sentences"] if isinstance(ref["sentences"], list) else []
        for sentence in sentences:
            sent = sentence.get("sent") if isinstance(sentence, dict) else None
            if not isinstance(sent, str) or not sent.strip():
                raise DataError(f"{where}: a sentence without `sent`; re-download the release")
            rows = out.setdefault(split, [])
            rows.append(
                RefCocoSample(
                    id=f"{split}/{len(rows)}",
                    split=split,
                    index=len(rows),
                    caption=sent,
                    gt=gt,
                    width=width,
                    height=height,
                    image=ImageRef(key=file_name, path=image_path),
                    file_name=file_name,
                )
            )
    return out


def read_refer_splits(sets: dict[str, Path], splits: tuple[str, ...] | None, images: Path) -> list[RefCocoSample]:
    """The samples of the asked splits (every evaluation split of the sets found when None), in
    SPLITS order, each split's expressions in the refs' order."""
    wanted = set(splits) if splits is not None else {s for s in SPLITS if s.rsplit("_", 1)[0] in sets}
    missing_sets = sorted({s.rsplit("_", 1)[0] for s in wanted} - set(sets))
    if missing_sets:
        raise DataError(
            f"no {', '.join(f'{m}/{REFS[m]}' for m in missing_sets)} with instances.json under the data folder; drop those splits from --splits"
        )
    found: dict[str, list[RefCocoSample]] = {}
    for name, folder in sets.items():
        if any(s.startswith(name + "_") for s in wanted):
            found.update(_set_samples(name, folder, wanted, images))
    empty = [s for s in SPLITS if s in wanted and not found.get(s)]
    if splits is not None and empty:
        raise DataError(f"the refs hold no expression of {', '.join(empty)}; drop it from --splits")
    return [sample for split in SPLITS for sample in found.get(split, [])]
