"""`/api/v2/locations`, `/api/v2/locations/{id}` and `/api/v2/locations/summary`.

Locations of the caller's organisation in the paged envelope, each with the device standing
there now (`current_device`). The summary adds the latest conditions per location
(docs/spec/reference-facts.md decision 13), converted with the unit parameters.
`PATCH /api/v2/locations/{id}` (`locations:write`) changes one; the field rules and the
rollups a change re-cuts are shared/locations.py's.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from flask import request
from marshmallow import EXCLUDE, Schema, fields
from marshmallow.validate import Length

from people import keypolicy
from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, envelope
from serve.pool import pool
from serve.readmodels import location_by_id, location_page, location_record, summary_page
from shared import audit, locations, units
from shared.errors import Forbidden, UnknownLocation

blp = Blueprint("locations", __name__, url_prefix="/api/v2/locations",
                description="Locations of the caller's organisation, and their conditions.")

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


@blp.route("", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("locations:read")
def list_locations(limit: int, page: int) -> Any:
    """The caller's locations in the paged envelope, ordered by name."""
    org = current_principal().org_id
    with pool().connection() as conn:
        rows, devices, total, pages = location_page(conn, org, limit, page)
    return envelope([location_record(r, devices) for r in rows], total=total, limit=limit,
                    page=page, pages=pages)


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


class KcEntrySchema(Schema):
    """One entry of a crop-coefficient schedule: kc applies from start_date on."""

    start_date = fields.Date(required=True)
    kc = fields.Float(required=True, metadata={"minimum": 0, "maximum": 3})


class LocationUpdateSchema(Schema):
    """Body of PATCH /locations/{id}: any of these fields; null clears a nullable one."""

    name = fields.String(metadata={"description": "1 to 200 characters, unique in the org"})
    gps = fields.List(fields.Float(), validate=Length(equal=2), allow_none=True,
                      metadata={"description": "[lon, lat]; null clears both"})
    elev = fields.Float(allow_none=True, metadata={"description": "metres, -500..9000"})
    tz_name = fields.String(metadata={"description": "IANA zone; re-cuts local hours and days"})
    kc = fields.Float(allow_none=True, metadata={
        "description": "crop coefficient 0..3 for days the schedule does not cover"})
    kc_schedule = fields.List(fields.Nested(KcEntrySchema), metadata={
        "description": "replaces the dated kc schedule; [] removes it"})
    sensor_height = fields.Float(metadata={"description": "wind sensor height, m"})
    state = fields.String(metadata={"enum": list(locations.STATES)})
    crop = fields.String(allow_none=True)
    notes = fields.String(allow_none=True)


READ_ONLY = ("id", "archived", "start_date", "end_date", "current_device")


@blp.route("/<objid('location'):location_id>", methods=["PATCH"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": LocationUpdateSchema}}})
@blp.response(200)
@requires("locations:write")
def update_location(location_id: UUID) -> Any:
    """Change a location: name, gps, elev, tz_name, kc, kc_schedule, sensor_height, state,
    crop, notes. A new zone re-cuts the local hours and days; new coordinates, elevation,
    sensor height or crop coefficients recompute ET in every rollup (`X-Rollups-Marked`
    counts the buckets queued). Administrators of the organisation only (403 otherwise)."""
    wanted = location_id
    changes = load(LocationUpdateSchema(), request_body(form=False), read_only=READ_ONLY)
    values = {k: v for k, v in changes.items() if k not in ("gps", "kc_schedule")}
    if "gps" in changes:
        values["lon"], values["lat"] = changes["gps"] or (None, None)
    schedule = None
    if "kc_schedule" in changes:
        schedule = [(e["start_date"], e["kc"]) for e in changes["kc_schedule"]]
    principal = current_principal()
    with pool().connection() as conn:
        # Until roles per membership exist (issue 23), writing is an administrator's right.
        if not keypolicy.is_admin(conn, principal):
            raise Forbidden("changing a location needs an administrator of the organisation")
        outcome = locations.update_location(conn, wanted, values, schedule)
        if outcome.changed:
            audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                         action="location.update", target_type="location", target_id=wanted,
                         details={"changed": list(outcome.changed), "values": changes,
                                  "rollup_buckets_marked": outcome.marked})
        row, devices = location_by_id(conn, org=principal.org_id, location=wanted)
    if row is None:
        raise UnknownLocation(f"unknown location {str(location_id)!r}")
    return location_record(row, devices), 200, {"X-Rollups-Marked": str(outcome.marked)}


@blp.route("/<objid('location'):location_id>", methods=["GET"])
@blp.response(200)
@requires("locations:read")
def get_location(location_id: UUID) -> Any:
    """One location of the caller's organisation, by id."""
    wanted = location_id
    org = current_principal().org_id
    with pool().connection() as conn:
        row, devices = location_by_id(conn, org=org, location=wanted)
    if row is None:
        raise UnknownLocation(f"unknown location {str(location_id)!r}")
    return location_record(row, devices)
