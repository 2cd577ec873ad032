"""The zone and DST scenarios of test_zones.py, with every input column filled, in one database;
and a dump of the three rollup tables, for comparing two implementations of the rollups.

`golden_rollups.json` holds the dump made by the per-table rollups (three passes over the raw
rows, ET in Python, before rounding at write) on these scenarios; `test_one_pass.py` holds the
one-pass rollups equal to it (tests/aggregate/make_golden.py wrote it).
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

from tests.support.readings import insert_readings, series
from tests.support.rollups import make_location

# (zone, local date): the DST and offset cases of test_zones.CASES.
CASES = (
    ("America/New_York", date(2024, 3, 10)),
    ("America/New_York", date(2024, 11, 3)),
    ("Asia/Kolkata", date(2024, 6, 1)),
    ("Asia/Kathmandu", date(2024, 6, 1)),
    ("Australia/Lord_Howe", date(2024, 4, 7)),
    ("Australia/Lord_Howe", date(2024, 10, 6)),  # spring forward 30 min at 15:30Z
    ("Pacific/Chatham", date(2024, 4, 7)),
    ("America/Santiago", date(2024, 9, 8)),
    ("America/St_Johns", date(2024, 3, 10)),
    ("UTC", date(2024, 6, 1)),
)
TABLES = ("hourly", "local_hourly", "daily")


def _first_instant(day: date, tz: ZoneInfo) -> datetime:
    t = datetime.combine(day, datetime.min.time(), tzinfo=UTC) - timedelta(hours=16)
    while t.astimezone(tz).date() < day:
        t += timedelta(minutes=1)
    return t


def _fields(k: int) -> dict[str, Any]:
    """Every input column, as functions of the slot index (some with gaps and nulls)."""
    return {
        "tair": lambda i, t: round(15 + 10 * math.sin((i + k) / 37.0) + (i % 7) * 0.1, 3),
        "rh": lambda i, t: round(0.5 + 0.4 * math.cos(i / 23.0), 4),
        "precip": lambda i, t: 0.2 if (i + k) % 17 == 0 else 0.0,
        "swdw": lambda i, t: max(0.0, round(900 * math.sin((i % 288) / 288 * 6.283 - 1.6), 1)),
        "pardw": lambda i, t: max(0.0, round(1800 * math.sin((i % 288) / 288 * 6.283 - 1.6), 1)),
        "wind_speed": lambda i, t: round(2 + math.sin(i / 7.0), 2),
        "wind_gust": lambda i, t: round(4 + math.sin(i / 5.0), 2),
        "wind_direction": lambda i, t: float((i * 13 + k * 31) % 360),
        "tbelow": lambda i, t: None if i % 11 == 0 else round(14 + 9 * math.sin(i / 40.0), 2),
        "lfw": lambda i, t: 5.0 if i % 288 < 60 else 0.0,
        "tdew": lambda i, t: round(8 + math.sin(i / 50.0), 3),
        "ea": lambda i, t: 1.1,
        "vpd": lambda i, t: round(0.6 + 0.1 * math.cos(i / 9.0), 4),
        "slp": lambda i, t: 101.3,
        "p": lambda i, t: round(98 + 0.01 * (i % 50), 3),
    }


def load(conn: psycopg.Connection) -> int:
    """Write every scenario's readings (with dirty marks); returns readings written."""
    n = 0
    for k, (tz_name, day) in enumerate(CASES):
        tz = ZoneInfo(tz_name)
        start, end = _first_instant(day, tz), _first_instant(day + timedelta(days=1), tz)
        loc = make_location(conn, tz_name, lat=-40.0 + 9 * k, lon=-170.0 + 35 * k,
                            elev=50.0 * k, kc=0.8 + 0.05 * k, sensor_height=2.0 + k % 3)
        rows = series(start - timedelta(hours=3), end + timedelta(hours=3), **_fields(k))
        # A gap of 40 minutes and one missing humidity, so sample shares and nulls vary.
        rows = [r for j, r in enumerate(rows) if not 50 <= j < 58]
        rows[70]["rh"] = None
        n += insert_readings(conn, f"S{k:02d}", loc, rows, marks=True)
    # A device that moves from Berlin to Kolkata at 10:10Z, mid-day and mid-hour.
    berlin = make_location(conn, "Europe/Berlin", lat=52.5, lon=13.4, elev=34.0)
    kolkata = make_location(conn, "Asia/Kolkata", lat=22.6, lon=88.4, elev=9.0, kc=1.1)
    conn.execute("INSERT INTO crop_coefficients (location_id, start_date, kc)"
                 " VALUES (%s, '2024-07-02', 1.25)", (kolkata,))
    move = datetime(2024, 7, 2, 10, 10, tzinfo=UTC)
    rows = series(datetime(2024, 7, 1, 20, tzinfo=UTC), datetime(2024, 7, 3, 2, tzinfo=UTC),
                  **_fields(99))
    n += insert_readings(conn, "MOVE", berlin, [r for r in rows if r["time"] < move], marks=True)
    n += insert_readings(conn, "MOVE", kolkata, [r for r in rows if r["time"] >= move], marks=True)
    # An undeployed device: hourly only.
    n += insert_readings(conn, "NOLOC", None, series(
        datetime(2024, 7, 1, 0, 7, tzinfo=UTC).replace(minute=5),
        datetime(2024, 7, 1, 5, tzinfo=UTC), **_fields(7)), marks=True)
    return n


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def dump(conn: psycopg.Connection) -> dict[str, list[dict[str, Any]]]:
    """Every row of the three rollup tables, bookkeeping times left out, location as its
    zone (ids differ between databases), in (device, time) order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for table in TABLES:
        with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(f"SELECT r.*, l.tz_name AS location_zone FROM {table} r"
                        " LEFT JOIN locations l ON l.id = r.location ORDER BY device, time")
            rows = cur.fetchall()
        out[table] = [{k: _json(v) for k, v in r.items()
                       if k not in ("create_time", "update_time", "location")} for r in rows]
    return out
