"""Dirty marks: which rollup buckets a set of reading times touches, and writing them.

Ingest (and anything that changes `calibrated`) calls `write_marks` in the same transaction as
the change; the aggregate job claims marks with DELETE ... RETURNING and recomputes exactly
those buckets (reliability plan, finding 7). A late reading therefore recomputes one bucket per
rollup table, not the device's history.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import date, datetime, tzinfo
from functools import lru_cache
from uuid import UUID

import psycopg
from psycopg import sql

from shared.errors import UnknownLocation
from shared.timeutil import ROLLUP_KINDS, bucket_of, zone

Mark = tuple[str, str, datetime]  # (rollup, device, bucket start UTC)

LOCAL_ROLLUPS = ("local_hourly", "daily")
"""The rollups cut in the location's zone: what a time-zone change re-cuts."""


def bucket_marks(device: str, times: Iterable[datetime], tz: tzinfo | None) -> set[Mark]:
    """The (rollup, device, bucket) marks for readings of `device` at `times`.

    Without a zone (device not deployed) only the UTC `hourly` bucket can be named; the
    local rollups need the location's zone.
    """
    marks: set[Mark] = set()
    for t in times:
        if tz is None:
            marks.add(("hourly", device, _bucket_starts(t, None)[0]))
        else:
            hourly, local_hourly, daily = _bucket_starts(t, tz)
            marks.add(("hourly", device, hourly))
            marks.add(("local_hourly", device, local_hourly))
            marks.add(("daily", device, daily))
    return marks


@lru_cache(maxsize=16384)
def _bucket_starts(t: datetime, tz: tzinfo | None) -> tuple[datetime, ...]:
    """The starts of the buckets holding `t` (hourly, and with a zone local_hourly and daily).
    Cached: the devices of a fleet mostly share a zone and report the same 5-minute slots, so
    a batch asks for the same few quarter hours once per device."""
    if tz is None:
        return (bucket_of("hourly", t, None)[0],)
    return tuple(bucket_of(kind, t, tz)[0] for kind in ROLLUP_KINDS)


def write_marks(conn: psycopg.Connection, marks: Iterable[Mark]) -> int:
    """Insert marks (ignoring ones already pending); the caller owns the transaction."""
    rows = sorted(marks)  # fixed order: concurrent writers take row locks in the same order
    if not rows:
        return 0
    # One statement for the whole set (an executemany costs a round trip per mark, which was
    # a tenth of the ingester's batch time); unnest keeps the sorted order.
    rollups, devices, buckets = (list(col) for col in zip(*rows, strict=True))
    conn.execute(
        "INSERT INTO rollup_dirty (rollup, device, bucket)"
        " SELECT * FROM unnest(%s::text[], %s::text[], %s::timestamptz[])"
        " ON CONFLICT DO NOTHING",
        (rollups, devices, buckets),
    )
    return len(rows)


def mark_location(conn: psycopg.Connection, location: UUID,
                  rollups: Iterable[str] = LOCAL_ROLLUPS,
                  days: tuple[date | None, date | None] = (None, None)) -> int:
    """Mark the `rollups` buckets of every reading taken at `location` dirty; returns the marks.

    `days` [first, end) (None: open) keeps only the buckets starting on those local days: a
    crop-coefficient change marks the daily buckets of the days whose coefficient changed.

    Call in the transaction that changes the location: after a zone change (`LOCAL_ROLLUPS`,
    reliability plan R29) the buckets of the new zone are recomputed and the rows bucketed by
    the old zone, which no longer start a bucket, are removed by the next run; after a change
    of what ET is computed from (coordinates, elevation, sensor height, crop coefficients) every
    rollup of the location is recomputed with the new values.
    """
    wanted = tuple(r for r in ROLLUP_KINDS if r in set(rollups))
    row = conn.execute("SELECT tz_name FROM locations WHERE id = %s", (location,)).fetchone()
    if row is None:
        raise UnknownLocation(f"unknown location {location}")
    tz = zone(row[0])
    by_device: dict[str, list[datetime]] = defaultdict(list)
    # A server-side cursor streams the readings (a year of one device is 105,000 rows); it
    # needs a transaction: a savepoint inside the caller's.
    with conn.transaction(), conn.cursor(name="location_readings") as cur:
        cur.itersize = 10000
        cur.execute("SELECT device, time FROM calibrated WHERE location = %s", (location,))
        for device, t in cur:
            by_device[device].append(t)
    marks: set[Mark] = set()
    for device, times in by_device.items():
        marks |= {m for m in bucket_marks(device, times, tz) if m[0] in wanted}
    for table in wanted:
        # Rows already stored there: under an old zone their starts are no bucket of the new
        # one, and only a mark on them lets the next run delete them.
        stale = conn.execute(sql.SQL("SELECT device, time FROM {} WHERE location = %s").format(
            sql.Identifier(table)), (location,)).fetchall()
        marks |= {(table, d, t) for d, t in stale}
    first, end = days
    if first is not None or end is not None:
        marks = {m for m in marks if _on_days(m[2], tz, first, end)}
    return write_marks(conn, marks)


def _on_days(start: datetime, tz: tzinfo, first: date | None, end: date | None) -> bool:
    """Whether a bucket starting at `start` starts on a local day in [first, end)."""
    day = start.astimezone(tz).date()
    return (first is None or day >= first) and (end is None or day < end)
