"""Dirty marks: which rollup buckets a set of reading times touches, and writing them.

Ingest (and anything that changes `calibrated`) calls `write_marks` in the same transaction as
the change; the aggregate job claims marks with DELETE ... RETURNING and recomputes exactly
those buckets (reliability plan, finding 7). A late reading therefore recomputes one bucket per
rollup table, not the device's history.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, tzinfo

import psycopg

from shared.timeutil import bucket_of

Mark = tuple[str, str, datetime]  # (rollup, device, bucket start UTC)


def bucket_marks(device: str, times: Iterable[datetime], tz: tzinfo | None) -> set[Mark]:
    """The (rollup, device, bucket) marks for readings of `device` at `times`.

    Without a zone (device not deployed) only the UTC `hourly` bucket can be named; the
    local rollups need the location's zone.
    """
    marks: set[Mark] = set()
    for t in times:
        marks.add(("hourly", device, bucket_of("hourly", t, None)[0]))
        if tz is not None:
            marks.add(("local_hourly", device, bucket_of("local_hourly", t, tz)[0]))
            marks.add(("daily", device, bucket_of("daily", t, tz)[0]))
    return marks


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
