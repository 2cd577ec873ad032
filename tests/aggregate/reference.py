"""A pure-Python reference for the rollup tables, computed from the raw `calibrated` rows with
zoneinfo only (no aggregate or shared.timeutil code), and a comparison with what the database
holds (reliability plan R21, R24, R32, R35).

A bucket is keyed independently of the code under test: the UTC hour; the local wall hour
together with its UTC offset (so a repeated or half-hour-shifted wall hour is its own bucket);
the local date. Each key is compared on reading count, mean, min and max of `tair`. The count
of a stored row is `sample_pct` times the bucket's 5-minute slots, and the slots are counted
by scanning the UTC 5-minute grid for instants with the same key.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

FIVE = timedelta(minutes=5)
# Rollup table -> the column holding the mean of tair there.
MEAN_COLUMN = {"hourly": "tair", "local_hourly": "tair", "daily": "meant"}

Key = tuple[str, str, Any]  # (table, device, bucket key)


@dataclass(frozen=True, slots=True)
class Summary:
    """What a bucket should hold: readings counted and tair's mean, min and max."""

    n: int
    mean: float | None
    low: float | None
    high: float | None


def _key(table: str, t: datetime, tz: ZoneInfo | None) -> Any:
    if table == "hourly":
        return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    assert tz is not None
    local = t.astimezone(tz)
    if table == "local_hourly":
        return (local.replace(minute=0, second=0, microsecond=0, tzinfo=None),
                local.utcoffset())
    return local.date()


@cache
def _slots(table: str, tz_name: str | None, key: Any) -> int:
    """5-minute UTC slots whose key is `key`: found by scanning around the key."""
    if table == "hourly":
        return 12
    tz = ZoneInfo(tz_name or "UTC")
    if table == "local_hourly":
        wall, offset = key
        around = (wall - offset).replace(tzinfo=UTC)
        span = timedelta(hours=3)
    else:
        day: date = key
        around = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
        span = timedelta(hours=40)
    t, n = around - span, 0
    while t < around + span:
        if _key(table, t, tz) == key:
            n += 1
        t += FIVE
    return n


def raw_rows(conn: psycopg.Connection) -> list[tuple[str, datetime, float | None, str | None]]:
    """(device, time, tair, zone of the reading's location or None) of every stored reading."""
    return conn.execute(
        "SELECT c.device, c.time, c.tair, l.tz_name FROM calibrated c"
        " LEFT JOIN locations l ON l.id = c.location").fetchall()


def reference(conn: psycopg.Connection) -> dict[Key, Summary]:
    """The expected summary of every bucket of the three rollup tables."""
    groups: dict[Key, list[float | None]] = defaultdict(list)
    zones: dict[str, ZoneInfo] = {}
    for device, t, tair, tz_name in raw_rows(conn):
        groups[("hourly", device, _key("hourly", t, None))].append(tair)
        if tz_name is None:
            continue  # undeployed readings roll up into hourly only (docs/aggregate.md)
        tz = zones.setdefault(tz_name, ZoneInfo(tz_name))
        for table in ("local_hourly", "daily"):
            groups[(table, device, _key(table, t, tz))].append(tair)
    out = {}
    for key, values in groups.items():
        present = [v for v in values if v is not None]
        out[key] = Summary(len(values), sum(present) / len(present) if present else None,
                           min(present, default=None), max(present, default=None))
    return out


def stored(conn: psycopg.Connection) -> dict[Key, Summary]:
    """The summary of every stored rollup row, keyed like `reference`."""
    out: dict[Key, Summary] = {}
    for table, mean in MEAN_COLUMN.items():
        rows = conn.execute(
            f"SELECT r.device, r.time, r.sample_pct, r.{mean}, r.mint, r.maxt, l.tz_name"
            f" FROM {table} r LEFT JOIN locations l ON l.id = r.location").fetchall()
        for device, t, pct, avg, low, high, tz_name in rows:
            tz = ZoneInfo(tz_name) if tz_name else None
            key = _key(table, t, tz)
            n = round(pct * _slots(table, tz_name if table != "hourly" else None, key))
            if (table, device, key) in out:
                n = -1  # two rows for one bucket: never equal to the reference
            out[(table, device, key)] = Summary(n, avg, low, high)
    return out


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    # Stored values are rounded to their column's precision (0.01 C): half a unit, plus
    # float32 storage.
    return abs(a - b) <= 0.005 + 1e-5 * abs(b)


def mismatches(conn: psycopg.Connection) -> dict[Key, tuple[Summary | None, Summary | None]]:
    """Buckets whose stored row differs from the reference: {key: (expected, stored)}.

    A bucket missing on either side counts, as does a differing count, mean, min or max.
    """
    want, got = reference(conn), stored(conn)
    bad: dict[Key, tuple[Summary | None, Summary | None]] = {}
    for key in want.keys() | got.keys():
        a, b = want.get(key), got.get(key)
        if a is None or b is None or a.n != b.n or not all(
                _close(x, y) for x, y in ((b.mean, a.mean), (b.low, a.low), (b.high, a.high))):
            bad[key] = (a, b)
    return bad


def bucket_count(conn: psycopg.Connection) -> int:
    """Rows in the three rollup tables (the buckets a comparison covered)."""
    return sum(int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
               for t in MEAN_COLUMN)


def marks_left(conn: psycopg.Connection) -> int:
    """Pending dirty marks."""
    return int(conn.execute("SELECT count(*) FROM rollup_dirty").fetchone()[0])
