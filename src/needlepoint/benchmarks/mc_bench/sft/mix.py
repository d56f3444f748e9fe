"""`--mix`: user-provided image-level multi-image samples (the paper's Birds-to-Words / Multi-VQA
half), checked and appended after the synthetic samples.

Read: a JSON list, or JSONL, of ShareGPT samples as LLaMA-Factory reads them, either
`{"messages": [{"role", "content"}], "images": [...]}` or `{"conversations": [{"from", "value"}],
"images": [...]}` (from: human/gpt/system). Checked: roles alternate user/assistant after an
optional system message and end with the assistant; every content is text; the `<image>`
placeholders number exactly the images; every image file exists (relative paths are taken from
the mix file's folder and written absolute, since the output lives elsewhere). Written in the
`messages` layout.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mc_bench.sft.writers import entry
from needlepoint.core.errors import DataError
from needlepoint.core.images import stays_inside
from needlepoint.core.jsonl import read_json, read_jsonl

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
FORMAT = "each sample needs messages (role, content) or conversations (from, value), and images"


def _entries(path: Path) -> Iterator[tuple[str, Any]]:
    if path.suffix == ".jsonl":
        yield from read_jsonl(path, "give --mix as a ShareGPT JSON list or JSONL")
        return
    data = read_json(path, "give --mix as a ShareGPT JSON list or JSONL")
    if not isinstance(data, list):
        raise DataError(f"--mix {path} is not a JSON list of samples; {FORMAT}")
    for i, e in enumerate(data):
        yield f"sample {i} of --mix {path}", e


def _messages(e: dict[str, Any], where: str) -> list[dict[str, str]]:
    if isinstance(e.get("messages"), list):
        raw, role_key, text_key = e["messages"], "role", "content"
    elif isinstance(e.get("conversations"), list):
        raw, role_key, text_key = e["conversations"], "from", "value"
    else:
        raise DataError(f"{where} has no messages or conversations list; {FORMAT}")
    out = []
    for m in raw:
        role = ROLES.get(str(m.get(role_key))) if isinstance(m, dict) else None
        if role is None or not isinstance(m.get(text_key), str):
            raise DataError(f"{where} has a message without a known role and text content; {FORMAT}")
        out.append({"role": role, "content": m[text_key]})
    turns = out[1:] if out and out[0]["role"] == "system" else out
    expected = ["user", "assistant"] * (len(turns) // 2)
    if not turns or len(turns) % 2 or [m["role"] for m in turns] != expected:
        raise DataError(f"{where}: messages must alternate user and assistant and end with the assistant; fix that sample")
    return out


def read_mix(path: Path) -> Iterator[dict[str, Any]]:
    """The mix file's samples, checked, in the output layout; DataError on the first bad one."""
    if not path.is_file():
        raise DataError(f"--mix {path} does not exist; give the image-level samples as ShareGPT JSON or JSONL")
    for where, e in _entries(path):
        if not isinstance(e, dict):
            raise DataError(f"{where} is not a JSON object; {FORMAT}")
        messages = _messages(e, where)
        images = e.get("images")
        if not isinstance(images, list) or not images or not all(isinstance(p, str) and p for p in images):
            raise DataError(f"{where} has no list of image paths; {FORMAT}")
        placeholders = sum(m["content"].count("<image>") for m in messages)
        if placeholders != len(images):
            raise DataError(
                f"{where} has {placeholders} <image> placeholder(s) for {len(images)} image(s); give one <image> per image"
            )
        resolved = []
        for p in images:
            full = Path(p) if Path(p).is_absolute() else path.parent / p
            if not Path(p).is_absolute() and not stays_inside(p):
                raise DataError(
                    f"{where} names image {p!r}, which leaves the mix file's folder; use paths inside it or absolute ones"
                )
            if not full.is_file():
                raise DataError(f"{where} names image {p}, which does not exist at {full}; fix the path")
            resolved.append(str(full.resolve()))
        yield entry(messages, resolved)
