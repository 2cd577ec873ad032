"""The cold tier's file format, shared by the mover (aggregate.coldmove) and the reader
(serve.coldread): `calibrated` rows as Parquet (zstd), one file per organisation-month (a month
that gets late readings after it went cold gets a second file), laid out as
`<SDS_COLD_PATH>/org=<uuid>/<yyyy-mm>-<id>.parquet` and listed in the `cold_files` catalogue
(migration 0210). The content checksum is over the rows' values in (device, time) order, not
the file's bytes, so the mover can compare a file with the rows a DELETE returned.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import date
from typing import Any
from uuid import UUID

import numpy as np
import pyarrow as pa

from shared.columns import TABLES

COLUMNS = TABLES["calibrated"].columns
NAMES = tuple(c.name for c in COLUMNS)
# Readings are `real` (float32) in PostgreSQL: stored as float32 so a value read back is the
# same value, and the API formats it in SQL exactly as a hot one.
_TYPES = {"timestamp with time zone": pa.timestamp("us", tz="UTC"), "text": pa.string(),
          "uuid": pa.string(), "real": pa.float32()}
SCHEMA = pa.schema([pa.field(c.name, _TYPES[c.dtype], nullable=c.name not in ("time", "device"))
                    for c in COLUMNS])
# Uncompressed rows per row group: a device-month is 8,640 rows, so a group holds a few devices
# and the reader skips the others by the groups' device statistics (files are device-sorted).
ROW_GROUP_ROWS = 50_000
# Live states: files whose rows a reader must see (a hot copy of a row wins over the cold one).
READABLE = ("verified", "live")


def relative_path(org: UUID, month: date, file_id: int) -> str:
    """Where a file lives under SDS_COLD_PATH."""
    return f"org={org}/{month:%Y-%m}-{file_id}.parquet"


def table_from_rows(rows: Sequence[Sequence[Any]]) -> pa.Table:
    """An Arrow table of `calibrated` rows (tuples in NAMES order), sorted by (device, time)."""
    cols = list(zip(*rows, strict=True)) if rows else [() for _ in NAMES]
    arrays = []
    for field, values in zip(SCHEMA, cols, strict=True):
        if field.name == "location":
            values = tuple(None if v is None else str(v) for v in values)
        arrays.append(pa.array(values, type=field.type))
    table = pa.Table.from_arrays(arrays, schema=SCHEMA)
    return table.sort_by([("device", "ascending"), ("time", "ascending")])


def content_checksum(table: pa.Table) -> str:
    """sha256 over the values of `table` taken in (device, time) order, column by column,
    nulls marked apart from values: equal for equal rows however the file was chunked."""
    table = table.sort_by([("device", "ascending"), ("time", "ascending")]).combine_chunks()
    digest = hashlib.sha256()
    digest.update(str(table.num_rows).encode())
    for name in NAMES:
        column = table.column(name)
        arr = column.chunk(0) if column.num_chunks else pa.array([], type=column.type)
        digest.update(name.encode() + b"\0")
        digest.update(np.asarray(arr.is_null()).tobytes())
        if pa.types.is_string(arr.type):
            digest.update("\0".join(v or "" for v in arr.to_pylist()).encode())
        elif pa.types.is_timestamp(arr.type):
            digest.update(np.asarray(arr.cast(pa.int64()).fill_null(0)).tobytes())
        else:
            digest.update(np.asarray(arr.fill_null(0.0)).tobytes())
    return digest.hexdigest()
