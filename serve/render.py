"""Streamed JSON and CSV bodies of `/data`, content negotiation, and the X-Units header.

Pure formatting: the bodies are generators over what the page object (`serve.api.data`)
reads; that object owns the connection and frees it when the body ends or is closed.

Values arrive from the database already converted and rounded (serve.queries), and are sent a
chunk at a time, so memory stays flat whatever the page size. JSON: a bare array of objects,
`time` as `2019-07-01T00:00:00Z`, serialised here with orjson. CSV: a header line written
here, then the lines of a COPY ... TO STDOUT (times as `2019-07-01T00:00:00+0000`, an empty
field for null, formatted by the SQL functions of migration 0031). `local_time`, when asked
for, is the last key/column: `2019-06-30T20:00:00-0400`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import tzinfo
from typing import Any

import orjson
from werkzeug.datastructures import MIMEAccept

from shared import units
from shared.columns import Column
from shared.timeutil import format_local  # the one rendering of local time
from shared.units import Unit

JSON = "application/json"
CSV = "text/csv"
# Order of classes in X-Units, as in the public API's example `C,mb,pct,mm`.
UNIT_ORDER = ("temp", "pres", "ratio", "size", "speed")


def wants_csv(accept: MIMEAccept) -> bool:
    """True when the client asked for text/csv at least as strongly as for JSON."""
    csv_q = max((q for value, q in accept if value.lower() == CSV), default=0)
    if csv_q <= 0:
        return False
    json_q = max((q for value, q in accept if value.lower() == JSON), default=0)
    return csv_q >= json_q


def units_header(columns: Iterable[Column], chosen: Mapping[str, Unit]) -> str:
    """X-Units: unit labels for the measurement classes present in `columns`."""
    present = {units.param_for(c.measure) for c in columns if c.measure is not None}
    return ",".join(chosen[p].label for p in UNIT_ORDER if p in present)


class JsonRows:
    """Serialises chunks of row tuples into one JSON array, piece by piece.

    Each row holds the output values, then the row's time and device (serve.queries);
    only the output values are written, plus local_time from that time when asked for.
    """

    content_type = JSON

    def __init__(self, names: Sequence[str], local_tz: tzinfo | None) -> None:
        self.names = tuple(names)
        self.width = len(self.names)
        self.local_tz = local_tz
        self._first = True

    def start(self) -> bytes:
        return b"["

    def chunk(self, rows: Sequence[Sequence[Any]]) -> bytes:
        names, tz, width = self.names, self.local_tz, self.width
        if tz is None:
            # zip stops at the shorter: the trailing key columns are dropped for free.
            objects = [dict(zip(names, r, strict=False)) for r in rows]
        else:
            objects = []
            for r in rows:
                obj = dict(zip(names, r, strict=False))
                obj["local_time"] = format_local(r[width], tz)
                objects.append(obj)
        body = orjson.dumps(objects, option=orjson.OPT_UTC_Z)[1:-1]
        if not body:
            return b""
        if self._first:
            self._first = False
            return body
        return b"," + body

    def end(self) -> bytes:
        return b"]"


def json_body(writer: JsonRows, first: Sequence[Sequence[Any]],
              fetch: Callable[[], Sequence[Sequence[Any]]], chunk_rows: int) -> Iterator[bytes]:
    """The body of a JSON page: `writer` over `first`, then over chunks from `fetch`, fetched
    only as the previous one has been sent; a chunk shorter than `chunk_rows` is the last."""
    yield writer.start()
    rows, first = first, ()  # the page holds only the chunk being sent
    while rows:
        piece = writer.chunk(rows)
        if piece:
            yield piece
        if len(rows) < chunk_rows:
            break
        rows = fetch()
    yield writer.end()


def csv_header(columns: Sequence[Column], local_time: bool) -> bytes:
    """The CSV header line: column names, then local_time when asked for."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(
        [c.name for c in columns] + (["local_time"] if local_time else []))
    return buf.getvalue().encode()


def copy_body(head: bytes, read: Callable[[], bytes]) -> Iterator[bytes]:
    """The body of a CSV page: `head` (header line and first COPY block), then the blocks
    `read` returns until an empty one (PostgreSQL formats every line)."""
    yield head
    while True:
        block = read()
        if not block:
            break
        yield block
