"""The run page's sample rows: made once a sample, their images placed when the page is written.

A sample's row of the page's JSON (`report.html`: prompt, answer, fields, the card's images, what
the model saw) depends on its report item, its record and this code; where each of its images is
shown from (a thumbnail, the image's own file, nowhere yet) is known only when the page is
written. So a row is made as a `Row` (`make_row`): its JSON text around one slot per place an
image's source goes, with what the page needs besides (filters, failure, the boxes' kinds for the
legend), and the page fills the slots (`fill`). The drafting processes (`report.drafts`) make the
rows of the samples a run answers while it answers and append them to `report/rows/`
(`row_line`); the run's end reads them back (`read_rows`), keeps each one made from the record
the run ended with (`record_mark`) and makes only the others: after the last answer a sample
costs the filling of its row, not its card, its images' links and its JSON again
(docs/performance.md).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from needlepoint.contract.base import ReportImage, ReportItem, format_cell
from needlepoint.core import status
from needlepoint.core.files import json_compact, json_line
from needlepoint.core.numeric import is_box, is_finite, is_number
from needlepoint.core.records import LONG_TURN_CHARS, TEXT_END_CHARS, Record, part_chars
from needlepoint.report.thumbs import UNKNOWN_SIZE, Size, box_colour, grouped, side_of, thumb_key

__all__ = [
    "ROWS_DIR",
    "Row",
    "fill",
    "make_row",
    "overlay_boxes",
    "read_rows",
    "record_mark",
    "row_line",
    "script_json",
    "sent_view",
]

ROWS_DIR = "rows"  # beside the page: the rows the drafting processes made (removed once read)
MAX_TEXT = 20_000
_NONCE = secrets.token_hex(8)  # a slot's mark: no text a sample holds can pass for one
_SLOT = re.compile(rf'"\\u0000np{_NONCE}:(-?\d+)"')  # a mark as `script_json` writes it
_UNSAFE = ("<", ">", "&")  # never in `script_json`'s text: a row read back with one is not ours

# What fills an image's slots: the JSON text of its source ('""' none), its size, and whether it
# is left for a later report (`Thumbnails.undrawn`); asked of (key, own file's source, its size).
Placed = tuple[str, Size, bool]
Place = Callable[[str, str, Size], Placed]


def script_json(obj: Any) -> str:
    """JSON safe inside a <script> element (`json_compact`): `<`, `>` and `&` escaped, so
    `</script>` cannot occur."""
    text = json_compact(obj)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@dataclass
class Row:
    """A sample's row of the page: its JSON text in `parts`, between which `slots` go in turn (an
    image's index n for the card's entry of it, -n-1 for its source alone in what the model
    saw); its images by column: thumbnail key, the JSON text of the entry after its source and
    size (caption and boxes, coloured by kind; `by_group`: coloured by group, empty when no image
    has boxes), and, in a draft's row, how the page may show it from its own file (`links`: the
    source's JSON text, "" none; `sizes`: its size, `thumbs.link_to`); and what the page needs of
    it besides. `record`: the `record_mark` of the record a draft made it from."""

    id: str
    parts: list[str]
    slots: list[int]
    keys: list[str]
    rests: list[str]
    by_group: list[str]
    links: list[str]
    sizes: list[Size]
    filters: dict[str, str] = field(default_factory=dict)
    failed: bool = False
    sorted: bool = False
    grouped: bool = False  # a box in a group other than 1 (`thumbs.grouped`)
    boxes: list[tuple[str, int, str]] = field(default_factory=list)  # distinct (kind, group, label)
    record: int = 0


def record_mark(line: bytes) -> int:
    """What names a record's content for a row made from it, from the record's `json_line`: 64
    bits of its SHA-1 (a checksum of 32 would let one in four billion changed records pass for
    the old one)."""
    return int.from_bytes(hashlib.sha1(line).digest()[:8], "big")


# --- making a row --------------------------------------------------------------------------------


def _clip(value: Any) -> str:
    text = "" if value is None else str(value)
    if len(text) > MAX_TEXT:
        return text[:MAX_TEXT] + f"\n[... {len(text) - MAX_TEXT} more characters; the full text is in records.jsonl]"
    return text


def _sort_value(value: Any) -> float | None:
    return float(value) if is_finite(value) else None


def reasoning_text(record: Record | None) -> str:
    """A reasoning model's thinking in a record's turns (the repair turn marked), or ""."""
    turns = [t for t in (record or {}).get("turns") or [] if isinstance(t, dict)]
    texts = [str(t.get("reasoning") or "") for t in turns]
    return "\n--- repair turn ---\n".join(texts) if any(texts) else ""


def overlay_boxes(image: ReportImage, is_grouped: bool) -> list[list[Any]]:
    """The boxes the page lays over an image, ground truth first so that predictions lie on top:
    [x1, y1, x2, y2, colour, dashed] in the image's own pixels (the thumbnail's viewBox)."""
    out = []
    for b in sorted(image.boxes, key=lambda b: b.kind != "gt"):
        if not is_box(b.box):
            continue
        x1, x2 = sorted((float(b.box[0]), float(b.box[2])))
        y1, y2 = sorted((float(b.box[1]), float(b.box[3])))
        out.append(
            [round(x1, 1), round(y1, 1), round(x2, 1), round(y2, 1), box_colour(b.kind, b.group, is_grouped), int(b.kind != "gt")]
        )
    return out


def _ends(part: dict[str, Any]) -> str:
    """A text part of a long document the model saw, by its ends: as its record keeps it
    (`records.kept_texts`), or cut so from a record of an earlier version that kept it whole."""
    text = str(part.get("text") or "")
    if "chars" in part:
        head, tail = str(part.get("head") or ""), str(part.get("tail") or "")
    elif len(text) > 3 * TEXT_END_CHARS:
        head, tail = text[:TEXT_END_CHARS], text[-TEXT_END_CHARS:]
    else:
        return text
    cut = part_chars(part) - len(head) - len(tail)
    return f"{head}\n[... {cut} more characters; the data file holds the whole document ...]\n{tail}"


def _sent_part(part: Any, thumb_of: Mapping[str, str], long: bool = False) -> list[Any] | None:
    """One part of a sent message for the page: ["t", text] or ["i", path, width, height, bytes,
    sha256 ("" for an image file, named by its size and time), thumbnail src ("" when the report
    has none)]; None for anything else. In a `long` turn (more than LONG_TURN_CHARS characters
    of text) a text part shows its ends only."""
    if not isinstance(part, dict):
        return None
    if part.get("type") == "text":
        return ["t", _ends(part) if long else _clip(part.get("text"))]
    if part.get("type") == "image":
        path = str(part.get("path") or "")
        number = [v if is_number(v) else None for v in (part.get("width"), part.get("height"), part.get("bytes"))]
        return ["i", path, *number, str(part.get("sha256") or ""), thumb_of.get(path, "")]
    return None


def sent_view(record: Record | None, thumb_of: Mapping[str, str]) -> list[list[Any]]:
    """What the model saw, per turn of a record that keeps it (`turns[].sent`; older runs do not):
    [turn label, [[role, [part, ...]], ...]], texts verbatim (clipped at MAX_TEXT; in a turn of
    more than LONG_TURN_CHARS characters, a long document, each part by its ends), images by
    path, size and digest, never their bytes."""
    turns = [t for t in (record or {}).get("turns") or [] if isinstance(t, dict)]
    out = []
    for n, turn in enumerate(turns, 1):
        sent = turn.get("sent")
        if not isinstance(sent, list):
            continue
        contents = []
        for m in sent:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            content = (
                [{"type": "text", "text": content}] if isinstance(content, str) else content if isinstance(content, list) else []
            )
            contents.append((str(m.get("role") or ""), content))
        chars = sum(part_chars(p) for _, c in contents for p in c if isinstance(p, dict) and p.get("type") == "text")
        long = chars > LONG_TURN_CHARS
        messages = [
            [role, [p for part in content if (p := _sent_part(part, thumb_of, long)) is not None]] for role, content in contents
        ]
        role = str(turn.get("role") or "model")
        label = f"turn {n}" + (f" ({role})" if role != "model" else "" if n == 1 else " (repair)")
        out.append([label, messages])
    return out


def _mark(slot: int) -> str:
    return f"\0np{_NONCE}:{slot}"


def make_row(
    item: ReportItem, record: Record | None, link: Callable[[ReportImage], tuple[str, Size] | None] | None = None
) -> Row:
    """The row of `item` (answered by `record`), each image's source a slot; `link` (a draft's):
    how the page may show an image from its own file, asked of every image now."""
    side = side_of(item)
    has_boxes = any(im.boxes for im in item.images)
    row = Row(str(item.id), [], [], [], [], [], [], [])
    thumb_of: dict[str, str] = {}
    for n, im in enumerate(item.images):
        caption = im.caption or (f"Image {n + 1}" if len(item.images) > 1 else "image")
        url, size = (link(im) if link is not None else None) or (None, UNKNOWN_SIZE)
        row.keys.append(thumb_key(im, side))
        row.rests.append(script_json([caption, overlay_boxes(im, False)])[1:-1])
        if has_boxes:
            row.by_group.append(script_json([caption, overlay_boxes(im, True)])[1:-1])
        row.links.append("" if url is None else script_json(url))
        row.sizes.append(size)
        for name in (getattr(im.image, "path", None), getattr(im.image, "key", None)):
            if name is not None:
                thumb_of.setdefault(str(name), _mark(-n - 1))
    row.filters = {str(k): str(v) for k, v in item.filters.items()}
    data: dict[str, Any] = {
        "id": row.id,
        "p": _clip(item.prompt),
        "a": _clip(item.answer),
        "f": [[str(k), _clip(format_cell(v))] for k, v in item.fields.items()],
        "k": row.filters,
        "c": item.correct if item.correct is None else bool(item.correct),
        "e": item.parse_error or None,
        "s": _sort_value(item.sort_value),
        "im": [_mark(n) for n in range(len(item.images))],
        "r": _clip(reasoning_text(record)),
    }
    if item.context:
        data["x"] = [[_clip(text), bool(mark)] for text, mark in item.context]
        data["xl"] = item.context_label
    row.failed = record is not None and record.get("status") in status.FAILED
    if row.failed:
        data["st"] = str((record or {}).get("status"))
    if seen := sent_view(record, thumb_of):
        data["w"] = seen
    pieces = _SLOT.split(script_json(data))
    row.parts, row.slots = pieces[::2], [int(n) for n in pieces[1::2]]
    row.sorted = data["s"] is not None
    row.grouped = grouped([item])
    row.boxes = sorted({(b.kind, max(int(b.group), 1), b.label) for im in item.images for b in im.boxes})
    return row


def fill(row: Row, place: Place, is_grouped: bool) -> tuple[str, int]:
    """The row's JSON text with every image placed (`place`), the boxes coloured by group when
    `is_grouped`; and how many of its card's images are left for a later report."""
    placed = list(map(place, row.keys, row.links, row.sizes))
    rests = row.by_group if is_grouped and row.by_group else row.rests
    out = [row.parts[0]]
    undrawn = 0
    for n, part in zip(row.slots, row.parts[1:]):
        if n >= 0:
            src, (width, height), left = placed[n]
            out.append(f"[{src},{width},{height},{rests[n]},1]" if left else f"[{src},{width},{height},{rests[n]}]")
            undrawn += left
        else:
            out.append(placed[-n - 1][0])
        out.append(part)
    return "".join(out), undrawn


# --- rows made by the drafts ---------------------------------------------------------------------


def row_line(row: Row, mark: int) -> bytes:
    """`row`, made from a record of `record_mark` `mark`, as a line of a rows file."""
    images = [row.keys, row.rests, row.by_group, row.links, [v for size in row.sizes for v in size]]
    fields = [row.id, mark, row.parts, row.slots, images, row.filters, row.failed, row.sorted, row.grouped, row.boxes]
    return json_line(fields) + b"\n"


def read_rows(folder: Path) -> dict[str, Row]:
    """The rows the files of `folder` hold, by sample id (the last one of an id wins). Whatever
    is not a whole row as `row_line` writes it (a line a stopped draft left half written, a file
    edited since) is left out: its sample's row is made again."""
    found: dict[str, Row] = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return found
    for name in names:
        try:
            with open(folder / name, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        for row in _rows_of(data[: data.rfind(b"\n") + 1]):
            found[row.id] = row
    return found


def _rows_of(data: bytes) -> Iterator[Row]:
    for line in data.splitlines():
        try:
            yield _row(orjson.loads(line))
        except (ValueError, TypeError, AttributeError):  # orjson.JSONDecodeError is a ValueError
            continue


def _row(value: Any) -> Row:
    """A row read back from its line; ValueError, TypeError or AttributeError when it is not one
    `row_line` wrote."""
    sample_id, mark, parts, slots, (keys, rests, by_group, links, sizes), filters, failed, sorted_, grouped, boxes = value
    raw = "".join(parts) + "".join(rests) + "".join(by_group) + "".join(links)  # what goes into the page as it is
    "".join([*keys, *filters, *filters.values()])  # TypeError unless each is text
    slots, sizes, count = list(map(int, slots)), list(map(int, sizes)), len(keys)
    if (
        any(c in raw for c in _UNSAFE)
        or len(parts) != len(slots) + 1
        or not len(rests) == len(links) == count == len(sizes) // 2
        or (by_group and len(by_group) != count)
        or (slots and not -count <= min(slots) <= max(slots) < count)
    ):
        raise ValueError("not a row")
    return Row(
        id=str(sample_id),
        parts=parts,
        slots=slots,
        keys=keys,
        rests=rests,
        by_group=by_group,
        links=links,
        sizes=list(zip(sizes[::2], sizes[1::2])),
        filters=filters,
        failed=bool(failed),
        sorted=bool(sorted_),
        grouped=bool(grouped),
        boxes=[(str(k), int(g), str(label)) for k, g, label in boxes],
        record=int(mark),
    )
