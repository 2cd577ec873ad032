"""`/api/v2/devices/{name}/deployments`: where a device has been, and moving it (issue 23).

A deployment places a device at a location for a time range; the readings it takes in that
range belong to the location. Reading the history needs `devices:read`. Moving a device is a
change to the locations (`locations:write`, an administrator's right): the new deployment
starts at `from` (default now), the device's open deployment that began earlier is closed there,
readings already stored in the new range are relabelled with the new location and their rollup
buckets recomputed (shared/places.deploy_device, the same rule as `sds device deploy`). A
deployment that would overlap another one is a 409 that changes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
from marshmallow import Schema, fields

from people import keypolicy
from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.pool import pool
from serve.readmodels import device_by_name
from serve.records import stamp
from shared import audit, places
from shared.errors import BadParameter, Forbidden, UnknownDevice, UnknownLocation
from shared.timeutil import parse_instant

blp = Blueprint("deployments", __name__, url_prefix="/api/v2/devices",
                description="Where a device is and was deployed; moving it between locations.")


class MoveSchema(Schema):
    """Body of POST /devices/{name}/deployments."""

    location = fields.String(required=True, metadata={"description": "the new location's id"})
    start = fields.String(data_key="from", metadata={
        "description": "ISO 8601 start of the new deployment (default now); readings from then "
                       "on belong to the new location"})
    end = fields.String(data_key="to", allow_none=True, metadata={
        "description": "ISO 8601 end; absent or null: open-ended"})


def _device_id(conn: psycopg.Connection, name: str) -> UUID:
    """The caller's device by name: the same look-up, and 404, as GET /devices/{name}."""
    row = device_by_name(conn, org=current_principal().org_id, name=name)
    if row is None:
        raise UnknownDevice(f"unknown device {name!r}")
    return UUID(str(row["id"]))


def _history(conn: psycopg.Connection, device: UUID) -> list[dict[str, Any]]:
    """The device's deployments, newest first."""
    rows = conn.execute(
        "SELECT dp.id, dp.location_id, l.name, lower(dp.during), upper(dp.during)"
        " FROM deployments dp JOIN locations l ON l.id = dp.location_id"
        " WHERE dp.device_id = %s ORDER BY lower(dp.during) DESC", (device,)).fetchall()
    return [{"id": r[0], "location": {"id": str(r[1]), "name": r[2]},
             "from": stamp(r[3]), "to": stamp(r[4])} for r in rows]


@blp.route("/<name>/deployments", methods=["GET"])
@blp.response(200)
@requires("devices:read")
def list_deployments(name: str) -> Any:
    """The device's deployments, newest first: `{"items": [{"id", "location": {"id", "name"},
    "from", "to"}]}` (`to` null for the current, open-ended one)."""
    with pool().connection() as conn:
        return {"items": _history(conn, _device_id(conn, name))}


@blp.route("/<name>/deployments", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": MoveSchema}}})
@blp.response(201)
@requires("locations:write")
def move_device(name: str) -> Any:
    """Deploy the device at another location from `from` (default now) until `to` (default
    open-ended). `X-Rollups-Marked` counts the rollup buckets queued for recomputation.
    Administrators of the organisation only (403 otherwise)."""
    body = load(MoveSchema(), request_body(form=False))
    start = parse_instant(body["start"], name="from") if body.get("start") else \
        datetime.now(UTC)
    end = parse_instant(body["end"], name="to") if body.get("end") else None
    if end is not None and end <= start:
        raise BadParameter("to: must be after from", errors={"to": ["must be after from"]})
    try:
        location = UUID(body["location"])
    except ValueError:
        raise UnknownLocation(f"unknown location {body['location']!r}") from None
    principal = current_principal()
    with pool().connection() as conn:
        device = _device_id(conn, name)  # first: another organisation's device is a 404
        if not keypolicy.is_admin(conn, principal):
            raise Forbidden("moving a device needs an administrator of the organisation")
        move = places.move_device(conn, device=name, location=location, start=start,
                                    end=end)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn), action="device.move",
                     target_type="device", target_id=device,
                     details={"device": name, "location": str(location),
                              "from": stamp(start), "to": stamp(end),
                              "deployment": move.deployment})
        history = _history(conn, device)
    moved = next(d for d in history if d["id"] == move.deployment)
    return moved, 201, {"X-Rollups-Marked": str(move.marked)}
