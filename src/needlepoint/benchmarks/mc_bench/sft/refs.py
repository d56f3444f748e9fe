"""Referring expressions: annotation id to sentences, from a RefCOCO-style refs file in JSON.

Two shapes are read: the refs list as the RefCOCO family ships it (converted from its pickle to
JSON): `[{"ann_id", "split", "sentences": [{"sent"|"raw": ...}]}]`, of which only entries whose
`split` is "train" (or that have no split) are used, so that RefCOCO's val/test expressions never
become training data; or a plain object `{"<ann_id>": ["sentence", ...]}`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from needlepoint.core.errors import DataError
from needlepoint.core.jsonl import read_json

HINT = "give RefCOCO-style refs as JSON: a list of {ann_id, split, sentences} or an object {ann_id: [sentences]}"


def _sentence(s: Any) -> str | None:
    if isinstance(s, dict):
        s = s.get("sent", s.get("raw"))
    if isinstance(s, str) and s.strip():
        return " ".join(s.split())
    return None


def read_refs(path: Path, skipped: Counter[str]) -> dict[int, tuple[str, ...]]:
    """Sentences by annotation id (file order, duplicates dropped); skipped entries are counted
    in `skipped` under "refs of another split" and "refs without a sentence"."""
    data = read_json(path, HINT)
    if isinstance(data, dict):
        entries = [{"ann_id": k, "sentences": v} for k, v in data.items()]
    elif isinstance(data, list):
        entries = data
    else:
        raise DataError(f"{path} is neither a list nor an object; {HINT}")
    out: dict[int, list[str]] = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "ann_id" not in e:
            raise DataError(f"entry {i} of {path} has no ann_id; {HINT}")
        try:
            aid = int(e["ann_id"])
        except (TypeError, ValueError):
            raise DataError(f"entry {i} of {path} has ann_id {e['ann_id']!r}, which is not an integer; {HINT}") from None
        if e.get("split") not in (None, "train"):
            skipped["refs of another split"] += 1
            continue
        sentences = e.get("sentences")
        got = [t for t in (_sentence(s) for s in (sentences if isinstance(sentences, list) else [sentences])) if t]
        if not got:
            skipped["refs without a sentence"] += 1
            continue
        have = out.setdefault(aid, [])
        for t in got:
            if t not in have:
                have.append(t)
    return {k: tuple(v) for k, v in out.items()}
