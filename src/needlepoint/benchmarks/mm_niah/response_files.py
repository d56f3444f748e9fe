"""MM-NIAH response files, the format the authors' evaluation and project page take: one JSONL per
task and split, `{model}_{task}-{split}.jsonl` (a run keeps them under `leaderboard/`, the authors'
folder name).

We write exactly those files and read them back, so released response files can be re-scored with
the official judge and aggregation: predictions.py reads them as a run, which the benchmark's own
`score` scores.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mm_niah.aggregate import checked_depth_bin
from needlepoint.benchmarks.mm_niah.ranges import TASKS
from needlepoint.contract.base import DataError
from needlepoint.core.files import AtomicFile, json_text
from needlepoint.core.jsonl import read_jsonl
from needlepoint.core.numeric import size

FIELDS = ("question_id", "question", "answer", "response", "context_length", "placed_depth")
# Longest first: 'rag-val' must win over 'val' (the authors' own order).
SPLITS = ("rag-val", "val", "rag-test", "test")
_NEEDED = ("context_length", "placed_depth", "response")


def file_name(model: str, task: str, split: str) -> str:
    """`{model}_{task}-{split}.jsonl`, after checking the parts can be read back."""
    if not model or any(sep in model for sep in ("/", "\\", os.sep)):
        raise DataError(f"Model name {model!r} cannot be used in a file name; give a name without slashes.")
    if task not in TASKS:
        raise DataError(f"Task {task!r} is not an MM-NIAH task; use one of {', '.join(TASKS)}.")
    if split not in SPLITS:
        raise DataError(f"Split {split!r} is not one of {', '.join(SPLITS)}; pass val or test.")
    return f"{model}_{task}-{split}.jsonl"


def parse_file_name(path: Path) -> tuple[str, str, str]:
    """(model, task, split) from a response file's name; DataError naming the file otherwise."""
    name = path.name
    model, _, rest = name[: -len(".jsonl")].rpartition("_") if name.endswith(".jsonl") else ("", "", "")
    for split in SPLITS:
        task = rest[: -len(split) - 1]
        if model and rest.endswith(f"-{split}") and task in TASKS:
            return model, task, split
    raise DataError(
        f"{path} does not fit the response files' naming '{{model}}_{{task}}-{{split}}.jsonl' (task one of "
        f"{', '.join(TASKS)}; split val or test, e.g. mymodel_counting-image-test.jsonl); rename or move it."
    )


def write_response_files(
    out_dir: Path, model: str, split: str, rows_by_task: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[Path]:
    """Write one response file per task; rows keep exactly the six fields of the authors' format."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for task, rows in rows_by_task.items():
        path = out_dir / file_name(model, task, split)
        for index, row in enumerate(rows):
            absent = [key for key in FIELDS if key not in row]
            if absent:
                raise DataError(f"Row {index} of {task} lacks {', '.join(absent)}; every response row needs {', '.join(FIELDS)}.")
        with AtomicFile(path) as fh:
            for row in rows:
                fh.write(json_text({key: row[key] for key in FIELDS}) + "\n")
        paths.append(path)
    return paths


def read_response_file(path: Path) -> list[dict[str, Any]]:
    """The rows of one response file, in file order (order matters for the official sums).
    A file that repeats a `question_id` is refused with the count: each copy would count again."""
    rows = []
    first: dict[str, str] = {}
    repeated: list[str] = []
    for where, row in read_jsonl(Path(path)):
        absent = [key for key in _NEEDED if key not in row]
        if absent:
            raise DataError(f"{where} lacks {', '.join(absent)}; leaderboard rows carry {', '.join(FIELDS)}.")
        line = where.rpartition(" ")[2]
        size(row["context_length"], where, "context_length", "a length in tokens is 0 or more; fix that field")
        checked_depth_bin(row["placed_depth"], where)
        if row.get("question_id") is not None:
            key = json_text(row["question_id"])
            if key in first:
                repeated.append(f"line {line} repeats question_id {key} of line {first[key]}")
            first.setdefault(key, line)
        rows.append(row)
    if repeated:
        raise DataError(f"{path} holds {len(repeated)} duplicate row(s) ({repeated[0]}); remove them: each would count again.")
    return rows


def read_response_files(path: Path, split: str | None = None) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """{model: {task: rows}} from a folder of leaderboard files (or one such file).

    Files not ending in .jsonl and sub-folders are skipped; a .jsonl file whose name does not fit
    is an error. Without `split` the folder must hold a single split. Files are read in directory
    order, as the authors' script does (it fixes the order tasks enter the overall mean).
    """
    path = Path(path)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = [path / name for name in os.listdir(path) if name.endswith(".jsonl") and (path / name).is_file()]
    else:
        raise DataError(f"{path} does not exist; give a leaderboard folder or a {{model}}_{{task}}-{{split}}.jsonl file.")
    named = [(file, *parse_file_name(file)) for file in files]
    if split is not None:
        named = [item for item in named if item[3] == split]
    found = sorted({item[3] for item in named})
    if not named:
        raise DataError(
            f"{path} holds no leaderboard files{f' of split {split}' if split else ''}; expected {{model}}_{{task}}-{{split}}.jsonl files."
        )
    if len(found) > 1:
        raise DataError(f"{path} holds the splits {', '.join(found)}; choose one with --split to score them apart.")
    result: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for file, model, task, _ in named:
        result.setdefault(model, {})[task] = read_response_file(file)
    return result
