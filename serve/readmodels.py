"""The read models the API's blueprints and the dashboard share: device and location records
(every key clients read, docs/spec/reference-facts.md part A), their page and single fetches,
the locations summary with each location's latest conditions and today's totals, and the table
lookup of `/schemas` and `/data`. Blueprints (serve/api/) and dashboard views (serve/web/) import
these, never one another.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from serve.paging import check_page, offset
from serve.records import day, gps, stamp
from shared import units
from shared.columns import TABLES, Column, Table
from shared.errors import UnknownTable
from shared.timeutil import format_utc_z, local_date, local_day_bounds, zone

# ---- devices -------------------------------------------------------------------------------------

# Where a device stands now: its deployment covering now(), at a location of its own org.
# last_seen, last_post, battery, signal and firmware are kept on the devices row by the
# ingester as messages arrive, so listing devices never searches the reading tables.
_DEVICE_SQL = """
SELECT d.id, d.name, d.type, d.model, d.state, d.org_id, d.owner_id, d.firmware_id,
       d.reported_fw, d.last_seen, d.last_post, d.last_deploy, d.sync_interval,
       d.batt_pct, d.batt_volt, d.signal_strength, d.has_bridge,
       l.id AS loc_id, l.name AS loc_name, l.lon AS loc_lon, l.lat AS loc_lat,
       l.elev AS loc_elev, l.tz_name AS loc_tz_name, l.start_date AS loc_start_date
FROM devices d
LEFT JOIN LATERAL (SELECT location_id FROM deployments WHERE device_id = d.id
                   AND during @> now() ORDER BY lower(during) DESC LIMIT 1) dep ON true
LEFT JOIN locations l ON l.id = dep.location_id AND l.org_id = d.org_id
WHERE d.org_id = %(org)s
"""


def device_record(row: dict[str, Any], *, with_location: bool = True) -> dict[str, Any]:
    """The served device record of a `_DEVICE_SQL` row; every key present."""
    record: dict[str, Any] = {
        "id": str(row["id"]),
        "name": row["name"],
        "type": row["type"],
        "model": row["model"],
        "state": row["state"],
        "org_id": str(row["org_id"]),
        "owner_id": None if row["owner_id"] is None else str(row["owner_id"]),
        "firmware_id": row["firmware_id"],
        "reported_fw": row["reported_fw"],
        "last_seen": stamp(row["last_seen"]),
        "last_post": stamp(row["last_post"]),
        "last_deploy": stamp(row["last_deploy"]),
        "sync_interval": row["sync_interval"],
        "batt_pct": row["batt_pct"],
        "batt_volt": row["batt_volt"],
        "signal_strength": row["signal_strength"],
        "has_bridge": row["has_bridge"],
    }
    if with_location:
        record["current_location"] = None if row["loc_id"] is None else {
            "id": str(row["loc_id"]),
            "name": row["loc_name"],
            "gps": gps(row["loc_lon"], row["loc_lat"]),
            "elev": row["loc_elev"],
            "tz_name": row["loc_tz_name"],
            "start_date": day(row["loc_start_date"]),
        }
    return record


def fetch_devices(conn: psycopg.Connection, *, org: UUID, limit: int, offset: int
                  ) -> list[dict[str, Any]]:
    """One page of the organisation's device rows, ordered by name."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_DEVICE_SQL + " ORDER BY d.name, d.id LIMIT %(limit)s"
                           " OFFSET %(offset)s",
                           {"org": org, "limit": limit, "offset": offset}).fetchall()


def fetch_devices_by_id(conn: psycopg.Connection, *, org: UUID, ids: Sequence[UUID]
                        ) -> dict[UUID, dict[str, Any]]:
    """Device rows of the organisation with these ids, by id."""
    if not ids:
        return {}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_DEVICE_SQL + " AND d.id = ANY(%(ids)s)",
                           {"org": org, "ids": list(ids)}).fetchall()
    return {r["id"]: r for r in rows}


def device_by_name(conn: psycopg.Connection, *, org: UUID, name: str) -> dict[str, Any] | None:
    """The organisation's device row called `name`, or None (also for a name PostgreSQL text
    cannot hold: no device is called that)."""
    if "\x00" in name:
        return None
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_DEVICE_SQL + " AND d.name = %(name)s",
                           {"org": org, "name": name}).fetchone()


def location_by_id(conn: psycopg.Connection, *, org: UUID, location: UUID
                   ) -> tuple[dict[str, Any] | None, dict[UUID, dict[str, Any]]]:
    """The organisation's location row with this id (or None) and the device row standing
    there, by id."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_LOCATION_SQL + " AND l.id = %(id)s",
                          {"org": org, "id": location}).fetchone()
    devices = {} if row is None or row["device_id"] is None else fetch_devices_by_id(
        conn, org=org, ids=[row["device_id"]])
    return row, devices


# ---- locations -----------------------------------------------------------------------------------

_LOCATION_SQL = """
SELECT l.id, l.name, l.lon, l.lat, l.elev, l.tz_name, l.state, l.archived, l.start_date,
       l.end_date, dep.device_id, l.kc, l.sensor_height, l.crop, l.notes,
       (SELECT coalesce(json_agg(json_build_object('start_date', c.start_date,
                                                   'kc', round(c.kc::numeric, 4)::float8)
                                 ORDER BY c.start_date), '[]')
        FROM crop_coefficients c WHERE c.location_id = l.id) AS kc_schedule
FROM locations l
LEFT JOIN LATERAL (SELECT p.device_id FROM deployments p JOIN devices d ON d.id = p.device_id
                   WHERE p.location_id = l.id AND d.org_id = l.org_id AND p.during @> now()
                   ORDER BY lower(p.during) DESC, d.name LIMIT 1) dep ON true
WHERE l.org_id = %(org)s
"""

# How far back the latest reading is looked for: the 5-minute table's default window. The
# bound keeps the search to a few chunks (a location without recent readings would otherwise
# be looked for through the whole history); older conditions are not current anyway.
LATEST_WITHIN = TABLES["calibrated"].default_window
# The summary's values and the columns (registry) whose unit and precision they follow.
TAIR: Column = TABLES["calibrated"].column("tair")
RH: Column = TABLES["calibrated"].column("rh")
PRECIP: Column = TABLES["calibrated"].column("precip")
# Today's ET is the daily row's (one definition of a partial day's ET: docs/aggregate.md),
# with that row's completeness.
ET: Column = TABLES["daily"].column("et")
SAMPLE_PCT: Column = TABLES["daily"].column("sample_pct")


def location_record(row: dict[str, Any], devices: dict[UUID, dict[str, Any]]
                    ) -> dict[str, Any]:
    """The served location record; every key present, `current_device` null when empty.
    The spec's fields come first (docs/spec/reference-facts.md), then what `locations:write`
    sets beyond them: `kc`, `kc_schedule`, `sensor_height`, `crop`, `notes`."""
    device = devices.get(row["device_id"]) if row["device_id"] is not None else None
    return {
        "id": str(row["id"]),
        "name": row["name"],
        "gps": gps(row["lon"], row["lat"]),
        "elev": row["elev"],
        "tz_name": row["tz_name"],
        "state": row["state"],
        "archived": row["archived"],
        "start_date": day(row["start_date"]),
        "end_date": day(row["end_date"]),
        "current_device": None if device is None else device_record(device,
                                                                    with_location=False),
        "kc": None if row["kc"] is None else round(float(row["kc"]), 4),
        "kc_schedule": row["kc_schedule"],
        "sensor_height": round(float(row["sensor_height"]), 3),
        "crop": row["crop"],
        "notes": row["notes"],
    }


def location_page(conn: psycopg.Connection, org: UUID, limit: int, page: int
                  ) -> tuple[list[dict[str, Any]], dict[UUID, dict[str, Any]], int, int]:
    """One page of the organisation's location rows (by name), the device rows standing there
    by id, the total and the number of pages (a page past the last: 404)."""
    row = conn.execute("SELECT count(*) FROM locations WHERE org_id = %s", (org,)).fetchone()
    total = row[0] if row else 0
    pages = check_page(total, limit, page)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_LOCATION_SQL + " ORDER BY l.name, l.id LIMIT %(limit)s"
                           " OFFSET %(offset)s",
                           {"org": org, "limit": limit, "offset": offset(limit, page)}).fetchall()
    devices = fetch_devices_by_id(
        conn, org=org, ids=[r["device_id"] for r in rows if r["device_id"] is not None])
    return rows, devices, total, pages


def _conditions(conn: psycopg.Connection, rows: list[dict[str, Any]], now: datetime
                ) -> dict[UUID, dict[str, Any]]:
    """Latest reading (of the last LATEST_WITHIN) and today's totals per location, in stored
    units.

    "Today" is the location's local day containing `now` ([local midnight, next local
    midnight) in UTC). Precipitation sums the 5-minute readings so far; ET, sample_pct and
    low_quality are those of the day's daily rollup row (the one with the most readings when
    several devices stood there).
    """
    if not rows:
        return {}
    since = now - LATEST_WITHIN
    ids, starts, ends, dates = [], [], [], {}
    for r in rows:
        tz = zone(r["tz_name"])
        today = local_date(now, tz)
        start, end = local_day_bounds(today, tz)
        ids.append(r["id"])
        starts.append(start)
        ends.append(end)
        dates[r["id"]] = today
    with conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute(
            "SELECT b.loc, last.time, last.tair, last.rh,"
            " (SELECT sum(c.precip) FROM calibrated c WHERE c.location = b.loc"
            "   AND c.time >= b.start AND c.time < b.stop) AS precip,"
            " d.et, d.sample_pct, d.low_quality"
            " FROM unnest(%s::uuid[], %s::timestamptz[], %s::timestamptz[]) AS b(loc, start, stop)"
            " LEFT JOIN LATERAL (SELECT time, tair, rh FROM calibrated WHERE location = b.loc"
            "   AND time >= %s ORDER BY time DESC LIMIT 1) last ON true"
            " LEFT JOIN LATERAL (SELECT et, sample_pct, low_quality FROM daily"
            "   WHERE location = b.loc AND time >= b.start AND time < b.stop"
            "   ORDER BY sample_pct DESC NULLS LAST, device LIMIT 1) d ON true",
            (ids, starts, ends, since)).fetchall()
    return {f["loc"]: {**f, "date": dates[f["loc"]]} for f in found}


def summary_page(conn: psycopg.Connection, org: UUID, limit: int, page: int,
                 chosen: dict[str, units.Unit]) -> tuple[list[dict[str, Any]], int, int]:
    """One page of summary items (location record, `conditions`, `today`) in the units
    `chosen` for temp, ratio and size; with the total and the number of pages. Also the
    dashboard's locations page."""
    rows, devices, total, pages = location_page(conn, org, limit, page)
    return summary_items(conn, rows, devices, chosen), total, pages


def location_summary(conn: psycopg.Connection, org: UUID, location: UUID,
                     chosen: dict[str, units.Unit]) -> dict[str, Any] | None:
    """The summary item of one location of the organisation (None when it has no such
    location): the very figures of its row in `summary_page`, so a device's page and the
    locations list show one "ET today"."""
    row, devices = location_by_id(conn, org=org, location=location)
    return None if row is None else summary_items(conn, [row], devices, chosen)[0]


def summary_items(conn: psycopg.Connection, rows: list[dict[str, Any]],
                  devices: dict[UUID, dict[str, Any]], chosen: dict[str, units.Unit]
                  ) -> list[dict[str, Any]]:
    """Summary items (location record, `conditions`, `today`) of location rows, in the units
    `chosen` for temp, ratio and size."""

    def conv(value: float | None, col: Column) -> float | None:
        if col.measure is None:  # the four summary columns all have one; stay correct if not
            return value
        return units.convert(value, col, chosen[units.param_for(col.measure)])

    conditions = _conditions(conn, rows, datetime.now(UTC))
    items = []
    for r in rows:
        c = conditions.get(r["id"], {})
        item = location_record(r, devices)
        item["conditions"] = {
            "time": None if c.get("time") is None else format_utc_z(c["time"]),
            "tair": conv(c.get("tair"), TAIR),
            "rh": conv(c.get("rh"), RH),
        }
        item["today"] = {
            "date": day(c.get("date")),
            "precip": conv(c.get("precip"), PRECIP),
            "et": conv(c.get("et"), ET),
            "sample_pct": conv(c.get("sample_pct"), SAMPLE_PCT),
            "low_quality": c.get("low_quality"),
        }
        items.append(item)
    return items


# ---- tables --------------------------------------------------------------------------------------

def table_or_404(name: str) -> Table:
    """The registry table called `name`; UnknownTable (404) listing the valid names."""
    found = TABLES.get(name)
    if found is None:
        raise UnknownTable(f"unknown table {name!r}; tables: {', '.join(TABLES)}",
                           errors={"table": [f"must be one of: {', '.join(TABLES)}"]})
    return found
