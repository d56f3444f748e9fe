"""Reading JSON and JSONL data files, with errors that name the file and line.

The one JSON reader of files the project did not write itself in this process (data, prediction
files, run.json, metrics.json): a file is data, never a code path. Each fault is one sentence
(DataError): a file that is not a regular file (a FIFO, /dev/zero, a folder) or is over its size
limit, text that is not UTF-8, a line that is not JSON, nested too deeply, or holding a number
beyond float range. A UTF-8 byte order mark at the start of a file is read past, in every reader.
Lone surrogates (`"\\ud800"`, which no UTF-8 file can hold) become U+FFFD, so that what was read
can be printed and stored.
"""

from __future__ import annotations

import json
import math
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import orjson

from needlepoint.core.errors import DataError
from needlepoint.core.numeric import FLOAT_MAX
from needlepoint.core.text import writable

BOM = b"\xef\xbb\xbf"
MAX_JSON_BYTES = 2 << 30  # a JSON document read whole (COCO train annotations are ~0.5 GB)
MAX_LINE_BYTES = 256 << 20  # one JSONL line (a document with embedded images)
MAX_DEPTH = 512  # nesting levels; deeper is refused before any recursive code sees it
_WALKED_BYTES = 64 << 20  # documents up to this size are checked against MAX_DEPTH
_QUICK_WALK = 4096  # lists and objects walked before the brackets are counted (_too_deep)
_EXACT_BYTES = 1 << 20  # values up to this size are searched for integers orjson made floats of
_HUGE = float(2**63)
_READ_BUFFER = 1 << 20  # a file read line by line: 4 KB reads (the default) cost 3-8x the time on long lines


def open_regular(path: Path, hint: str = "check the path", limit: int | None = MAX_JSON_BYTES) -> IO[bytes]:
    """`path` opened for binary reading when it is a regular file (a symlink to one counts) of at
    most `limit` bytes (None: any size); DataError naming the file otherwise. A FIFO is refused
    without waiting for a writer, /dev/zero without reading it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise DataError(f"{path} does not exist; {hint}") from None
    except OSError as exc:
        raise DataError(f"cannot read {path} ({exc.strerror or exc}); {hint}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise DataError(f"{path} cannot be read: it is a folder, not a file; {hint}")
        if not stat.S_ISREG(info.st_mode):
            raise DataError(f"{path} cannot be read: it is not a regular file (a device, FIFO or socket); {hint}")
        if limit is not None and info.st_size > limit:
            raise DataError(f"{path} is {info.st_size:,} bytes, over the limit of {limit:,} for this file; {hint}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=_READ_BUFFER)
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path, hint: str = "check the path", limit: int | None = MAX_JSON_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (see `open_regular`)."""
    with open_regular(path, hint, limit) as fh:
        try:
            data = fh.read() if limit is None else fh.read(limit + 1)
        except OSError as exc:
            raise DataError(f"cannot read {path} ({exc.strerror or exc}); {hint}") from None
    if limit is not None and len(data) > limit:  # it grew while read
        raise DataError(f"{path} is over the limit of {limit:,} bytes for this file; {hint}")
    return data


class _BeyondFloat(ValueError):
    """A number the file holds that no float can (raised from the parser's number hooks)."""


def _int(text: str) -> int | float:
    if len(text) > 310:  # FLOAT_MAX has 309 digits; also keeps int() clear of its 4300-digit limit
        raise _BeyondFloat(text)
    value = int(text)
    if abs(value) > FLOAT_MAX:
        raise _BeyondFloat(text)
    return value


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # 1e400; the tokens Infinity and NaN come as constants
        raise _BeyondFloat(text)
    return value


def parse(raw: bytes, where: str, fix: str = "fix or remove that line") -> Any:
    """The JSON value in `raw` (one line or one document; a leading BOM is the caller's to
    strip); DataError "`where` is not UTF-8 text / is not valid JSON / is nested too deeply /
    holds a number beyond float range; `fix`". The bare tokens NaN and Infinity are read (as
    Python does) for the caller's number rule to refuse or mark; lone surrogates become U+FFFD.
    An integer past 64 bits is read exactly in a value of up to 1 MB (a row); a larger document
    (a COCO file) is not searched for one, and orjson gives it as a float."""
    try:
        value = orjson.loads(raw)  # the common case: strict JSON, fast
    except orjson.JSONDecodeError:
        value = _parse_slowly(raw, where, fix)  # NaN tokens, lone surrogates, or a fault to name
    else:  # orjson itself stops at 1,024 levels; a large document (a COCO file) is left at that
        if len(raw) <= _WALKED_BYTES and _too_deep(raw, value):
            raise DataError(f"{where} is nested too deeply (over {MAX_DEPTH} levels); {fix}")
        if len(raw) <= _EXACT_BYTES and holds_huge_float(value):  # an integer past 64 bits, maybe
            value = _parse_slowly(raw, where, fix)
    return value


def read_back(line: bytes) -> Any:
    """JSON bytes as the standard parser reads them, by orjson where that is the same value (a
    quarter of the time on a long record): a line needlepoint wrote (`files.json_line`: a record,
    an answered call) or a server's answer. The standard parser reads what orjson refuses (a NaN,
    a lone surrogate) and what orjson may have made a float of an integer past 64 bits (a hostile
    model's number, kept as it came). Raises ValueError or RecursionError as `json.loads` does."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)
    return json.loads(line) if holds_huge_float(value) else value


def holds_huge_float(value: Any) -> bool:
    """Whether a float of magnitude 2**63 or more is anywhere in `value`: what orjson makes of an
    integer outside -2**63..2**64, which the standard parser reads exactly."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float and abs(item) >= _HUGE:
            return True
    return False


def _too_deep(raw: bytes, value: Any) -> bool:
    """Whether `value`, parsed from `raw`, nests more than MAX_DEPTH levels. A value of a few
    containers (a row of text: an MM-NIAH document) is walked at once; one of many is walked only
    when its brackets could reach that depth, a count quicker than the walk of millions of them."""
    quick = _deeper_than(value, MAX_DEPTH, _QUICK_WALK)
    if quick is not None:
        return quick
    return raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and bool(_deeper_than(value, MAX_DEPTH))


def _parse_slowly(raw: bytes, where: str, fix: str) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{where} is not UTF-8 text; {fix}") from None
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float)
    except _BeyondFloat:
        raise DataError(f"{where} holds a number beyond float range; {fix}") from None
    except RecursionError:
        raise DataError(f"{where} is nested too deeply (over {MAX_DEPTH} levels); {fix}") from None
    except ValueError:
        raise DataError(f"{where} is not valid JSON; {fix}") from None
    if _deeper_than(value, MAX_DEPTH):
        raise DataError(f"{where} is nested too deeply (over {MAX_DEPTH} levels); {fix}")
    return _writable_strings(value) if "\\u" in text else value  # only an escape makes a lone surrogate


def _deeper_than(value: Any, limit: int, budget: float = math.inf) -> bool | None:
    """Whether lists and objects nest more than `limit` levels (walked level by level, without
    recursion); None when more than `budget` of them were met before the answer."""
    level = [value] if type(value) in (list, dict) else []
    depth = 0
    met = len(level)
    while level:
        depth += 1
        if depth > limit:
            return True
        if met > budget:
            return None
        below: list[Any] = []
        for item in level:
            below.extend(v for v in (item.values() if type(item) is dict else item) if type(v) in (list, dict))
        met += len(below)
        level = below
    return False


def _writable_strings(value: Any) -> Any:
    """`value` with every string (object keys too) made writable (see text.writable)."""
    if isinstance(value, str):
        return writable(value)
    if isinstance(value, list):
        return [_writable_strings(v) for v in value]
    if isinstance(value, dict):
        return {writable(k): _writable_strings(v) for k, v in value.items()}
    return value


class Line(NamedTuple):
    """A JSONL line as `read_jsonl_offsets` found it: where it is, its bytes' offset, length and
    CRC-32 (for `read_line_at` to read it again and tell whether it changed), and its object."""

    where: str
    offset: int
    length: int
    crc: int
    row: dict[str, Any]


def read_jsonl_offsets(path: Path, hint: str = "check the path") -> Iterator[Line]:
    """Yield a `Line` for each non-blank line; DataError on a file that is not a regular file, a
    line that is not a JSON object (see `parse`), or a line over MAX_LINE_BYTES. `hint` ends the
    unreadable-file message."""
    with open_regular(path, hint, None) as fh:
        offset = 0
        lineno = 0
        while True:
            line = fh.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            lineno += 1
            start, offset = offset, offset + len(line)
            where = f"{path} line {lineno}"
            if len(line) > MAX_LINE_BYTES:
                raise DataError(f"{where} is longer than {MAX_LINE_BYTES:,} bytes; split or remove that line")
            crc = zlib.crc32(line)
            if lineno == 1 and line.startswith(BOM):
                line = line[len(BOM) :]
            if not line.strip():
                continue
            row = parse(line, where)
            if not isinstance(row, dict):
                raise DataError(f"{where} is not a JSON object; each line must hold one object")
            yield Line(where, start, offset - start, crc, row)


def read_jsonl(path: Path, hint: str = "check the path") -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ("FILE line N", object) for each non-blank line (see read_jsonl_offsets)."""
    for line in read_jsonl_offsets(path, hint):
        yield line.where, line.row


def read_line_at(path: Path, offset: int, length: int, crc: int | None = None, what: str = "") -> dict[str, Any]:
    """The JSON object on the line of `length` bytes that starts at `offset`, in one read (a
    buffered readline scans a long line, an MM-NIAH document of hundreds of KB, 8 KB at a time,
    several times slower); with `crc` (`Line.crc`), DataError unless the bytes are the ones found
    then, told before they are parsed (a CRC-32 of the bytes costs a third of a SHA-1 of the text),
    naming the line as `what` (e.g. "row 17") or by its offset."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            line = os.pread(fd, length, offset)
        finally:
            os.close(fd)
    except OSError as exc:
        raise DataError(f"{path} changed or became unreadable during the run ({exc}); rerun to resume") from None
    if crc is not None and (len(line) != length or zlib.crc32(line) != crc):
        raise DataError(
            f"{path} changed during the run ({what or f'the line at byte {offset}'}); restore it, or start a fresh run"
        )
    if offset == 0 and line.startswith(BOM):
        line = line[len(BOM) :]
    try:
        row = parse(line, f"{path} at byte {offset}")
    except DataError as exc:
        raise DataError(f"{path} changed or became unreadable during the run ({exc}); rerun to resume") from None
    if not isinstance(row, dict):
        raise DataError(f"{path} changed during the run (byte {offset} starts no JSON object); rerun to resume")
    return row


def read_json(path: Path, hint: str, limit: int | None = MAX_JSON_BYTES) -> Any:
    """The JSON value in a regular file of at most `limit` bytes; DataError naming the file, the
    fault (see `parse`), and `hint` (what to give)."""
    raw = read_bytes(path, hint, limit)
    if raw.startswith(BOM):
        raw = raw[len(BOM) :]
    return parse(raw, str(path), hint)


def read_object(path: Path, hint: str, limit: int | None = MAX_JSON_BYTES) -> dict[str, Any]:
    """The JSON object in a file (see `read_json`); DataError when the file holds another value."""
    value = read_json(path, hint, limit)
    if not isinstance(value, dict):
        kind = {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")
        raise DataError(f"{path} holds a JSON {kind}, not an object; {hint}")
    return value
