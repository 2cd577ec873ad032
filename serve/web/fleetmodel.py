"""What the device list shows as a fleet view (issue 34): each device's latest air temperature
and humidity, a 24-hour sparkline of its air temperature, and how long ago it was heard from.

Two queries for the whole list, whatever its length (never one per device): the newest reading
of each device, and its 30-minute means of the last 24 hours. Values are converted into the
user's units with the API's own conversion (shared/units.py); the sparkline is drawn on the
server as the points of an inline SVG polyline (no script, no image request), broken where a
bucket has no reading, as the charts break at outages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from shared import units
from shared.columns import TABLES, Column

TAIR: Column = TABLES["calibrated"].column("tair")
RH: Column = TABLES["calibrated"].column("rh")
SPAN = timedelta(hours=24)  # the sparkline's span, ending now
BUCKET = timedelta(minutes=30)  # one sparkline point: 48 in a day
WIDTH, HEIGHT = 120, 28  # the sparkline's viewBox, in its own units (CSS scales it)


@dataclass(frozen=True, slots=True)
class Spark:
    """A sparkline: polyline point lists (one per unbroken run of two or more buckets), dots
    (x, y) for buckets alone between gaps, its lowest and highest value in the user's unit, and
    how many buckets had readings."""

    lines: list[str]
    dots: list[tuple[float, float]]
    low: float | None
    high: float | None
    points: int


def ago(then: datetime | None, now: datetime) -> str:
    """'just now', '3 min ago', '5 h ago', '2 d ago', or 'never'."""
    if then is None:
        return "never"
    seconds = int((now - then).total_seconds())
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"


def spark(values: list[tuple[int, float]], *, slots: int = int(SPAN / BUCKET)) -> Spark:
    """The sparkline of bucket means `values` (the bucket's number 0..slots-1 from the span's
    start, value; oldest first): x from the bucket's place in the span, y scaled to the values'
    range (a flat line in the middle when they are all equal); a missing bucket breaks it."""
    if not values:
        return Spark([], [], None, None, 0)
    low = min(v for _, v in values)
    high = max(v for _, v in values)
    last = max(slots - 1, 1)
    runs: list[list[tuple[float, float]]] = []
    previous: int | None = None
    for slot, value in values:
        x = WIDTH * min(max(slot, 0), last) / last
        y = HEIGHT / 2 if high == low else 2 + (HEIGHT - 4) * (high - value) / (high - low)
        if previous is None or slot != previous + 1:
            runs.append([])
        runs[-1].append((round(x, 1), round(y, 1)))
        previous = slot
    # A bucket alone (one reading, or one between outages) is a dot: a line needs two.
    lines = [" ".join(f"{x:.1f},{y:.1f}" for x, y in run) for run in runs if len(run) > 1]
    dots = [run[0] for run in runs if len(run) == 1]
    return Spark(lines, dots, low, high, len(values))


def fleet(conn: psycopg.Connection, names: list[str], now: datetime,
          chosen: dict[str, units.Unit]) -> dict[str, dict[str, Any]]:
    """Per device name: `time` of its newest reading, `tair` and `rh` there (in the `chosen`
    temp and ratio units) and `spark`, its air temperature over the last 24 hours."""
    if not names:
        return {}
    temp, ratio = chosen["temp"], chosen["ratio"]
    latest = conn.execute(
        "SELECT n.name, last.time, last.tair, last.rh FROM unnest(%s::text[]) AS n(name)"
        " JOIN LATERAL (SELECT time, tair, rh FROM calibrated WHERE device = n.name"
        "   ORDER BY time DESC LIMIT 1) last ON true", (names,)).fetchall()
    start = now - SPAN
    # Buckets by number from the span's start (integers decode faster than timestamps); the
    # device list filters by a hash of the names, not a comparison with each of them.
    buckets = conn.execute(
        "SELECT device, floor(extract(epoch FROM time - %s::timestamptz) / %s)::int AS slot,"
        " avg(tair) FROM calibrated WHERE device IN (SELECT unnest(%s::text[]))"
        " AND time >= %s AND time < %s AND tair IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2",
        (start, BUCKET.total_seconds(), names, start, now)).fetchall()
    series: dict[str, list[tuple[int, float]]] = {}
    for device, slot, mean in buckets:
        value = units.convert(float(mean), TAIR, temp)
        if value is not None:
            series.setdefault(device, []).append((slot, value))
    out: dict[str, dict[str, Any]] = {
        name: {"time": time, "tair": units.convert(tair, TAIR, temp),
               "rh": units.convert(rh, RH, ratio)}
        for name, time, tair, rh in latest}
    for name in names:
        out.setdefault(name, {"time": None, "tair": None, "rh": None})
        out[name]["spark"] = spark(series.get(name, []))
    return out
