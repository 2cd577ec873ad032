"""A location's water settings and irrigation events (tables of migration 0176), written by the
API and the CLI alike: validation, storage, and the water balance marks each change needs
(`sds_mark_location_water`: the scheduler recomputes from the first changed day only).

Settings: the soil as a FAO-56 Table 19 class name (`soil`) or measured `theta_fc` and
`theta_wp`; roots `root_depth` (m), growing to `root_depth_end` between `root_start` and
`root_end` when given; p from `crop` (Table 22) or given. Events: a depth (mm) on a local
date, planned (not counted by the balance) or applied (counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from shared import waterbalance as wb
from shared.errors import BadParameter

STATUSES = ("planned", "applied")
EARLIEST = date(1970, 1, 1)  # "every day": a settings change recomputes the whole balance


def _bad(field: str, message: str) -> BadParameter:
    return BadParameter(f"{field}: {message}", errors={field: [message]})


def resolve_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The stored row's fields from a request's (soil or thetas, roots, crop or p); raises
    BadParameter naming the field that is wrong."""
    out: dict[str, Any] = {}
    soil = values.get("soil")
    if soil is not None:
        try:
            fc, wp = wb.SOILS[str(soil).strip().lower()]
        except KeyError:
            raise _bad("soil", f"must be one of: {', '.join(wb.SOILS)}") from None
        out.update(soil=str(soil).strip().lower(), theta_fc=fc, theta_wp=wp)
    else:
        given_fc, given_wp = values.get("theta_fc"), values.get("theta_wp")
        if given_fc is None or given_wp is None:
            raise _bad("soil", "give a FAO-56 Table 19 soil class, or theta_fc and theta_wp")
        if not 0 <= float(given_wp) < float(given_fc) <= 1:
            raise _bad("theta_fc", "needs 0 <= theta_wp < theta_fc <= 1 (m3/m3)")
        out.update(soil=None, theta_fc=float(given_fc), theta_wp=float(given_wp))
    depth = values.get("root_depth")
    if depth is None or not 0 < float(depth) <= 5:
        raise _bad("root_depth", "root depth in m, 0 < depth <= 5")
    out["root_depth"] = float(depth)
    end_depth = values.get("root_depth_end")
    if end_depth is not None and not 0 < float(end_depth) <= 5:
        raise _bad("root_depth_end", "root depth in m, 0 < depth <= 5")
    out["root_depth_end"] = None if end_depth is None else float(end_depth)
    start, end = values.get("root_start"), values.get("root_end")
    if (start is None) != (end is None) or (start is not None and end <= start):
        raise _bad("root_end", "root_start and root_end go together, end after start")
    out.update(root_start=start, root_end=end)
    p, crop = values.get("p"), values.get("crop")
    if p is None:
        if crop is None:
            raise _bad("p", f"give p (0..1) or a FAO-56 Table 22 crop: {', '.join(wb.CROP_P)}")
        try:
            p = wb.CROP_P[str(crop).strip().lower()]
        except KeyError:
            raise _bad("crop", f"must be one of: {', '.join(wb.CROP_P)}") from None
    if not 0 < float(p) < 1:
        raise _bad("p", "depletion fraction between 0 and 1")
    out["p"] = float(p)
    return out


def get_settings(conn: psycopg.Connection, location: UUID) -> dict[str, Any] | None:
    """The location's settings row, or None."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM water_settings WHERE location_id = %s",
                           (location,)).fetchone()


def put_settings(conn: psycopg.Connection, location: UUID, values: dict[str, Any]
                 ) -> dict[str, Any]:
    """Set the location's settings (replacing them) and mark its balance; the stored row."""
    row = resolve_settings(values)
    names = list(row)
    cols = [sql.Identifier(n) for n in names]
    conn.execute(sql.SQL(
        "INSERT INTO water_settings (location_id, {cols}) VALUES (%s, {marks})"
        " ON CONFLICT (location_id) DO UPDATE SET {sets}, updated_at = now()").format(
        cols=sql.SQL(", ").join(cols), marks=sql.SQL(", ").join([sql.Placeholder()] * len(cols)),
        sets=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=c) for c in cols)),
        (location, *row.values()))
    conn.execute("SELECT sds_mark_location_water(%s, %s)", (location, EARLIEST))
    stored = get_settings(conn, location)
    assert stored is not None
    return stored


def delete_settings(conn: psycopg.Connection, location: UUID) -> bool:
    """Remove the settings and the balance rows they made; False when there were none."""
    gone = conn.execute("DELETE FROM water_settings WHERE location_id = %s",
                        (location,)).rowcount
    if gone:
        conn.execute("SELECT sds_mark_location_water(%s, %s)", (location, EARLIEST))
    return bool(gone)


@dataclass(frozen=True, slots=True)
class Event:
    """An irrigation event as stored."""

    id: UUID
    location_id: UUID
    day: date
    depth_mm: float
    status: str
    note: str | None


def add_event(conn: psycopg.Connection, location: UUID, day: date, depth_mm: float,
              status: str = "applied", note: str | None = None) -> Event:
    """Record an event and mark the balance from its day; BadParameter on a bad field."""
    if status not in STATUSES:
        raise _bad("status", f"must be one of: {', '.join(STATUSES)}")
    if not 0 < depth_mm <= 500:
        raise _bad("depth_mm", "depth in mm, 0 < depth <= 500")
    if note is not None and len(note) > 500:
        raise _bad("note", "at most 500 characters")
    row = conn.execute(
        "INSERT INTO irrigation_events (location_id, day, depth_mm, status, note)"
        " VALUES (%s, %s, %s, %s, %s) RETURNING id", (location, day, depth_mm, status, note)
    ).fetchone()
    assert row is not None
    conn.execute("SELECT sds_mark_location_water(%s, %s)", (location, day))
    return Event(row[0], location, day, float(depth_mm), status, note)


def list_events(conn: psycopg.Connection, location: UUID) -> list[Event]:
    """The location's events, by day."""
    rows = conn.execute(
        "SELECT id, location_id, day, depth_mm, status, note FROM irrigation_events"
        " WHERE location_id = %s ORDER BY day, created_at", (location,)).fetchall()
    return [Event(r[0], r[1], r[2], float(r[3]), r[4], r[5]) for r in rows]


def delete_event(conn: psycopg.Connection, location: UUID, event: UUID) -> Event | None:
    """Remove an event and mark the balance from its day; None when there is none."""
    row = conn.execute(
        "DELETE FROM irrigation_events WHERE id = %s AND location_id = %s"
        " RETURNING id, location_id, day, depth_mm, status, note", (event, location)).fetchone()
    if row is None:
        return None
    conn.execute("SELECT sds_mark_location_water(%s, %s)", (location, row[2]))
    return Event(row[0], row[1], row[2], float(row[3]), row[4], row[5])


def balance_history(conn: psycopg.Connection, device: str, location: UUID, days: int = 60
                    ) -> list[wb.Day]:
    """The device's stored balance at the location, last `days` days, oldest first (each
    day its local date)."""
    rows = conn.execute(
        "SELECT (w.time AT TIME ZONE l.tz_name)::date, root_depth, taw, p, raw, etc, ks,"
        " etc_adj, precip, irrigation, deep_percolation, depletion FROM (SELECT * FROM"
        " water_balance WHERE device = %s AND location = %s ORDER BY time DESC LIMIT %s) w"
        " JOIN locations l ON l.id = w.location ORDER BY w.time",
        (device, location, days)).fetchall()
    return [wb.Day(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8] or 0.0, r[9] or 0.0,
                   r[10], r[11]) for r in rows]
