"""Writers for the fine-tuning tools' formats, streamed (memory does not grow with the count).

- `sharegpt`: LLaMA-Factory's ShareGPT layout in OpenAI-style messages: one JSON list of
  `{"messages": [{"role": "user", "content": "...<image>..."}, {"role": "assistant", ...}],
  "images": [path, path]}`, and `dataset_info.json` with the entry that registers it.
- `swift`: ms-swift's JSONL, one `{"messages": [...], "images": [...]}` per line (ms-swift reads
  the same `<image>` placeholders).

Files are written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import Any

from needlepoint.core.files import AtomicFile, write_json

FORMATS: tuple[str, ...] = ("sharegpt", "swift")
DATASET = "mc_bench_sft"


def data_file(fmt: str) -> str:
    """The data file's name in the output folder."""
    return f"{DATASET}.json" if fmt == "sharegpt" else f"{DATASET}.jsonl"


def entry(messages: list[dict[str, str]], images: list[str]) -> dict[str, Any]:
    """One sample in the layout both tools read."""
    return {"messages": messages, "images": images}


class SampleWriter:
    """Streams samples to the data file of `fmt` in `folder` (through the one atomic writer: the
    file appears whole when `close` is called, and not at all after an exception)."""

    def __init__(self, folder: Path, fmt: str) -> None:
        self.fmt = fmt
        self.path = folder / data_file(fmt)
        self._file = AtomicFile(self.path, fsync=False).__enter__()
        self.count = 0
        if fmt == "sharegpt":
            self._file.write("[")

    def write(self, sample: dict[str, Any]) -> None:
        line = json.dumps(sample, ensure_ascii=False)
        if self.fmt == "sharegpt":
            self._file.write(("," if self.count else "") + "\n" + line)
        else:
            self._file.write(line + "\n")
        self.count += 1

    def close(self) -> Path:
        """Finish the file and move it into place."""
        if self.fmt == "sharegpt":
            self._file.write("\n]\n")
        self._file.__exit__(None, None, None)
        return self.path

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self._file.__exit__(kind, exc, tb)


def write_dataset_info(folder: Path, fmt: str) -> Path | None:
    """LLaMA-Factory's dataset_info.json registering the data file (sharegpt only)."""
    if fmt != "sharegpt":
        return None
    path = folder / "dataset_info.json"
    write_json(
        path,
        {
            DATASET: {
                "file_name": data_file(fmt),
                "formatting": "sharegpt",
                "columns": {"messages": "messages", "images": "images"},
                "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
            }
        },
    )
    return path
