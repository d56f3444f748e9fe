"""The streaming reader of a parquet image column (parquetpages) against pyarrow's own reading,
on files written the ways pyarrow (and so the Hugging Face `datasets` library) writes them."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from needlepoint.core.parquet import ParquetTable
from needlepoint.core.parquetpages import Unsupported, column_values


def _blob(rng: random.Random, i: int) -> bytes:
    """Incompressible bytes with a compressible tail, so snappy writes literals and copies."""
    return rng.randbytes(rng.randint(10, 3000)) + b"ab" * rng.randint(0, 500) + bytes([i % 256]) * rng.randint(0, 70)


def _struct_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        value = None if i % 13 == 3 else b"same image" if i % 5 == 0 else _blob(rng, i)
        rows.append({"image": None if i % 17 == 5 else {"bytes": value, "path": f"{i}.jpg"}, "n": i})
    return rows


def _arrow_values(path: Path, group: int, column: str) -> list[bytes | None]:
    col = pq.ParquetFile(path).read_row_group(group, columns=[column]).column(0).combine_chunks()
    if col.type.num_fields:
        return [None if v is None else v["bytes"] for v in col.to_pylist()]
    return list(col.to_pylist())


def _streamed(path: Path, leaf_path: str) -> list[list[bytes | None]]:
    meta = pq.ParquetFile(path).metadata
    leaf = next(i for i in range(meta.num_columns) if meta.schema.column(i).path == leaf_path)
    level = meta.schema.column(leaf).max_definition_level
    with path.open("rb") as fh:
        return [
            list(column_values(fh, meta.row_group(g).column(leaf), level, meta.row_group(g).num_rows))
            for g in range(meta.num_row_groups)
        ]


WRITERS = [
    {},
    {"use_dictionary": False},
    {"compression": "none"},
    {"data_page_version": "2.0"},
    {"data_page_version": "2.0", "compression": "none"},
    {"data_page_size": 1000},
    {"write_batch_size": 8},
]


@pytest.mark.parametrize("options", WRITERS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
def test_streamed_values_equal_pyarrows(tmp_path: Path, options: dict[str, Any]) -> None:
    struct = tmp_path / "struct.parquet"
    pq.write_table(pa.Table.from_pylist(_struct_rows(700)), struct, row_group_size=300, **options)
    streamed = _streamed(struct, "image.bytes")
    assert [len(g) for g in streamed] == [300, 300, 100]
    assert streamed == [_arrow_values(struct, g, "image") for g in range(3)]
    assert streamed[0][5] is None and streamed[0][3] is None and streamed[0][10] == b"same image"

    plain = tmp_path / "plain.parquet"
    rng = random.Random(1)
    rows = [{"image": None if i % 11 == 1 else _blob(rng, i)} for i in range(300)]
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([("image", pa.binary())])), plain, row_group_size=128, **options)
    assert _streamed(plain, "image") == [_arrow_values(plain, g, "image") for g in range(3)]


def test_snappy_copies_reaching_back_across_values_and_pieces(tmp_path: Path) -> None:
    """Values that repeat parts of earlier ones: snappy writes copies whose source lies in a long
    literal, in the short elements gathered after it, in a value handed out before, or across
    those; a zero-length value and many tiny ones (history joined into one piece) too."""
    rng = random.Random(3)
    blocks = [rng.randbytes(rng.choice([600, 5000, 9000])) for _ in range(6)]
    values: list[bytes] = []
    for i in range(400):
        a, b = blocks[i % 6], blocks[(i * 5 + 1) % 6]
        kind = i % 5
        if kind == 0:
            values.append(a + rng.randbytes(40) + a[-300:] + b[:200])
        elif kind == 1:
            values.append(rng.randbytes(70) + b"xy" * rng.randint(1, 90) + a[100:4100])
        elif kind == 2:
            values.append(b"")
        elif kind == 3:
            values.append(bytes([i % 7]) * rng.randint(1, 40))
        else:
            values.append(b[: rng.randint(1, len(b))] + a[: rng.randint(1, 50)])
    rows = [{"image": v} for v in values]
    schema = pa.schema([("image", pa.binary())])
    for options in ({}, {"use_dictionary": False}, {"data_page_version": "2.0"}):
        path = tmp_path / f"far-{len(options)}-{sorted(options)}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=400, **options)
        assert str(pq.ParquetFile(path).metadata.row_group(0).column(0).compression).upper() == "SNAPPY"
        assert _streamed(path, "image") == [values]


def test_other_compression_is_left_to_pyarrow(tmp_path: Path) -> None:
    path = tmp_path / "zstd.parquet"
    rows = _struct_rows(200)
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=64, compression="zstd")
    meta = pq.ParquetFile(path).metadata
    with path.open("rb") as fh, pytest.raises(Unsupported):
        next(column_values(fh, meta.row_group(0).column(0), 2, 64))
    table = ParquetTable(path)  # falls back to pyarrow's reader, same bytes
    for row in (0, 1, 2, 70, 199):
        value = rows[row]["image"]
        if value and value["bytes"]:
            assert table.image_bytes(row) == value["bytes"]


def test_a_big_dictionary_page_is_never_held_whole(tmp_path: Path) -> None:
    """pyarrow's writer puts the first 1,024 values of a row group into one dictionary page (about
    40 MB here); the table reads every image while pyarrow allocates almost nothing."""
    rng = random.Random(2)
    images = [rng.randbytes(40_000) for _ in range(1100)]
    path = tmp_path / "big.parquet"
    pq.write_table(pa.Table.from_pylist([{"image": {"bytes": b, "path": ""}} for b in images]), path, row_group_size=1100)
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).dictionary_page_offset is not None
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    table = ParquetTable(path)
    most = 0
    for row in range(len(images)):
        assert table.image_bytes(row) == images[row]
        most = max(most, pool.bytes_allocated() - before)
    assert most < 4 << 20
