"""The reading factory: the one way a test puts readings into `calibrated`.

A series is a list of readings ({"time": t, column: value}) on a grid, made by `series` from a
start, an end or a count, and a value (a constant, or a function of the reading's index and
time) for each column; `insert` writes a series for one device in one statement, and can write
the rollups' dirty marks as ingest does. The value shapes the suites share (`stepped_tair`,
`diurnal_tair`, `sine_of_time`, `noise`) are here too, so a test that checks a value computes it
with the function that seeded it.

    rows = readings.series(T0, n=576, tair=readings.stepped_tair, rh=0.653)
    readings.insert_readings(conn, "D1", location, rows)

A test whose subject is the INSERT itself (a role's privileges, an isolation schedule, the
ingest writer) writes its own statement.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from shared import dirty
from shared.columns import TABLES
from shared.timeutil import zone

FIVE = timedelta(minutes=5)
Value = Any  # a constant, or a function (index, time) -> value
Reading = dict[str, Any]

_TYPES = {c.name: c.dtype for c in TABLES["calibrated"].columns}
MEASURED = tuple(c.name for c in TABLES["calibrated"].columns if c.dtype == "real")


def series(start: datetime, end: datetime | None = None, *, n: int | None = None,
           step: timedelta = FIVE, skip: Callable[[datetime], bool] | None = None,
           **columns: Value) -> list[Reading]:
    """One reading every `step` from `start`: `n` of them, or up to `end` (exclusive). A column's
    value is a constant or f(index, time), index counting from 0 at `start`; readings whose
    time `skip` accepts are left out (an outage), their indexes too."""
    if (end is None) == (n is None):
        raise ValueError("give end or n")
    count = n if n is not None else max(0, math.ceil((end - start) / step))  # type: ignore[operator]
    out = []
    for i in range(count):
        t = start + i * step
        if skip is not None and skip(t):
            continue
        out.append({"time": t, **{k: v(i, t) if callable(v) else v for k, v in columns.items()}})
    return out


def insert_readings(conn: psycopg.Connection, device: str, location: UUID | None,
           rows: Iterable[Reading], *, marks: bool = False) -> int:
    """Write `rows` as readings of `device` at `location` (None: a device never deployed) in
    one statement, a row already there left as it is; with `marks`, also the rollups' dirty
    marks, as ingest writes them. Returns how many rows were given."""
    rows = list(rows)
    if not rows:
        return 0
    cols = sorted({k for r in rows for k in r} - {"time"})
    unknown = set(cols) - set(MEASURED)
    if unknown:
        raise ValueError(f"not columns of calibrated: {sorted(unknown)}")
    names = sql.SQL(", ").join(sql.Identifier(c) for c in ["time", "device", "location", *cols])
    arrays = sql.SQL(", ").join(
        sql.SQL("%b::{}[]").format(sql.SQL(_TYPES[c])) for c in ["time", *cols])
    picked = sql.SQL(", ").join(sql.Identifier("u", c) for c in cols)
    conn.execute(
        sql.SQL("INSERT INTO calibrated ({names}) SELECT u.time, %s, %s::uuid{sep}{picked}"
                " FROM unnest({arrays}) AS u({aliases}) ON CONFLICT DO NOTHING").format(
            names=names, sep=sql.SQL(", ") if cols else sql.SQL(""), picked=picked,
            arrays=arrays,
            aliases=sql.SQL(", ").join(sql.Identifier(c) for c in ["time", *cols])),
        [device, location, [r["time"] for r in rows], *[_floats(rows, c) for c in cols]])
    if marks:
        tz = None
        if location is not None:
            row = conn.execute("SELECT tz_name FROM locations WHERE id = %s",
                               (location,)).fetchone()
            assert row is not None, f"no location {location}"
            tz = zone(row[0])
        dirty.write_marks(conn, dirty.bucket_marks(device, (r["time"] for r in rows), tz))
    return len(rows)


def _floats(rows: list[Reading], column: str) -> list[float | None]:
    # One Python type an array: psycopg dumps a list by its first value.
    return [None if (v := r.get(column)) is None else float(v) for r in rows]


# ---- value shapes ---------------------------------------------------------------------------


def stepped_tair(i: int, _t: datetime | None = None) -> float:
    """20.0, 20.1, ... 23.9 and again: air temperatures chosen to be inexact in float32
    (e.g. 21.3), for the /data tests."""
    return round(20.0 + (i % 40) * 0.1, 1)


def diurnal_tair(i: int, _t: datetime | None = None) -> float:
    """A daily cycle around 15 C over 5-minute readings (288 a day), to two decimals."""
    return round(15 + 8 * math.sin(2 * math.pi * i / 288), 2)


def sine_of_time(mean: float, amplitude: float, period_s: float
                 ) -> Callable[[int, datetime], float]:
    """mean + amplitude * sin(epoch seconds / period_s): a value of the instant, so series of
    two devices agree where their times do."""
    return lambda _i, t: mean + amplitude * math.sin(t.timestamp() / period_s)


def noise(seed: int, scale: float = 100.0) -> Callable[[int, datetime], float]:
    """Reproducible values in [0, scale) (digits that do not compress: heavy pages); one
    generator a column, drawn in the order `series` calls it."""
    rng = random.Random(seed)
    return lambda _i, _t: rng.random() * scale


def every_column(seed: int = 0) -> dict[str, Callable[[int, datetime], float]]:
    """`noise` for every measured column of calibrated (keyword arguments for `series`)."""
    return {c: noise(seed + k) for k, c in enumerate(MEASURED)}
