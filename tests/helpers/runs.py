"""Reading what a run wrote: its records, and the data the HTML report renders."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from needlepoint.core.records import Record


def records(run_dir: Path) -> list[Record]:
    """A run folder's records.jsonl, every line in file order (a resumed sample's lines each)."""
    path = Path(run_dir) / "records.jsonl"
    lines: list[Record] = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines


TIMING = ("latency_s", "elapsed_s")


def untimed_record(record: Mapping[str, Any], also: tuple[str, ...] = ()) -> dict[str, Any]:
    """A record without its seconds (and the keys `also` names), on the record and on each turn:
    for comparing two runs of the same answers."""
    drop = (*TIMING, *also)
    out = {k: v for k, v in record.items() if k not in drop}
    out["turns"] = [{k: v for k, v in t.items() if k not in drop} for t in record.get("turns", [])]
    return out


def report_blob(page: Path) -> dict[str, Any]:
    """The JSON the report page's script renders, read here with plain string handling (the page's
    `\\u003c`-style escapes are JSON escapes)."""
    text = Path(page).read_text(encoding="utf-8")
    tag = '<script type="application/json" id="np-data">'
    assert text.count(tag) == 1
    start = text.index(tag) + len(tag)
    blob: dict[str, Any] = json.loads(text[start : text.index("</script>", start)])
    return blob


def untimed(metrics: dict[str, Any]) -> dict[str, Any]:
    """A copy of metrics.json without the seconds its usage block sums (`request_s`: two runs of the
    same answers never take the same time), for comparing two runs to the last digit."""
    out: dict[str, Any] = json.loads(json.dumps(metrics))
    usage = out.get("usage") or {}
    for row in [*usage.get("roles", {}).values(), usage.get("total", {})]:
        assert isinstance(row.pop("request_s"), (int, float))
    return out
