"""Streamed JSON and CSV bodies of `/data`, content negotiation, and the X-Units header.

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
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

import orjson
from werkzeug.datastructures import MIMEAccept

from shared import units
from shared.columns import Column
from shared.units import Unit

log = logging.getLogger(__name__)

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


def _offset_without_colon(iso: str) -> str:
    """'2019-06-30T20:00:00-04:00' -> '2019-06-30T20:00:00-0400' (also with .ffffff)."""
    i = 26 if len(iso) > 19 and iso[19] == "." else 19
    return iso[:i] + iso[i:].replace(":", "")


def format_local(t: datetime, tz: tzinfo) -> str:
    """`t` in `tz` as ISO 8601 with a colon-less offset (DST-aware for zones)."""
    return _offset_without_colon(t.astimezone(tz).isoformat())


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


class _BodyStream(ABC):
    """A WSGI body that holds a database connection until it is consumed or closed.

    A class rather than a bare generator, because a generator never started (HEAD, or a client
    gone before the first byte) does not run its `finally` on close(); this does.
    """

    what = "a page"

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release

    @abstractmethod
    def _pieces(self) -> Iterator[bytes]:
        """The body's bytes, in order."""

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._pieces()
        except Exception:
            # Headers are gone: the client sees a cut-off body (no final chunk), never a
            # well-formed but incomplete page.
            log.exception("error while streaming %s", self.what)
            raise
        finally:
            self.close()

    def close(self) -> None:
        """Free the connection (once; WSGI servers may call this after iterating too)."""
        release, self._release = self._release, None
        if release is not None:
            release()


class RowStream(_BodyStream):
    """The body of a JSON page: writer output over chunks of rows fetched on demand."""

    def __init__(
        self, writer: JsonRows, first: Sequence[Sequence[Any]],
        fetch: Callable[[], Sequence[Sequence[Any]]], chunk_rows: int,
        release: Callable[[], None],
    ) -> None:
        super().__init__(release)
        self._writer = writer
        self._first = first
        self._fetch = fetch
        self._chunk_rows = chunk_rows

    def _pieces(self) -> Iterator[bytes]:
        yield self._writer.start()
        rows = self._first
        self._first = ()
        while rows:
            piece = self._writer.chunk(rows)
            if piece:
                yield piece
            if len(rows) < self._chunk_rows:
                break
            rows = self._fetch()
        yield self._writer.end()


def csv_header(columns: Sequence[Column], local_time: bool) -> bytes:
    """The CSV header line: column names, then local_time when asked for."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(
        [c.name for c in columns] + (["local_time"] if local_time else []))
    return buf.getvalue().encode()


class CopyStream(_BodyStream):
    """The body of a CSV page: the header, then the blocks of a COPY ... TO STDOUT (PostgreSQL
    formats every line); closing ends the COPY and frees the connection."""

    what = "a CSV page"

    def __init__(self, header: bytes, first: bytes, read: Callable[[], bytes],
                 release: Callable[[], None]) -> None:
        super().__init__(release)
        self._head = header + first
        self._read = read

    def _pieces(self) -> Iterator[bytes]:
        head, self._head = self._head, b""
        yield head
        while True:
            block = self._read()
            if not block:
                break
            yield block
