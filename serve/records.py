"""How model records write their fields: times, dates and positions (one format each)."""

from __future__ import annotations

from datetime import date, datetime

from shared.timeutil import format_utc_record


def stamp(t: datetime | None) -> str | None:
    """Record times: UTC, microseconds and offset (`2021-03-04T12:34:56.123456+00:00`;
    shared.timeutil holds every text form of an instant)."""
    return None if t is None else format_utc_record(t)


def day(d: date | None) -> str | None:
    """Dates as `YYYY-MM-DD`."""
    return None if d is None else d.isoformat()


def gps(lon: float | None, lat: float | None) -> list[float] | None:
    """`[lon, lat]`, or null when either is unknown."""
    return None if lon is None or lat is None else [lon, lat]
