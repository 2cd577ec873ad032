"""`/api/v2/digest`: the organisation's daily alert digest (docs/alerts.md "Daily digest").

Once a day at `hour` in `time_zone`, one email to the organisation's owners and administrators
summarising the last 24 hours' firing and resolved events, written and sent by the deliverer
(alerts/delivery/digests.py). `notifications:read` reads the setting, `notifications:write`
changes it (audited as `alert.digest`).
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate
from psycopg.rows import dict_row

from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.pool import pool
from shared import audit
from shared.errors import BadRequest

blp = Blueprint("digest", __name__, url_prefix="/api/v2/digest",
                description="The organisation's daily alert digest by email.")

OFF = {"active": False, "hour": 7, "time_zone": "UTC", "last_day": None}


class DigestSchema(Schema):
    """Body of PUT /digest: every field optional, the rest kept."""

    active = fields.Boolean()
    hour = fields.Integer(strict=True, validate=validate.Range(min=0, max=23))
    time_zone = fields.String(validate=validate.Length(min=1, max=64))


def _record(row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return dict(OFF)
    return {"active": row["active"], "hour": row["hour"], "time_zone": row["time_zone"],
            "last_day": row["last_day"].isoformat() if row["last_day"] else None}


_ONE = "SELECT active, hour, time_zone, last_day FROM alert_digests WHERE org_id = %s"


@blp.route("", methods=["GET"])
@blp.response(200)
@requires("notifications:read")
def get_digest() -> Any:
    """The digest setting (off until set)."""
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        return _record(cur.execute(_ONE, (current_principal().org_id,)).fetchone())


@blp.route("", methods=["PUT"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": DigestSchema}}})
@blp.response(200)
@requires("notifications:write")
def put_digest() -> Any:
    """Turn the digest on or off, or change its hour or time zone (200, the setting)."""
    args = load(DigestSchema(), request_body(form=False), read_only=("last_day",))
    org = current_principal().org_id
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        if "time_zone" in args and cur.execute(
                "SELECT 1 FROM pg_timezone_names WHERE name = %s",
                (args["time_zone"],)).fetchone() is None:
            raise BadRequest("invalid body: time_zone: not a time zone name (IANA, like "
                             "Europe/Paris)", errors={"json": {"time_zone": ["unknown"]}})
        now = _record(cur.execute(_ONE, (org,)).fetchone())
        merged = {**now, **args}
        if "active" not in args and cur.execute(_ONE, (org,)).fetchone() is None:
            merged["active"] = True  # the first PUT with settings turns it on
        row = cur.execute(
            "INSERT INTO alert_digests (org_id, active, hour, time_zone) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (org_id) DO UPDATE SET active = EXCLUDED.active, hour = EXCLUDED.hour,"
            " time_zone = EXCLUDED.time_zone, updated_at = now()"
            " RETURNING active, hour, time_zone, last_day",
            (org, merged["active"], merged["hour"], merged["time_zone"])).fetchone()
        record = _record(row)
        audit.record(conn, org=org, actor=audit_actor(conn), action="alert.digest",
                     target_type="organisation", target_id=org,
                     details={k: record[k] for k in ("active", "hour", "time_zone")})
    return record
