"""`/api/v2/notifications`: the organisation's alert events, newest first, page by page, and
their acknowledgement (docs/alerts.md "Notifications").

`notifications:read` to list, `notifications:write` to acknowledge. Filters: rule, device,
kind, acknowledged, and a time range on when the event was created. Another organisation's
event is the same 404 as a missing one.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate, validates_schema

from serve import ids
from serve.auth import audit_actor, current_principal, requires
from serve.body import request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import stamp
from shared import audit
from shared.errors import BadParameter, BadRequest
from shared.timeutil import parse_instant

blp = Blueprint("notifications", __name__, url_prefix="/api/v2/notifications",
                description="Alert events (notifications) of the caller's organisation.")

EVENT_KINDS = ("firing", "resolved", "channel_disabled", "test", "digest")
# Static statements (no SQL is put together at run time): a filter not given is NULL and
# matches every row.
_FILTER = """ WHERE org_id = %(org)s
AND (%(rule)s::uuid IS NULL OR rule_id = %(rule)s)
AND (%(device)s::text IS NULL OR device = %(device)s)
AND (%(kind)s::text IS NULL OR kind = %(kind)s)
AND (%(from)s::timestamptz IS NULL OR created_at >= %(from)s)
AND (%(to)s::timestamptz IS NULL OR created_at < %(to)s)
AND (%(acked)s::boolean IS NULL OR (acknowledged_at IS NOT NULL) = %(acked)s)"""
_SELECT = ("SELECT id, kind, rule_id, device, location_id, column_name, value, unit, at, title,"
           " body, channels, admins_only, created_at, acknowledged_at, acknowledged_by"
           " FROM alert_events")
_PAGE = _SELECT + _FILTER + " ORDER BY created_at DESC, id LIMIT %(limit)s OFFSET %(offset)s"
_COUNT = "SELECT count(*) FROM alert_events" + _FILTER  # nosec B608  constants of this module
_ONE = _SELECT + " WHERE org_id = %s AND id = %s"


class Instant(fields.Field):
    """An ISO 8601 time (as on /data's `from` and `to`)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, str):
            raise ValidationError("must be an ISO 8601 time")
        try:
            return parse_instant(value, name=attr or "time")
        except BadParameter as exc:
            raise ValidationError(exc.message) from None


class ListArgsSchema(PageArgsSchema):
    """Filters of the listing, and the page."""

    class Meta:
        unknown = EXCLUDE

    rule = fields.UUID(load_default=None)
    device = fields.String(load_default=None, validate=validate.Regexp(
        r"^[A-Za-z0-9_.-]{1,64}$", error="must be a device name"))
    kind = fields.String(load_default=None, validate=validate.OneOf(EVENT_KINDS))
    acknowledged = fields.Boolean(load_default=None)
    from_ = Instant(data_key="from", load_default=None)
    to = Instant(load_default=None)

    @validates_schema
    def _range(self, data: dict[str, Any], **_kwargs: Any) -> None:
        if data.get("from_") and data.get("to") and data["from_"] >= data["to"]:
            raise ValidationError("must be before `to`", "from")


def event_record(row: tuple[Any, ...]) -> dict[str, Any]:
    """The served record of an event row selected with _SELECT."""
    (eid, kind, rule, device, location, column, value, unit, at, title, body, channels,
     admins_only, created, acked_at, acked_by) = row
    return {"id": str(eid), "kind": kind, "rule_id": str(rule) if rule else None,
            "device": device, "location_id": str(location) if location else None,
            "column": column, "value": value, "unit": unit, "at": stamp(at), "title": title,
            "body": body, "channels": [str(c) for c in channels] if channels is not None else None,
            "admins_only": admins_only, "created_at": stamp(created),
            "acknowledged_at": stamp(acked_at),
            "acknowledged_by": str(acked_by) if acked_by else None}


def _fetch(conn: psycopg.Connection, org: UUID, eid: UUID) -> dict[str, Any]:
    row = conn.execute(_ONE, (org, eid)).fetchone()
    if row is None:
        raise ids.unknown("notification", eid)
    return event_record(row)


@blp.route("", methods=["GET"])
@blp.arguments(ListArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("notifications:read")
def list_events(limit: int, page: int, rule: UUID | None, device: str | None,
                kind: str | None, acknowledged: bool | None, from_: Any, to: Any) -> Any:
    """Events newest first in the paged envelope, filtered."""
    org = current_principal().org_id
    params: dict[str, Any] = {"org": org, "rule": rule, "device": device, "kind": kind,
                              "from": from_, "to": to, "acked": acknowledged}
    with pool().connection() as conn:
        row = conn.execute(_COUNT, params).fetchone()
        total = row[0] if row else 0
        pages = check_page(total, limit, page)
        rows = conn.execute(_PAGE, params | {"limit": limit,
                                             "offset": offset(limit, page)}).fetchall()
    return envelope([event_record(r) for r in rows], total=total, limit=limit, page=page,
                    pages=pages)


@blp.route("/<objid('notification'):event_id>", methods=["GET"])
@blp.response(200)
@requires("notifications:read")
def get_event(event_id: UUID) -> Any:
    """One event."""
    org = current_principal().org_id
    with pool().connection() as conn:
        return _fetch(conn, org, event_id)


@blp.route("/<objid('notification'):event_id>/ack", methods=["POST"])
@blp.response(200)
@requires("notifications:write")
def acknowledge(event_id: UUID) -> Any:
    """Acknowledge an event; acknowledging again keeps the first time and user."""
    principal = current_principal()
    eid = event_id
    with pool().connection() as conn, conn.transaction():
        acked = conn.execute(
            "UPDATE alert_events SET acknowledged_at = now(), acknowledged_by = %s"
            " WHERE org_id = %s AND id = %s AND acknowledged_at IS NULL",
            (principal.user_id, principal.org_id, eid)).rowcount
        if acked:  # the first acknowledgement only: a repeat changes nothing
            audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                         action="alert.acknowledge", target_type="alert_event", target_id=eid)
        return _fetch(conn, principal.org_id, eid)


BULK_MAX = 500  # events one request acknowledges; a bigger backlog takes a few requests


class BulkAckSchema(Schema):
    """The body of POST /notifications/ack, for the OpenAPI document: exactly one of `ids` or
    `rule` (_bulk_target validates it, naming the bad field)."""

    ids = fields.List(fields.UUID(), metadata={"maxItems": BULK_MAX})
    rule = fields.UUID()


def _bulk_target(body: Any) -> tuple[list[UUID] | None, UUID | None]:
    """(ids, rule) of a bulk body: exactly one of {"ids": [...]} or {"rule": id}."""
    if not isinstance(body, dict) or len(body) != 1 or not set(body) <= {"ids", "rule"}:
        raise BadRequest("send exactly one of {\"ids\": [event ids]} or {\"rule\": rule id}",
                         errors={"json": {"_schema": ["exactly one of ids, rule"]}})
    if "rule" in body:
        try:
            if isinstance(body["rule"], str):
                return None, UUID(body["rule"])
        except ValueError:
            pass
        raise BadRequest("rule: must be an alert rule id (uuid)",
                         errors={"json": {"rule": ["must be a uuid"]}})
    raw = body["ids"]
    if not isinstance(raw, list) or not 0 < len(raw) <= BULK_MAX \
            or not all(isinstance(i, str) for i in raw):
        raise BadRequest(f"ids: a list of 1 to {BULK_MAX} event ids",
                         errors={"json": {"ids": [f"1 to {BULK_MAX} event ids"]}})
    try:
        return list(dict.fromkeys(UUID(i) for i in raw)), None
    except ValueError:
        raise BadRequest("ids: every item must be an event id (uuid)",
                         errors={"json": {"ids": ["every item must be a uuid"]}}) from None


@blp.route("/ack", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": BulkAckSchema}}})
@blp.response(200)
@requires("notifications:write")
def acknowledge_many() -> Any:
    """Acknowledge several events at once: `{"ids": [...]}` (at most BULK_MAX; ids of other
    organisations or already acknowledged are passed over) or `{"rule": id}` (the rule's
    unacknowledged events, BULK_MAX at a time, oldest first). Each acknowledgement is
    audited like a single one. Answers the count acknowledged and how many of the rule's
    remain."""
    ids, rule = _bulk_target(request_body(form=False))
    principal = current_principal()
    with pool().connection() as conn, conn.transaction():
        if ids is not None:
            rows = conn.execute(
                "UPDATE alert_events SET acknowledged_at = now(), acknowledged_by = %s"
                " WHERE org_id = %s AND id = ANY(%s) AND acknowledged_at IS NULL RETURNING id",
                (principal.user_id, principal.org_id, ids)).fetchall()
        else:
            rows = conn.execute(
                "UPDATE alert_events SET acknowledged_at = now(), acknowledged_by = %s"
                " WHERE id IN (SELECT id FROM alert_events WHERE org_id = %s AND rule_id = %s"
                " AND acknowledged_at IS NULL ORDER BY created_at, id LIMIT %s"
                " FOR UPDATE) RETURNING id",
                (principal.user_id, principal.org_id, rule, BULK_MAX)).fetchall()
        actor = audit_actor(conn)
        for (eid,) in rows:
            audit.record(conn, org=principal.org_id, actor=actor, action="alert.acknowledge",
                         target_type="alert_event", target_id=eid,
                         details={"bulk": "rule" if rule else "ids"})
        left = conn.execute(
            "SELECT count(*) FROM alert_events WHERE org_id = %s AND rule_id = %s"
            " AND acknowledged_at IS NULL", (principal.org_id, rule)).fetchone() if rule else None
    return {"acknowledged": len(rows), "ids": [str(r[0]) for r in rows],
            "remaining": left[0] if left else 0}
