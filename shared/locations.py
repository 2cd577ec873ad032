"""Changing a location (`locations:write`, issue 23): the field rules and what a change re-cuts.

One home for what a location's fields may hold (creation in shared/places.py uses the same
rules) and for which rollups a change makes stale: a new time zone re-cuts the local hours and
days (`local_hourly`, `daily`); new coordinates, elevation or wind-sensor height change what ET
is computed from, in every rollup table; crop coefficients (`kc`, the kc schedule) feed only
the daily crop water demand, so they mark only the `daily` buckets of the days whose
coefficient changed (issue 34: a schedule entry from 2026-11-20 had marked a year of hours).
The marks are written in the same transaction as the change (shared/dirty.py), so the
scheduler's next run recomputes exactly the location's buckets, and a change that fails
marks nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any
from uuid import UUID

import psycopg
from psycopg import errors as pgerr
from psycopg import sql

from shared import dirty
from shared.errors import BadParameter, DuplicateName, UnknownLocation
from shared.timeutil import ROLLUP_KINDS, zone

# Bounds a value must keep; the database's CHECKs hold the same for the stored columns.
ELEVATION_RANGE = (-500.0, 9000.0)   # m: the Dead Sea shore to above Everest's summit
SENSOR_HEIGHT_RANGE = (0.1, 100.0)   # m: FAO-56 corrects wind from any height to 2 m
KC_RANGE = (0.0, 3.0)
MAX_NOTES = 2000
MAX_CROP = 100
MAX_SCHEDULE = 366                   # one coefficient per day of a year at most
STATES = ("Active", "Inactive")

EDITABLE = ("name", "lat", "lon", "elev", "tz_name", "kc", "sensor_height", "state", "notes",
            "crop")
"""The columns a change may set (the kc schedule is `kc_schedule`, its own table)."""

NULLABLE = frozenset({"lat", "lon", "elev", "kc", "notes", "crop"})
ET_INPUTS = frozenset({"lat", "lon", "elev", "sensor_height"})
"""What ET is computed from: a change recomputes every rollup."""
KC_INPUTS = frozenset({"kc", "kc_schedule"})
"""What only the daily crop columns (etc, kc, crop water demand) are computed from."""


@dataclass(frozen=True)
class Outcome:
    """What a change did: the fields it changed and the rollup buckets it marked."""

    changed: tuple[str, ...]
    marked: int


def _between(field: str, value: float, bounds: tuple[float, float]) -> None:
    lo, hi = bounds
    if not lo <= value <= hi:
        raise BadParameter(f"{field}: {value} is outside {lo:g}..{hi:g}")


def check_field(field: str, value: Any) -> None:
    """BadParameter naming `field` when `value` may not be stored there (None: cleared)."""
    if value is None:
        if field not in NULLABLE:
            raise BadParameter(f"{field}: may not be null")
        return
    if field == "name":
        if not isinstance(value, str) or not 1 <= len(value.strip()) <= 200:
            raise BadParameter("name: 1 to 200 characters")
    elif field == "tz_name":
        zone(value)  # BadParameter naming the zone
    elif field in ("lat", "lon", "elev", "kc", "sensor_height"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadParameter(f"{field}: must be a number")
        _between(field, float(value), {
            "lat": (-90.0, 90.0), "lon": (-180.0, 180.0), "elev": ELEVATION_RANGE,
            "kc": KC_RANGE, "sensor_height": SENSOR_HEIGHT_RANGE}[field])
    elif field == "state":
        if value not in STATES:
            raise BadParameter(f"state: one of {', '.join(STATES)}")
    elif field == "notes":
        if not isinstance(value, str) or len(value) > MAX_NOTES:
            raise BadParameter(f"notes: at most {MAX_NOTES} characters")
    elif field == "crop":
        if not isinstance(value, str) or not 1 <= len(value) <= MAX_CROP:
            raise BadParameter(f"crop: 1 to {MAX_CROP} characters")
    else:
        raise BadParameter(f"{field}: not a field of a location")


def check_schedule(schedule: list[tuple[date, float]]) -> None:
    """BadParameter when a kc schedule has too many entries, a repeated date or a bad kc."""
    if len(schedule) > MAX_SCHEDULE:
        raise BadParameter(f"kc_schedule: at most {MAX_SCHEDULE} entries")
    days = [d for d, _ in schedule]
    if len(set(days)) != len(days):
        raise BadParameter("kc_schedule: each start_date at most once")
    for _, kc in schedule:
        _between("kc_schedule.kc", float(kc), KC_RANGE)


def rollups_to_mark(changed: set[str]) -> tuple[str, ...]:
    """The rollup tables a change of `changed` fields makes stale (pure)."""
    if changed & ET_INPUTS:
        return ROLLUP_KINDS
    if "tz_name" in changed:
        return dirty.LOCAL_ROLLUPS
    if changed & KC_INPUTS:
        return ("daily",)
    return ()


Schedule = list[tuple[date, float]]


def kc_changed_days(old_kc: float | None, old: Schedule, new_kc: float | None,
                    new: Schedule) -> tuple[date | None, date | None] | None:
    """The local days [first, end) whose crop coefficient differs between the old and the new
    (default kc, schedule); None bounds are open, None as a whole: no day changed (pure).

    The coefficient of a day is the schedule entry in force (latest start_date on or before
    it), else the location's kc; both sides are step functions changing only at a start_date,
    so comparing them at each start date (and before all of them) finds every change.
    """
    def at(kc: float | None, schedule: Schedule, day: date | None) -> float | None:
        current = kc
        for start, value in sorted(schedule):
            if day is not None and start <= day:
                current = value
        return None if current is None else round(float(current), 4)

    points: list[date | None] = [None, *sorted({d for d, _ in old} | {d for d, _ in new})]
    first: date | None = None
    end: date | None = None
    found = False
    for i, day in enumerate(points):
        if at(old_kc, old, day) != at(new_kc, new, day):
            if not found:
                first, found = day, True
            end = points[i + 1] if i + 1 < len(points) else None
    return (first, end) if found else None


def update_location(conn: psycopg.Connection, location: UUID, values: dict[str, Any],
                    schedule: list[tuple[date, float]] | None = None) -> Outcome:
    """Set `values` (column -> value; None clears) and, when given, replace the kc schedule;
    mark the rollups the change affects. The caller's row-level security decides which
    locations exist (another organisation's is UnknownLocation); one transaction."""
    for field, value in values.items():
        check_field(field, value)
    if schedule is not None:
        check_schedule(schedule)
    with conn.transaction():
        current = conn.execute(
            "SELECT name, lat, lon, elev, tz_name, kc, sensor_height, state, notes, crop"
            " FROM locations WHERE id = %s FOR UPDATE", (location,)).fetchone()
        if current is None:
            raise UnknownLocation(f"unknown location {location}")
        before = dict(zip(EDITABLE, current, strict=True))
        changed = {f for f, v in values.items() if _differs(before[f], v)}
        if changed:
            assignments = sql.SQL(", ").join(
                sql.SQL("{} = %s").format(sql.Identifier(f)) for f in sorted(changed))
            try:
                conn.execute(sql.SQL("UPDATE locations SET {}, updated_at = now() WHERE id = %s")
                             .format(assignments),
                             [values[f] for f in sorted(changed)] + [location])
            except pgerr.UniqueViolation:
                raise DuplicateName(
                    f"location {values['name']!r} already exists in this organisation") from None
        old_schedule = _schedule(conn, location)
        if schedule is not None and _replace_schedule(conn, location, schedule):
            changed.add("kc_schedule")
        marked = 0
        tables = rollups_to_mark(changed)
        days: tuple[date | None, date | None] | None = (None, None)
        if tables == ("daily",):  # only crop coefficients changed: only their days
            days = kc_changed_days(
                before["kc"], old_schedule, values.get("kc", before["kc"]),
                old_schedule if schedule is None else sorted(schedule))
        if tables and days is not None:
            marked = dirty.mark_location(conn, location, tables, days=days)
    return Outcome(changed=tuple(sorted(changed)), marked=marked)


def _differs(old: Any, new: Any) -> bool:
    """Whether storing `new` over `old` changes the value (real columns round to float32)."""
    if isinstance(old, float) and isinstance(new, int | float) and not isinstance(new, bool):
        return abs(old - float(new)) > 1e-6 * max(1.0, abs(old))
    return bool(old != new)


def _schedule(conn: psycopg.Connection, location: UUID) -> Schedule:
    """The location's kc schedule, (start_date, kc) by date."""
    return [(d, float(k)) for d, k in conn.execute(
        "SELECT start_date, kc FROM crop_coefficients WHERE location_id = %s"
        " ORDER BY start_date", (location,)).fetchall()]


def _replace_schedule(conn: psycopg.Connection, location: UUID,
                      schedule: list[tuple[date, float]]) -> bool:
    """Replace the location's kc schedule; whether it changed."""
    old = _schedule(conn, location)
    new = sorted(schedule)
    if [(d, round(float(k), 4)) for d, k in old] == [(d, round(float(k), 4)) for d, k in new]:
        return False
    conn.execute("DELETE FROM crop_coefficients WHERE location_id = %s", (location,))
    if new:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO crop_coefficients (location_id, start_date, kc)"
                            " VALUES (%s, %s, %s)", [(location, d, k) for d, k in new])
    return True

