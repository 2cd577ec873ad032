"""GET /api/v2/quarantine (issue 34): the organisation's bad data, paged like every listing.

Rows come through the view `org_quarantine`, which holds only the rows of the request
organisation's devices (and, for a teams-only member, their teams' devices): the tenancy is
the database's, not this module's. As on the dashboard's bad-data page, the raw payload (and
the strings a detail quotes from it) go to owners and administrators only.
"""

from __future__ import annotations

import base64
from typing import Any

from marshmallow import EXCLUDE, fields, validate

from people import keypolicy
from serve.auth import current_principal, requires
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import stamp
from shared.errors import UnknownDevice
from shared.quarantinecodes import REASONS, without_quotes

blp = Blueprint("quarantine", __name__, url_prefix="/api/v2/quarantine",
                description="Messages and readings the ingester could not store (bad data).")

# Static statements: a filter not given is NULL and matches every row.
_FILTER = """ WHERE (%(device)s::text IS NULL OR device = %(device)s)
AND (%(reason)s::text IS NULL OR reason = %(reason)s)"""
_COLUMNS = ("SELECT id, received_at, topic, device, reason, detail, reading_index,"
            " payload_bytes, truncated, payload_sha256")
_PAGE = _COLUMNS + "{payload} FROM org_quarantine" + _FILTER + \
    " ORDER BY id DESC LIMIT %(limit)s OFFSET %(offset)s"
_COUNT = "SELECT count(*) FROM org_quarantine" + _FILTER  # nosec B608  constants of this module


class QuarantineArgsSchema(PageArgsSchema):
    """Filters of the listing (`device`: a name; `reason`: a code), and the page."""

    class Meta:
        unknown = EXCLUDE

    device = fields.String(load_default=None, validate=validate.Length(1, 64))
    reason = fields.String(load_default=None, validate=validate.OneOf(list(REASONS)))


def record(row: tuple[Any, ...], admin: bool) -> dict[str, Any]:
    """One row as the API shows it; `payload_base64` only for administrators."""
    (rid, received, topic, device, reason, detail, index, size, truncated, sha,
     *payload) = row
    out: dict[str, Any] = {
        "id": rid, "received_at": stamp(received), "topic": topic, "device": device,
        "reason": reason, "reason_text": REASONS.get(reason),
        "detail": detail if admin else without_quotes(detail), "reading_index": index,
        "payload_bytes": size, "truncated": bool(truncated),
        "payload_sha256": sha.hex() if sha is not None else None}
    if admin:
        out["payload_base64"] = base64.b64encode(payload[0] or b"").decode("ascii")
    return out


@blp.route("", methods=["GET"])
@blp.arguments(QuarantineArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("devices:read")
def list_quarantine(limit: int, page: int, device: str | None, reason: str | None) -> Any:
    """The organisation's quarantined messages and readings, newest first, in the paged
    envelope. Filters: `device` (name; one the caller cannot see is 404), `reason` (a code,
    explained in `reason_text`). Owners and administrators also get `payload_base64` (the
    payload as kept: a prefix when `truncated`) and details with the payload's strings."""
    principal = current_principal()
    with pool().connection() as conn:
        admin = keypolicy.is_admin(conn, principal)
        if device is not None and conn.execute(
                "SELECT 1 FROM devices WHERE name = %s AND org_id = %s",
                (device, principal.org_id)).fetchone() is None:
            raise UnknownDevice(f"unknown device {device!r}")
        bind = {"device": device, "reason": reason}
        counted = conn.execute(_COUNT, bind).fetchone()
        total = counted[0] if counted else 0
        pages = check_page(total, limit, page)
        rows = conn.execute(_PAGE.format(payload=", payload" if admin else ""),
                            {**bind, "limit": limit, "offset": offset(limit, page)}).fetchall()
    return envelope([record(r, admin) for r in rows], total=total, limit=limit, page=page,
                    pages=pages)
