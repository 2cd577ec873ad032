"""`/api/v2/devices` and `/api/v2/devices/{name}`: the caller's devices, page by page.

Records carry every device field public clients read (docs/spec/reference-facts.md part A),
null when unknown. Values a device reports (battery, signal, firmware, last contact) are those the
ingester keeps on the devices row. The device record builders are shared with
`serve.api.locations` (a location shows the device standing there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from serve.auth import current_principal, requires
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import day, gps, stamp
from shared.errors import UnknownDevice

blp = Blueprint("devices", __name__, url_prefix="/api/v2/devices",
                description="Devices of the caller's organisation.")

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


@blp.route("", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("devices:read")
def list_devices(limit: int, page: int) -> Any:
    """The caller's devices in the paged envelope, ordered by name.

    `pages` is ceil(total / limit); a page past the last is 404, an empty first page 200.
    """
    org = current_principal().org_id
    with pool().connection() as conn:
        row = conn.execute("SELECT count(*) FROM devices WHERE org_id = %s", (org,)).fetchone()
        total = row[0] if row else 0
        pages = check_page(total, limit, page)
        rows = fetch_devices(conn, org=org, limit=limit, offset=offset(limit, page))
    return envelope([device_record(r) for r in rows], total=total, limit=limit, page=page,
                    pages=pages)


@blp.route("/<name>", methods=["GET"])
@blp.response(200)
@requires("devices:read")
def get_device(name: str) -> Any:
    """One device of the caller's organisation, by name."""
    if "\x00" in name:  # PostgreSQL text cannot hold NUL; no device is called that
        raise UnknownDevice(f"unknown device {name!r}")
    org = current_principal().org_id
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_DEVICE_SQL + " AND d.name = %(name)s",
                          {"org": org, "name": name}).fetchone()
    if row is None:
        raise UnknownDevice(f"unknown device {name!r}")
    return device_record(row)
