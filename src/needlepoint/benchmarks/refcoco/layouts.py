"""Which of RefCOCO's three layouts `--data` holds, and its samples (docs/protocols/refcoco.md):
the converted JSONL files (data.py), the lmms-lab parquet sets (hf.py), the original refer release
(refer.py), tried in that order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from needlepoint.benchmarks.refcoco.data import SPLITS, RefCocoSample, read_jsonl_split, split_of_name
from needlepoint.benchmarks.refcoco.hf import parquet_splits, read_parquet_split
from needlepoint.benchmarks.refcoco.refer import read_refer_splits, refer_sets
from needlepoint.contract import DataError

__all__ = ["load_samples"]


def _jsonl_files(data: Path) -> dict[str, Path]:
    """The converted files under `data` (the folder, or one level down as Qwen-VL's evaluator lays
    them out: data/refcoco+/refcoco+_val.jsonl), by split."""
    found: dict[str, Path] = {}
    for path in sorted([*data.glob("*.jsonl"), *data.glob("*/*.jsonl")]):
        split = split_of_name(path.name)
        if split is not None and path.is_file():
            found.setdefault(split, path)
    return found


def _pick(found: dict[str, Any], wanted: tuple[str, ...] | None, layout: str, data: Path) -> list[str]:
    """The splits to read: those asked for (each must be there) or every one found."""
    if wanted is None:
        return [s for s in SPLITS if s in found]
    missing = [s for s in wanted if s not in found]
    if missing:
        raise DataError(f"{data} ({layout}) holds no {', '.join(missing)}; drop it from --splits or add its files")
    return list(wanted)


def load_samples(data: Path, images: Path | None, splits: tuple[str, ...] | None) -> tuple[list[RefCocoSample], str]:
    """The samples of the asked splits (every split found when None) and the layout they came
    from ("jsonl", "parquet", "refer"); DataError in one sentence when `data` is none of them."""
    if not data.exists():
        raise DataError(f"--data {data} does not exist; point it at the RefCOCO files (docs/protocols/refcoco.md)")
    if data.is_file():
        split = split_of_name(data.name)
        if split is None:
            raise DataError(
                f"--data {data} is not named as a split ({', '.join(s + '.jsonl' for s in SPLITS)}); point --data at the folder"
            )
        chosen = _pick({split: data}, splits, "jsonl", data)
        return read_jsonl_split(data, chosen[0], images or data.parent), "jsonl"
    jsonl = _jsonl_files(data)
    if jsonl:
        return [
            s for split in _pick(jsonl, splits, "jsonl", data) for s in read_jsonl_split(jsonl[split], split, images or data)
        ], "jsonl"
    parquet = parquet_splits(data)
    if parquet:
        return [
            s for split in _pick(parquet, splits, "parquet", data) for s in read_parquet_split(data, parquet[split], split)
        ], "parquet"
    refer = refer_sets(data)
    if refer:
        return read_refer_splits(refer, splits, images or data), "refer"
    raise DataError(
        f"{data} holds none of the RefCOCO layouts (converted JSONL such as refcoco_val.jsonl, lmms-lab parquet folders "
        "RefCOCO/RefCOCOplus/RefCOCOg, or refs(unc).p with instances.json); see docs/protocols/refcoco.md"
    )
