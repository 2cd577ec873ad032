"""Rollup test support: a location per zone, every pending rollup run at once, rows as dicts
(readings come from tests/support/readings.py, with their dirty marks). tests/aggregate/conftest.py
registers the fixture."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import psycopg
import pytest

from aggregate import rollups, water
from people import accounts
from shared import places

_names = itertools.count(1)


def make_location(conn: psycopg.Connection, tz: str, **fields: Any) -> UUID:
    """A location in zone `tz` (organisation created on first use)."""
    row = conn.execute("SELECT id FROM organisations WHERE name = 'Aggregate Tests'").fetchone()
    org = row[0] if row else accounts.create_org(conn, name="Aggregate Tests")
    loc = places.LocationInput(name=f"loc{next(_names)}", tz_name=tz, **fields)
    return places.create_location(conn, org=org, loc=loc)


def run_all(conn: psycopg.Connection, *, limit: int = 100000, low_quality_pct: float = 80.0,
            cold_path: str | None = None) -> int:
    """Process every pending mark of every table (in one transaction); returns marks claimed.
    `cold_path`: read the cold tier's readings too, as the scheduler does (aggregate.coldrows)."""
    total = 0
    for table in rollups.TABLE_ORDER:
        while True:
            n = rollups.process_marks(conn, table=table, limit=limit,
                                      low_quality_pct=low_quality_pct, cold_path=cold_path)
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

