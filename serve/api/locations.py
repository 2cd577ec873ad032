"""`/api/v2/locations`, `/api/v2/locations/{id}` and `/api/v2/locations/summary`.

Locations of the caller's organisation in the paged envelope, each with the device standing
there now (`current_device`). The summary adds the latest conditions per location
(docs/spec/reference-facts.md decision 13), converted with the unit parameters.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from flask import request
from marshmallow import EXCLUDE, fields

from serve.auth import current_principal, requires
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, envelope
from serve.pool import pool
from serve.readmodels import location_by_id, location_page, location_record, summary_page
from shared import units
from shared.errors import UnknownLocation

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
    with pool().connection() as conn:
        row, devices = location_by_id(conn, org=org, location=wanted)
    if row is None:
        raise UnknownLocation(f"unknown location {location_id!r}")
    return location_record(row, devices)
