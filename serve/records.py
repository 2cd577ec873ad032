"""How model records write their fields: times, dates and positions (one format each)."""

from __future__ import annotations

from datetime import date

from shared.timeutil import stamp

__all__ = ["day", "gps", "stamp"]  # stamp: record times (shared.timeutil, people/ writes them too)


def day(d: date | None) -> str | None:
    """Dates as `YYYY-MM-DD`."""
    return None if d is None else d.isoformat()


def gps(lon: float | None, lat: float | None) -> list[float] | None:
    """`[lon, lat]`, or null when either is unknown."""
    return None if lon is None or lat is None else [lon, lat]
