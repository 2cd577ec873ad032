"""`/api/v2/locations/{id}/water` and `/api/v2/locations/{id}/irrigation`: a location's
root-zone water balance settings, its irrigation events and the forecast (issue 35,
docs/waterbalance.md). The daily balance itself is the `water_balance` table of `/data`.
Writes are an administrator's (as PATCH /locations/{id}) and audited; rules and storage are
shared/irrigation.py's, the balance and forecast shared/waterbalance.py's.
"""

from __future__ import annotations

from datetime import date
from typing import Any
from uuid import UUID

from marshmallow import Schema, fields

from people import keypolicy
from serve import ids
from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.pool import pool
from serve.readmodels import location_by_id
from shared import audit, irrigation
from shared import waterbalance as wb
from shared.errors import Forbidden

blp = Blueprint("water", __name__, url_prefix="/api/v2/locations",
                description="A location's root-zone water balance: settings, irrigation "
                            "events and when to irrigate.")


def _location(conn: Any, wanted: UUID) -> UUID:
    """The caller's location in the path (404 when unknown or another org's; a malformed id
    is serve.ids')."""
    row, _devices = location_by_id(conn, org=current_principal().org_id, location=wanted)
    if row is None:
        raise ids.unknown("location", wanted)
    return wanted


def _admin(conn: Any) -> None:
    if not keypolicy.is_admin(conn, current_principal()):
        raise Forbidden("changing a location's water settings or irrigation needs an "
                        "administrator of the organisation")


class WaterSettingsSchema(Schema):
    """Body of PUT /locations/{id}/water (replaces the settings)."""

    soil = fields.String(allow_none=True, metadata={
        "description": "FAO-56 Table 19 class", "enum": list(wb.SOILS)})
    theta_fc = fields.Float(allow_none=True, metadata={"description": "field capacity, m3/m3"})
    theta_wp = fields.Float(allow_none=True, metadata={"description": "wilting point, m3/m3"})
    root_depth = fields.Float(required=True, metadata={"description": "m (at root_start)"})
    root_depth_end = fields.Float(allow_none=True, metadata={"description": "m at root_end"})
    root_start = fields.Date(allow_none=True)
    root_end = fields.Date(allow_none=True)
    crop = fields.String(allow_none=True, metadata={
        "description": "FAO-56 Table 22 crop (gives p)", "enum": list(wb.CROP_P)})
    p = fields.Float(allow_none=True, metadata={"description": "depletion fraction 0..1"})


class IrrigationSchema(Schema):
    """Body of POST /locations/{id}/irrigation."""

    day = fields.Date(required=True, metadata={"description": "local date"})
    depth_mm = fields.Float(required=True, metadata={"minimum": 0, "maximum": 500})
    status = fields.String(load_default="applied",
                           metadata={"enum": list(irrigation.STATUSES)})
    note = fields.String(allow_none=True)


def _event(e: irrigation.Event) -> dict[str, Any]:
    return {"id": str(e.id), "day": e.day.isoformat(), "depth_mm": e.depth_mm,
            "status": e.status, "note": e.note}


def _settings(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {k: (v.isoformat() if isinstance(v, date) else v) for k, v in row.items()
            if k not in ("location_id",)}


def water_record(conn: Any, location: UUID) -> dict[str, Any]:
    """Settings, events and, per device with a balance there, the forecast."""
    devices = [r[0] for r in conn.execute(
        "SELECT DISTINCT device FROM water_balance WHERE location = %s ORDER BY device",
        (location,)).fetchall()]
    forecasts = []
    for device in devices:
        history = irrigation.balance_history(conn, device, location)
        f = wb.forecast(history)
        if f is None:
            continue
        last = history[-1]
        forecasts.append({
            "device": device, "day": last.day.isoformat(), "depletion": round(last.dr, 2),
            "raw": round(last.raw, 2), "taw": round(last.taw, 2),
            "days_to_raw": f.days_to_raw, "refill_mm": round(f.refill_mm, 1),
            "mean_etc": None if f.mean_etc is None else round(f.mean_etc, 2)})
    return {"location": str(location), "settings": _settings(irrigation.get_settings(
        conn, location)), "events": [_event(e) for e in irrigation.list_events(conn, location)],
        "forecast": forecasts, "forecast_rule": f"mean ETc of the last {wb.FORECAST_DAYS} days,"
        " no rain; refill_mm brings the root zone back to field capacity"}


@blp.route("/<objid('location'):location_id>/water", methods=["GET"])
@blp.response(200)
@requires("locations:read")
def get_water(location_id: UUID) -> Any:
    """The location's water settings (null: none), irrigation events and, per device with a
    balance there, the forecast: `days_to_raw` (days until the depletion reaches RAW with no
    rain at the mean ETc of the last 7 days; 0: now) and `refill_mm`."""
    with pool().connection() as conn:
        return water_record(conn, _location(conn, location_id))


@blp.route("/<objid('location'):location_id>/water", methods=["PUT"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": WaterSettingsSchema}}})
@blp.response(200)
@requires("locations:write")
def put_water(location_id: UUID) -> Any:
    """Set the location's soil, roots and p (replacing them); the balance is recomputed."""
    values = load(WaterSettingsSchema(), request_body(form=False))
    principal = current_principal()
    with pool().connection() as conn:
        loc = _location(conn, location_id)
        _admin(conn)
        stored = irrigation.put_settings(conn, loc, values)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                     action="location.water_settings", target_type="location", target_id=loc,
                     details={"values": _settings(stored)})
        return water_record(conn, loc)


@blp.route("/<objid('location'):location_id>/irrigation", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": IrrigationSchema}}})
@blp.response(201)
@requires("locations:write")
def post_irrigation(location_id: UUID) -> Any:
    """Record an irrigation event (planned or applied); the balance is recomputed from its
    day on."""
    values = load(IrrigationSchema(), request_body(form=False))
    principal = current_principal()
    with pool().connection() as conn:
        loc = _location(conn, location_id)
        _admin(conn)
        event = irrigation.add_event(conn, loc, values["day"], float(values["depth_mm"]),
                                     values.get("status") or "applied", values.get("note"))
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                     action="irrigation.create", target_type="location", target_id=loc,
                     details=_event(event))
    return _event(event), 201


@blp.route("/<objid('location'):location_id>/irrigation/"
           "<objid('irrigation event'):event_id>", methods=["DELETE"])
@blp.response(204)
@requires("locations:write")
def delete_irrigation(location_id: UUID, event_id: UUID) -> Any:
    """Remove an irrigation event; the balance is recomputed from its day on."""
    principal = current_principal()
    with pool().connection() as conn:
        loc = _location(conn, location_id)
        _admin(conn)
        event = irrigation.delete_event(conn, loc, event_id)
        if event is None:
            raise ids.unknown("irrigation event", event_id)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                     action="irrigation.delete", target_type="location", target_id=loc,
                     details=_event(event))
    return "", 204
