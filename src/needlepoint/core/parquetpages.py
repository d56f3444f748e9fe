"""A streaming reader of one binary column of a parquet row group (the images of a release).

pyarrow decodes a data page whole and keeps a dictionary page whole, with its decompression
buffer, for as long as it reads the row group. The Hugging Face writers (pyarrow's defaults) put
the first 1,024 images of each row group into one dictionary page, about 87 MB for 85 KB
JPEGs, so pyarrow holds about 170 MB to hand out any of them. This reader walks the column chunk's
pages itself and decompresses them as a stream (snappy, or none), so it holds a few megabytes
of the file at a time whatever the page sizes, and the bytes of a value are copied once.

It reads what those writers write: BYTE_ARRAY values, no repetition, data pages v1 or v2 with
RLE definition levels, PLAIN or dictionary-encoded values, SNAPPY or no compression. Anything
else raises `Unsupported` before a value is returned, and the caller reads with pyarrow instead.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO, Any

CHUNK = 1 << 20  # bytes of the file read at once
HISTORY = 1 << 16  # snappy back-references stay within a 64 KiB block
SHORT = 4096  # literals shorter than this are gathered with the copies (see _Snappy)
MAX_PIECES = 64  # history pieces before they are joined into one

_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_PLAIN, _PLAIN_DICTIONARY, _RLE, _RLE_DICTIONARY = 0, 2, 3, 8


class Unsupported(Exception):
    """The column chunk uses something this reader does not read (pyarrow reads it instead)."""


# ------------------------------------------------------------------------------ byte sources


class _Raw:
    """`length` bytes of a file from `offset`, read forward in chunks."""

    def __init__(self, fh: IO[bytes], offset: int, length: int) -> None:
        self._fh = fh
        self._next = offset
        self._left = length
        self._buf = b""
        self._pos = 0
        self.consumed = 0

    def read(self, n: int) -> bytes:
        """The next `n` bytes (a copy)."""
        self.consumed += n
        start = self._pos
        if start + n <= len(self._buf):
            self._pos += n
            return self._buf[start : start + n]
        head = self._buf[start:]
        self._refill(n - len(head))
        self._pos = n - len(head)
        return head + self._buf[: self._pos]

    def view(self, n: int) -> memoryview | bytes:
        """The next `n` bytes, without a copy where they are in the buffer already."""
        start = self._pos
        if start + n <= len(self._buf):
            self.consumed += n
            self._pos += n
            return memoryview(self._buf)[start : start + n]
        return self.read(n)

    def _refill(self, need: int) -> None:
        """Replace the buffer by the next chunk of the file, of at least `need` bytes."""
        want = max(need, min(CHUNK, self._left))
        if want > self._left:
            raise Unsupported("a page runs past its column chunk")
        self._fh.seek(self._next)
        self._buf = self._fh.read(want)
        if len(self._buf) < want:
            raise Unsupported("the file ends inside a page")
        self._next += want
        self._left -= want

    def byte(self) -> int:
        return self.read(1)[0]


class _Snappy:
    """The decompressed bytes of one snappy block, produced as they are read.

    The output is kept as pieces, not as one growing buffer: a long literal is a view of the
    file's chunk, so its bytes are copied once, into the value handed out; short elements (copies,
    short literals: many only where the data compresses) gather in one small buffer. Pieces
    handed out stay as history while copies may still refer to them (the last 64 KiB)."""

    def __init__(self, source: _Raw) -> None:
        self._src = source
        self._left = _varint(source.byte)  # decompressed bytes still to produce
        self._unread: deque[memoryview] = deque()  # produced and not handed out, oldest first...
        self._tail = bytearray()  # ...then the short elements produced since
        self._unread_len = 0  # both together
        self._history: deque[memoryview] = deque()  # handed out, newest last
        self._history_len = 0
        self.consumed = 0

    def read(self, n: int) -> bytes:
        if n <= 0:
            return b""
        self.consumed += n
        while self._unread_len < n:
            if self._left <= 0:
                raise Unsupported("a snappy page ends early")
            self._step()
        if self._unread_len - len(self._tail) < n:
            self._seal()
        parts = []
        unread, history = self._unread, self._history
        need = n
        while need:
            piece = unread[0]
            if len(piece) <= need:
                unread.popleft()
            else:
                unread[0] = piece[need:]
                piece = piece[:need]
            parts.append(piece)
            history.append(piece)
            need -= len(piece)
        self._unread_len -= n
        self._history_len += n
        while history and self._unread_len + self._history_len - len(history[0]) >= HISTORY:  # keep what copies may reach
            self._history_len -= len(history.popleft())
        if len(history) > MAX_PIECES:  # many small values: one piece, so that copies find their source fast
            self._history = deque([memoryview(b"".join(history))])
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    def byte(self) -> int:
        return self.read(1)[0]

    def _seal(self) -> None:
        """Make the short elements gathered so far one piece."""
        if self._tail:
            self._unread.append(memoryview(bytes(self._tail)))
            self._tail.clear()

    def _step(self) -> None:
        src = self._src
        tag = src.byte()
        kind = tag & 3
        if kind == 0:  # literal
            size = tag >> 2
            if size >= 60:
                size = int.from_bytes(src.read(size - 59), "little")
            size += 1
            if size >= SHORT:
                self._seal()
                self._unread.append(memoryview(src.view(size)))
            else:
                self._tail += src.view(size)
        else:  # a copy (at most 64 bytes) of output `offset` bytes back
            if kind == 1:
                size = ((tag >> 2) & 7) + 4
                offset = ((tag >> 5) << 8) | src.byte()
            else:
                size = (tag >> 2) + 1
                offset = int.from_bytes(src.read(2 if kind == 2 else 4), "little")
            source = self._behind(offset, min(size, offset))
            self._tail += source if offset >= size else (source * (size // offset + 1))[:size]  # overlapping: repeats
        self._unread_len += size
        self._left -= size
        if self._left < 0:
            raise Unsupported("a snappy page is longer than it says")

    def _behind(self, offset: int, length: int) -> bytes:
        """`length` bytes of the output from `offset` bytes before its end."""
        if offset == 0:
            raise Unsupported("a snappy copy of offset 0")
        tail = self._tail
        if offset <= len(tail):
            return bytes(tail[len(tail) - offset : len(tail) - offset + length])
        back = len(tail)  # bytes from the end of the output to the start of the pieces found
        found = []
        for piece in itertools.chain(reversed(self._unread), reversed(self._history)):
            found.append(piece)
            back += len(piece)
            if back >= offset:
                break
        else:
            raise Unsupported("a snappy copy reaches before the history kept")
        start = back - offset  # in the oldest piece found
        out = bytes(found[-1][start : start + length])
        for piece in reversed(found[:-1]):  # the source runs on into newer pieces...
            if len(out) == length:
                return out
            out += piece[: length - len(out)]
        return out + tail[: length - len(out)]  # ...and into the short elements


def _varint(next_byte: Callable[[], int]) -> int:
    value, shift = 0, 0
    while True:
        b = next_byte()
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7
        if shift > 63:
            raise Unsupported("a varint is too long")


# ------------------------------------------------------------------------------ thrift headers


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _struct(src: _Raw) -> dict[int, Any]:
    """A thrift compact-protocol struct: field id -> value (ints, bytes, nested dicts; lists skipped)."""
    out: dict[int, Any] = {}
    last = 0
    while True:
        head = src.byte()
        if head == 0:
            return out
        kind = head & 0x0F
        delta = head >> 4
        field = last + delta if delta else _zigzag(_varint(src.byte))
        last = field
        out[field] = _value(src, kind)


def _value(src: _Raw, kind: int) -> Any:
    if kind in (1, 2):  # booleans carry their value in the type
        return kind == 1
    if kind == 3:
        return src.byte()
    if kind in (4, 5, 6):
        return _zigzag(_varint(src.byte))
    if kind == 7:
        return src.read(8)
    if kind == 8:
        return src.read(_varint(src.byte))
    if kind in (9, 10):
        head = src.byte()
        size = head >> 4
        if size == 15:
            size = _varint(src.byte)
        for _ in range(size):
            _value(src, head & 0x0F)
        return None
    if kind == 11:
        size = _varint(src.byte)
        if size:
            types = src.byte()
            for _ in range(size):
                _value(src, types >> 4)
                _value(src, types & 0x0F)
        return None
    if kind == 12:
        return _struct(src)
    raise Unsupported(f"thrift type {kind}")


# ------------------------------------------------------------------------------ levels, indices


def _hybrid(data: bytes, width: int, count: int) -> list[int]:
    """`count` values of the RLE / bit-packed hybrid encoding."""
    out: list[int] = []
    pos = 0
    size = (width + 7) // 8
    mask = (1 << width) - 1
    while len(out) < count:
        if pos >= len(data):
            raise Unsupported("levels or indices end early")
        header, shift = 0, 0
        while True:
            b = data[pos]
            pos += 1
            header |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if header & 1:  # bit-packed groups of 8
            groups = header >> 1
            nbytes = groups * width
            bits = int.from_bytes(data[pos : pos + nbytes], "little")
            pos += nbytes
            out.extend((bits >> (i * width)) & mask for i in range(groups * 8))
        else:
            value = int.from_bytes(data[pos : pos + size], "little")
            pos += size
            out.extend([value] * (header >> 1))
    return out[:count]


# ------------------------------------------------------------------------------ the reader


class _Dictionary:
    """The values of a dictionary page, read forward as indices ask for them; an index behind
    the last one read starts the page again."""

    def __init__(self, open_page: Any, count: int) -> None:
        self._open = open_page
        self._count = count
        self._stream: Any = None
        self._next = 0

    def get(self, index: int) -> bytes:
        if index >= self._count:
            raise Unsupported("a dictionary index past the dictionary")
        if self._stream is None or index < self._next:
            self._stream, self._next = self._open(), 0
        while self._next < index:
            size = int.from_bytes(self._stream.read(4), "little")
            self._stream.read(size)  # skipped (decompressed all the same)
            self._next += 1
        size = int.from_bytes(self._stream.read(4), "little")
        self._next += 1
        value: bytes = self._stream.read(size)
        return value


def column_values(fh: IO[bytes], chunk: Any, max_definition_level: int, num_rows: int) -> Iterator[bytes | None]:
    """The values of one column chunk (pyarrow's ColumnChunkMetaData) in row order, None for a null.

    Raises Unsupported (before yielding anything it cannot read) for what this reader does not read."""
    if chunk.physical_type != "BYTE_ARRAY":
        raise Unsupported(f"physical type {chunk.physical_type}")
    codec = str(chunk.compression).upper()
    if codec not in ("SNAPPY", "UNCOMPRESSED"):
        raise Unsupported(f"compression {codec}")
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    if start is None or (chunk.has_dictionary_page and chunk.data_page_offset < start):
        start = chunk.data_page_offset
    end = start + chunk.total_compressed_size
    width = max_definition_level.bit_length()
    dictionary: _Dictionary | None = None
    rows = 0
    pos = start
    while pos < end and rows < num_rows:
        src = _Raw(fh, pos, end - pos)
        header = _struct(src)
        body = pos + src.consumed
        size = header.get(3)
        kind = header.get(1)
        if not isinstance(size, int) or size < 0 or body + size > end:
            raise Unsupported("a page header without its size")
        pos = body + size

        def page_stream(offset: int = body, length: int = size) -> _Raw | _Snappy:
            raw = _Raw(fh, offset, length)
            return _Snappy(raw) if codec == "SNAPPY" else raw

        if kind == _DICTIONARY_PAGE:
            head = header.get(7) or {}
            if head.get(2) not in (_PLAIN, _PLAIN_DICTIONARY):
                raise Unsupported("a dictionary page not PLAIN-encoded")
            dictionary = _Dictionary(page_stream, int(head.get(1, 0)))
            continue
        if kind == _DATA_PAGE:
            head = header.get(5) or {}
            count, encoding = int(head.get(1, 0)), head.get(2)
            stream = page_stream()
            levels = [max_definition_level] * count
            if max_definition_level:
                if head.get(3, _RLE) != _RLE:
                    raise Unsupported("definition levels not RLE-encoded")
                levels = _hybrid(stream.read(int.from_bytes(stream.read(4), "little")), width, count)
        elif kind == _DATA_PAGE_V2:
            head = header.get(8) or {}
            count, encoding = int(head.get(1, 0)), head.get(4)
            rep_size, def_size = int(head.get(6, 0)), int(head.get(5, 0))
            if rep_size:
                raise Unsupported("repetition levels")
            levels = [max_definition_level] * count
            if max_definition_level:
                levels = _hybrid(_Raw(fh, body, def_size).read(def_size), width, count)
            compressed = head.get(7, True) and codec == "SNAPPY"
            raw = _Raw(fh, body + def_size, size - def_size)
            stream = _Snappy(raw) if compressed else raw
        else:
            continue  # an index page: nothing to read
        present = sum(1 for level in levels if level == max_definition_level)
        if encoding == _PLAIN:
            values: Iterator[bytes] = (stream.read(int.from_bytes(stream.read(4), "little")) for _ in range(present))
        elif encoding in (_PLAIN_DICTIONARY, _RLE_DICTIONARY):
            if dictionary is None:
                raise Unsupported("dictionary indices without a dictionary page")
            rest = stream.read(_remaining(stream, kind, size, header))
            indices = _hybrid(rest[1:], rest[0], present) if present else []
            values = (dictionary.get(i) for i in indices)
        else:
            raise Unsupported(f"value encoding {encoding}")
        for level in levels:
            yield next(values) if level == max_definition_level else None
        rows += count


def _remaining(stream: _Raw | _Snappy, kind: int, size: int, header: dict[int, Any]) -> int:
    """Bytes left in a dictionary-index page's value stream: its decompressed size less what was read."""
    total = int(header.get(2, size))
    if kind == _DATA_PAGE_V2:
        head = header.get(8) or {}
        total -= int(head.get(5, 0)) + int(head.get(6, 0))
    return total - stream.consumed
