"""Rollup test support: a location per zone and readings written straight into `calibrated`
with their dirty marks (through shared.dirty, as ingest does), no ingest import.
tests/aggregate/conftest.py registers the fixture."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest

from aggregate import rollups, water
from people import accounts
from shared import dirty, places
from shared.timeutil import zone

FIVE = timedelta(minutes=5)
_names = itertools.count(1)


def make_location(conn: psycopg.Connection, tz: str, **fields: Any) -> UUID:
    """A location in zone `tz` (organisation created on first use)."""
    row = conn.execute("SELECT id FROM organisations WHERE name = 'Aggregate Tests'").fetchone()
    org = row[0] if row else accounts.create_org(conn, name="Aggregate Tests")
    loc = places.LocationInput(name=f"loc{next(_names)}", tz_name=tz, **fields)
    return places.create_location(conn, org=org, loc=loc)


def insert_readings(
    conn: psycopg.Connection, device: str, location: UUID | None,
    rows: Iterable[dict[str, Any]],
) -> int:
    """Insert readings ({'time': ..., column: value}) and write their dirty marks."""
    rows = list(rows)
    if not rows:
        return 0
    cols = sorted({k for r in rows for k in r} - {"time"})
    names = ", ".join(["time", "device", "location", *cols])
    marks = ", ".join(["%s"] * (3 + len(cols)))
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO calibrated ({names}) VALUES ({marks}) ON CONFLICT DO NOTHING",
            [(r["time"], device, location, *[r.get(c) for c in cols]) for r in rows])
    tz = None
    if location is not None:
        tz = zone(conn.execute("SELECT tz_name FROM locations WHERE id = %s",
                               (location,)).fetchone()[0])
    dirty.write_marks(conn, dirty.bucket_marks(device, (r["time"] for r in rows), tz))
    return len(rows)


def series(start: datetime, end: datetime, **fields: Callable[[int, datetime], Any]
           ) -> list[dict[str, Any]]:
    """One reading per 5-minute slot in [start, end); field values from f(index, time)."""
    out = []
    t, i = start, 0
    while t < end:
        out.append({"time": t, **{k: f(i, t) for k, f in fields.items()}})
        t += FIVE
        i += 1
    return out


def run_all(conn: psycopg.Connection, *, limit: int = 100000, low_quality_pct: float = 80.0
            ) -> int:
    """Process every pending mark of every table (in one transaction); returns marks claimed."""
    total = 0
    for table in rollups.TABLE_ORDER:
        while True:
            n = rollups.process_marks(conn, table=table, limit=limit,
                                      low_quality_pct=low_quality_pct)
            if table == "daily":  # as the daily job does (aggregate/jobs.py)
                n += water.process(conn, limit=limit)
            total += n
            if n == 0:
                break
    return total


def fetch(conn: psycopg.Connection, sql: str, *args: Any) -> list[dict[str, Any]]:
    """Rows as dicts."""
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(sql, args)
        return cur.fetchall()


@pytest.fixture
def db(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """The test's database connection (committed by the tests where other sessions look)."""
    yield conn

