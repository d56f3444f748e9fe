"""What the RAG solver's records add to MM-NIAH's metrics, tables and report: did the needles
survive retrieval? (The number that explains a RAG result.)

Read from each record's `solver.rag` note (rag_solver.note_of): `needles_kept` is True when every
needle of `meta.needles` that could be located among the pieces was kept, False when one was
dropped, None when none could be located (image needles pasted into an image, counting rows
without needle sentences); those rows count as "not located" and stay out of the shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from needlepoint.benchmarks.mm_niah.aggregate import context_bin
from needlepoint.benchmarks.mm_niah.data import NiahSample
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_RANGES, TASKS
from needlepoint.contract.base import ReportItem, Table, percent
from needlepoint.core.records import Record

__all__ = [
    "BELOW",
    "DROPPED",
    "KEPT",
    "NOT_LOCATED",
    "add_rag",
    "context_parts",
    "needle_shares",
    "needle_state",
    "rag_note",
    "rag_tables",
]

BELOW = "<1k"
KEPT, DROPPED, NOT_LOCATED = "kept", "dropped", "not located"
EXCERPT = 240  # characters kept on each side of an elided stretch of the kept context


def rag_note(record: Record) -> dict[str, Any] | None:
    """The RAG solver's note of a record, or None (another solver, or a failure before retrieval)."""
    solver = record.get("solver")
    note = solver.get("rag") if isinstance(solver, dict) else None
    return note if isinstance(note, dict) else None


def needle_state(note: dict[str, Any]) -> str:
    """KEPT, DROPPED or NOT_LOCATED for a record's RAG note."""
    kept = note.get("needles_kept")
    return NOT_LOCATED if kept is None else KEPT if kept else DROPPED


def _range(context_length: float) -> str:
    b = context_bin(context_length)
    return BELOW if b == 0 else CONTEXT_RANGES[b - 1]


def needle_shares(samples: Sequence[NiahSample], records: Sequence[Record]) -> dict[str, Any] | None:
    """The share of samples whose needles were kept, per task and context range (by the original
    document's length) and over all, with the counts behind each share; None when no record has a
    RAG note."""
    by_id = {s.id: s for s in samples}
    cells: dict[tuple[str, str], list[int]] = {}
    not_located: dict[str, int] = {}
    seen = False
    for rec in records:
        note = rag_note(rec)
        s = by_id.get(rec.get("id", ""))
        if note is None or s is None:
            continue
        seen = True
        state = needle_state(note)
        if state == NOT_LOCATED:
            for task in (s.task, "all"):
                not_located[task] = not_located.get(task, 0) + 1
            continue
        for key in ((s.task, _range(s.context_length)), (s.task, "all"), ("all", _range(s.context_length)), ("all", "all")):
            cell = cells.setdefault(key, [0, 0])
            cell[0] += state == KEPT
            cell[1] += 1
    if not seen:
        return None
    ranges = [r for r in (BELOW, *CONTEXT_RANGES) if ("all", r) in cells]

    def block(task: str) -> dict[str, Any]:
        got = [cells.get((task, r)) for r in ranges]
        total = cells.get((task, "all"), [0, 0])
        return {
            "shares": [None if c is None else c[0] / c[1] for c in got],
            "kept": [0 if c is None else c[0] for c in got],
            "located": [0 if c is None else c[1] for c in got],
            "overall": total[0] / total[1] if total[1] else None,
            "n_kept": total[0],
            "n_located": total[1],
            "n_not_located": not_located.get(task, 0),
        }

    tasks = [t for t in TASKS if (t, "all") in cells or t in not_located]
    return {"context_ranges": ranges, "tasks": {t: block(t) for t in tasks}, "overall": block("all")}


def rag_tables(metrics: dict[str, Any]) -> list[Table]:
    """The needle-kept shares as a table (none without RAG records)."""
    rag = metrics.get("rag")
    if not isinstance(rag, dict) or not isinstance(rag.get("tasks"), dict):
        return []
    table = Table(
        "MM-NIAH RAG: samples whose needles were kept by retrieval (%, by the document's context range)",
        ["task", *rag["context_ranges"], "overall", "located", "not located"],
    )
    for task, m in [*rag["tasks"].items(), ("overall", rag["overall"])]:
        table.rows.append([task, *(percent(v) for v in m["shares"]), percent(m["overall"]), m["n_located"], m["n_not_located"]])
    return [table]


def context_parts(pieces: Sequence[str], note: dict[str, Any]) -> list[tuple[str, bool]]:
    """The kept context as the report shows it: text runs in document order, the needle pieces
    marked (True); long unmarked runs are cut to their ends around an ellipsis."""
    kept = [i for a, b in note.get("kept") or [] for i in range(int(a), int(b) + 1) if 0 <= i < len(pieces)]
    marked = {int(i) for h in note.get("needles") or [] if isinstance(h, dict) for i in h.get("pieces") or []}
    parts: list[tuple[str, bool]] = []
    for i in kept:
        flag = i in marked
        if parts and parts[-1][1] == flag:
            parts[-1] = (parts[-1][0] + pieces[i], flag)
        else:
            parts.append((pieces[i], flag))
    out = []
    for text, flag in parts:
        if not flag and len(text) > 3 * EXCERPT:
            text = f"{text[:EXCERPT]} […] {text[-EXCERPT:]}"
        out.append((text, flag))
    return out


def add_rag(item: ReportItem, sample: NiahSample, record: Record) -> None:
    """A RAG record's report card: what was kept, the needles' ranks, the kept context with the
    needle marked, and the "needle" filter (kept / dropped / not located)."""
    from needlepoint.benchmarks.mm_niah.rag import document
    from needlepoint.core.errors import DataError

    note = rag_note(record)
    if note is None:
        return
    state = needle_state(note)
    ranks = [r for h in note.get("needles") or [] if isinstance(h, dict) for r in h.get("ranks") or []]
    item.fields.update(
        {
            "needle": state,
            "needle ranks": ", ".join(map(str, ranks)) or "-",
            "pieces kept": f"{note.get('pieces_kept')} of {note.get('pieces')}",
            "images kept": f"{note.get('images_kept')} of {note.get('images')}",
            "tokens kept": note.get("tokens_kept"),
        }
    )
    item.filters["needle"] = state
    try:
        pieces = document(sample).pieces
    except (DataError, OSError, ValueError):
        return  # the data file changed or moved since the run: the card shows the counts only
    item.context = context_parts(pieces, note)
    item.context_label = "context kept by retrieval (needle highlighted)"
