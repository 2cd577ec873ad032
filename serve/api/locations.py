"""`/api/v2/locations`, `/api/v2/locations/{id}` and `/api/v2/locations/summary`.

Locations of the caller's organisation in the paged envelope, each with the device standing
there now (`current_device`). The summary adds the latest conditions per location
(docs/spec/reference-facts.md decision 13), converted with the unit parameters.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
from flask import request
from marshmallow import EXCLUDE, fields
from psycopg.rows import dict_row

from serve.api.devices import device_record, fetch_devices_by_id
from serve.auth import current_principal, requires
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import day, gps
from shared import units
from shared.columns import TABLES, Column
from shared.errors import UnknownLocation
from shared.timeutil import format_utc_z, local_date, local_day_bounds, zone

blp = Blueprint("locations", __name__, url_prefix="/api/v2/locations",
                description="Locations of the caller's organisation, and their conditions.")

_LOCATION_SQL = """
SELECT l.id, l.name, l.lon, l.lat, l.elev, l.tz_name, l.state, l.archived, l.start_date,
       l.end_date, dep.device_id
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


def _codes(param: str) -> list[str]:
    """The codes of a unit parameter as documented: lower and upper case (both accepted)."""
    codes = list(units.UNITS[param])
    return codes + [c.upper() for c in codes]


class SummaryArgsSchema(PageArgsSchema):
    """Paging plus the unit parameters temp, ratio and size (case-insensitive codes)."""

    class Meta:
        unknown = EXCLUDE

    temp = fields.String(metadata={"description": "c (default) or f, any case",
                                   "enum": _codes("temp")})
    ratio = fields.String(metadata={"description": "pct (default) or dec, any case",
                                    "enum": _codes("ratio")})
    size = fields.String(metadata={"description": "mm (default) or in, any case",
                                   "enum": _codes("size")})


def location_record(row: dict[str, Any], devices: dict[UUID, dict[str, Any]]
                    ) -> dict[str, Any]:
    """The served location record; every key present, `current_device` null when empty."""
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
    }


def _page(conn: psycopg.Connection, org: UUID, limit: int, page: int
          ) -> tuple[list[dict[str, Any]], dict[UUID, dict[str, Any]], int, int]:
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


@blp.route("", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("locations:read")
def list_locations(limit: int, page: int) -> Any:
    """The caller's locations in the paged envelope, ordered by name."""
    org = current_principal().org_id
    with pool().connection() as conn:
        rows, devices, total, pages = _page(conn, org, limit, page)
    return envelope([location_record(r, devices) for r in rows], total=total, limit=limit,
                    page=page, pages=pages)


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

    def conv(value: float | None, col: Column) -> float | None:
        if col.measure is None:  # the four summary columns all have one; stay correct if not
            return value
        return units.convert(value, col, chosen[units.param_for(col.measure)])

    rows, devices, total, pages = _page(conn, org, limit, page)
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
    return items, total, pages


@blp.route("/summary", methods=["GET"])
@blp.arguments(SummaryArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("locations:read")
def summary(limit: int, page: int, **_units: str) -> Any:
    """The caller's locations with their current device and latest conditions.

    Each item is the location record plus `conditions` (`time` of the last reading there,
    its `tair` and `rh`) and `today` (the location's local `date`, `precip` so far, and the
    day's `et` with its row's `sample_pct` and `low_quality`: ET of the hours so far while
    low_quality is true).
    Units follow `temp`, `ratio` and `size`; the `X-Units` header lists those in effect.
    """
    chosen = {param: units.parse_unit(param, request.args.get(param))
              for param in ("temp", "ratio", "size")}
    with pool().connection() as conn:
        items, total, pages = summary_page(conn, current_principal().org_id, limit, page,
                                           chosen)
    labels = ",".join(chosen[p].label for p in ("temp", "ratio", "size"))
    return envelope(items, total=total, limit=limit, page=page, pages=pages), 200, {
        "X-Units": labels}


@blp.route("/<location_id>", methods=["GET"])
@blp.response(200)
@requires("locations:read")
def get_location(location_id: str) -> Any:
    """One location of the caller's organisation, by id."""
    try:
        wanted = UUID(location_id)
    except ValueError:
        raise UnknownLocation(f"unknown location {location_id!r}") from None
    org = current_principal().org_id
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_LOCATION_SQL + " AND l.id = %(id)s",
                          {"org": org, "id": wanted}).fetchone()
        devices = {} if row is None or row["device_id"] is None else fetch_devices_by_id(
            conn, org=org, ids=[row["device_id"]])
    if row is None:
        raise UnknownLocation(f"unknown location {location_id!r}")
    return location_record(row, devices)
