"""`/api/v2/devices` and `/api/v2/devices/{name}`: the caller's devices, page by page.

Records carry every device field public clients read (docs/spec/reference-facts.md part A),
null when unknown. Values a device reports (battery, signal, firmware, last contact) are those the
ingester keeps on the devices row. The records and queries are serve/readmodels.py's.
"""

from __future__ import annotations

from typing import Any

from serve.auth import current_principal, requires
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.readmodels import device_by_name, device_record, fetch_devices
from shared.errors import UnknownDevice

blp = Blueprint("devices", __name__, url_prefix="/api/v2/devices",
                description="Devices of the caller's organisation.")

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
    org = current_principal().org_id
    with pool().connection() as conn:
        row = device_by_name(conn, org=org, name=name)
    if row is None:
        raise UnknownDevice(f"unknown device {name!r}")
    return device_record(row)
