"""Reading what a run wrote: its records, and the data the HTML report renders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def records(run_dir: Path) -> list[dict[str, Any]]:
    """A run folder's records.jsonl, every line in file order (a resumed sample's lines each)."""
    path = Path(run_dir) / "records.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def report_blob(page: Path) -> dict[str, Any]:
    """The JSON the report page's script renders, read here with plain string handling (the page's
    `\\u003c`-style escapes are JSON escapes)."""
    text = Path(page).read_text(encoding="utf-8")
    tag = '<script type="application/json" id="np-data">'
    assert text.count(tag) == 1
    start = text.index(tag) + len(tag)
    return json.loads(text[start : text.index("</script>", start)])
