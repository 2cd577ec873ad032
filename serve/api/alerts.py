"""`/api/v2/alerts`: the organisation's alert rules (docs/alerts.md "Rules"), page by page.

`notifications:read` to list and read, `notifications:write` to create, change and delete.
The rule model (validation, canonical thresholds, unit parameters) is shared/alertrules.py;
here only the organisation's objects are resolved (a scope's device or location of another
organisation is a 400 naming `scope`, another organisation's rule a 404). Each change sends
NOTIFY `sds_alert_rules`, so the evaluator reads the rules again at once.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from flask import current_app, request
from marshmallow import Schema, fields, validate

from serve import ids
from serve.auth import audit_actor, current_principal, requires
from serve.body import request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import stamp
from shared import alertrules, alertstore, audit, units
from shared.alertrules import Rule

blp = Blueprint("alerts", __name__, url_prefix="/api/v2/alerts",
                description="Alert rules of the caller's organisation (docs/alerts.md).")


class ConditionSchema(Schema):
    """A comparison: `op` and `threshold` (in the rule's units)."""

    op = fields.String(validate=validate.OneOf(alertrules.OPS))
    threshold = fields.Float()


class RuleBodySchema(Schema):
    """The body of POST (all that is required) and PATCH (any field) /alerts, for the OpenAPI
    document; shared/alertrules.parse validates it, naming every bad field."""

    name = fields.String(metadata={"maxLength": alertrules.NAME_MAX})
    kind = fields.String(validate=validate.OneOf(alertrules.KINDS))
    table = fields.String(validate=validate.OneOf(alertrules.THRESHOLD_TABLES))
    column = fields.String()
    scope = fields.Dict(metadata={"description": '{"device": name}, {"location": id} or '
                                                 '{"organisation": true}'})
    condition = fields.Nested(ConditionSchema)
    for_ = fields.Integer(data_key="for", metadata={"minimum": 0})
    clear = fields.Nested(ConditionSchema, allow_none=True)
    clear_for = fields.Integer(metadata={"minimum": 0})
    units = fields.Dict(keys=fields.String(), values=fields.String())
    channels = fields.List(fields.UUID(), allow_none=True)
    active = fields.Boolean()


_BODY = {"required": True, "content": {"application/json": {"schema": RuleBodySchema}}}


def _record(rule: Rule, created: Any, updated: Any) -> dict[str, Any]:
    return alertrules.record(rule) | {"created_at": stamp(created), "updated_at": stamp(updated)}


def _fetch(conn: psycopg.Connection, org: UUID, rid: UUID) -> tuple[Rule, Any, Any]:
    found = alertstore.fetch(conn, org, rid)
    if found is None:
        raise ids.unknown("alert rule", rid)
    return found


def _query_units() -> dict[str, str]:
    """Unit parameters on the query string (as on /data); an unknown code is a 400."""
    found = {}
    for param in units.UNIT_PARAMS:
        raw = request.args.get(param)
        if raw:
            found[param] = units.parse_unit(param, raw).code
    return found


@blp.route("", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("notifications:read")
def list_rules(limit: int, page: int) -> Any:
    """The organisation's alert rules in the paged envelope, oldest first."""
    org = current_principal().org_id
    with pool().connection() as conn:
        row = conn.execute("SELECT count(*) FROM alert_rules WHERE org_id = %s",
                           (org,)).fetchone()
        total = row[0] if row else 0
        pages = check_page(total, limit, page)
        rows = conn.execute(f"SELECT {alertstore.COLUMNS}{alertstore.FROM} WHERE r.org_id = %s"
                            " ORDER BY r.created_at, r.id LIMIT %s OFFSET %s",
                            (org, limit, offset(limit, page))).fetchall()
    return envelope([_record(*alertstore.rule_of(r)) for r in rows], total=total, limit=limit,
                    page=page, pages=pages)


@blp.route("", methods=["POST"])
@blp.doc(requestBody=_BODY)
@blp.response(201)
@requires("notifications:write")
def create_rule() -> Any:
    """Create a rule; thresholds in the body's `units` (or the query's unit parameters). An
    organisation has at most SDS_ALERT_MAX_RULES rules (409)."""
    org = current_principal().org_id
    body = request_body(form=False)
    rule = alertrules.parse(body, query_units=_query_units())
    with pool().connection() as conn, conn.transaction():
        alertstore.check_cap(conn, org, current_app.extensions["settings"].alert_max_rules)
        created = _fetch(conn, org, alertstore.create(conn, org, rule))
        record = _record(*created)
        audit.record(conn, org=org, actor=audit_actor(conn), action="alert_rule.create",
                     target_type="alert_rule", target_id=record["id"],
                     details={"name": record["name"], "rule": body})
    return record


@blp.route("/<objid('alert rule'):rule_id>", methods=["GET"])
@blp.response(200)
@requires("notifications:read")
def get_rule(rule_id: UUID) -> Any:
    """One rule, with its current state per device."""
    org = current_principal().org_id
    rid = rule_id
    with pool().connection() as conn:
        rule, created, updated = _fetch(conn, org, rid)
        states = conn.execute(
            "SELECT device, status, since, value, at FROM alert_states"
            " WHERE org_id = %s AND rule_id = %s ORDER BY device", (org, rid)).fetchall()
    return _record(rule, created, updated) | {"states": [
        {"device": d, "state": s, "since": stamp(since),
         "value": alertrules.shown(rule, v) if v is not None else None, "at": stamp(at)}
        for d, s, since, v, at in states]}


@blp.route("/<objid('alert rule'):rule_id>", methods=["PATCH"])
@blp.doc(requestBody=_BODY)
@blp.response(200)
@requires("notifications:write")
def change_rule(rule_id: UUID) -> Any:
    """Change fields of a rule; a changed condition starts its states again from ok."""
    org = current_principal().org_id
    rid = rule_id
    body = request_body(form=False)
    with pool().connection() as conn, conn.transaction():
        base, _created, _updated = _fetch(conn, org, rid)
        rule = alertrules.parse(body, base=base, query_units=_query_units())
        alertstore.update(conn, org, base, rule)
        changed = _fetch(conn, org, rid)
        audit.record(conn, org=org, actor=audit_actor(conn), action="alert_rule.update",
                     target_type="alert_rule", target_id=rid, details={"changes": body})
    return _record(*changed)


@blp.route("/<objid('alert rule'):rule_id>", methods=["DELETE"])
@blp.response(204)
@requires("notifications:write")
def delete_rule(rule_id: UUID) -> Any:
    """Delete a rule; its events stay in the history (their body names the rule)."""
    org = current_principal().org_id
    rid = rule_id
    with pool().connection() as conn, conn.transaction():
        if not alertstore.delete(conn, org, rid):
            raise ids.unknown("alert rule", rid)
        audit.record(conn, org=org, actor=audit_actor(conn), action="alert_rule.delete",
                     target_type="alert_rule", target_id=rid)
    return ""
