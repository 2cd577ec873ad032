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
from flask import request
from psycopg.types.json import Jsonb

from serve.auth import current_principal, requires
from serve.body import request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import stamp
from shared import alertrules, units
from shared.alertrules import Rule
from shared.errors import BadRequest, UnknownObject

blp = Blueprint("alerts", __name__, url_prefix="/api/v2/alerts",
                description="Alert rules of the caller's organisation (docs/alerts.md).")

_COLUMNS = """
r.id, r.org_id, r.name, r.kind, r.source, r.column_name, d.name AS device, r.location_id,
r.op, r.threshold, r.clear_op, r.clear_threshold, r.for_seconds, r.clear_for_seconds,
r.units, r.channels, r.active, r.created_at, r.updated_at
"""
_FROM = " FROM alert_rules r LEFT JOIN devices d ON d.id = r.device_id "


def rule_of(row: tuple[Any, ...]) -> tuple[Rule, dict[str, Any]]:
    """The Rule of a row selected with _COLUMNS, and its times."""
    (rid, org, name, kind, source, column, device, location, op, threshold, clear_op,
     clear_threshold, for_s, clear_for_s, chosen, channels, active, created, updated) = row
    rule = Rule(name=name, kind=kind, source=source, column=column, op=op, threshold=threshold,
                clear_op=clear_op, clear_threshold=clear_threshold, for_seconds=for_s,
                clear_for_seconds=clear_for_s, device=device, location_id=location,
                units=dict(chosen or {}),
                channels=tuple(channels) if channels is not None else None, active=active,
                id=rid, org_id=org)
    return rule, {"created_at": stamp(created), "updated_at": stamp(updated)}


def _record(rule: Rule, times: dict[str, Any]) -> dict[str, Any]:
    return alertrules.record(rule) | times


def _rule_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError:
        raise UnknownObject(f"unknown alert rule {raw!r}") from None  # ids do not leak


def _fetch(conn: psycopg.Connection, org: UUID, rid: UUID) -> tuple[Rule, dict[str, Any]]:
    row = conn.execute(f"SELECT {_COLUMNS}{_FROM} WHERE r.org_id = %s AND r.id = %s",
                       (org, rid)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown alert rule {rid}")
    return rule_of(row)


def _query_units() -> dict[str, str]:
    """Unit parameters on the query string (as on /data); an unknown code is a 400."""
    found = {}
    for param in units.UNIT_PARAMS:
        raw = request.args.get(param)
        if raw:
            found[param] = units.parse_unit(param, raw).code
    return found


def _scope_ids(conn: psycopg.Connection, org: UUID, rule: Rule) -> tuple[UUID | None,
                                                                            UUID | None]:
    """(device id, location id) of the rule's scope in the caller's organisation; a 400
    naming `scope` when it names nothing of theirs."""
    if rule.device is not None:
        row = conn.execute("SELECT id FROM devices WHERE org_id = %s AND name = %s",
                           (org, rule.device)).fetchone()
        if row is None:
            raise BadRequest(f"invalid rule: scope: unknown device {rule.device!r}",
                             errors={"json": {"scope": [f"unknown device {rule.device!r}"]}})
        return row[0], None
    if rule.location_id is not None:
        row = conn.execute("SELECT id FROM locations WHERE org_id = %s AND id = %s",
                           (org, rule.location_id)).fetchone()
        if row is None:
            raise BadRequest("invalid rule: scope: unknown location",
                             errors={"json": {"scope": [f"unknown location {rule.location_id}"]}})
        return None, row[0]
    return None, None


def _values(rule: Rule, org: UUID, device_id: UUID | None, location_id: UUID | None
            ) -> dict[str, Any]:
    return {"org": org, "name": rule.name, "kind": rule.kind, "source": rule.source,
            "column": rule.column, "device": device_id, "location": location_id, "op": rule.op,
            "threshold": rule.threshold, "clear_op": rule.clear_op,
            "clear_threshold": rule.clear_threshold, "for_s": rule.for_seconds,
            "clear_for_s": rule.clear_for_seconds, "units": Jsonb(rule.units),
            "channels": list(rule.channels) if rule.channels is not None else None,
            "active": rule.active}


def _announce(conn: psycopg.Connection) -> None:
    conn.execute("SELECT pg_notify('sds_alert_rules', '')")


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
        rows = conn.execute(f"SELECT {_COLUMNS}{_FROM} WHERE r.org_id = %s"
                            " ORDER BY r.created_at, r.id LIMIT %s OFFSET %s",
                            (org, limit, offset(limit, page))).fetchall()
    return envelope([_record(*rule_of(r)) for r in rows], total=total, limit=limit, page=page,
                    pages=pages)


@blp.route("", methods=["POST"])
@blp.response(201)
@requires("notifications:write")
def create_rule() -> Any:
    """Create a rule; thresholds in the body's `units` (or the query's unit parameters)."""
    org = current_principal().org_id
    rule = alertrules.parse(request_body(form=False), query_units=_query_units())
    with pool().connection() as conn, conn.transaction():
        device_id, location_id = _scope_ids(conn, org, rule)
        row = conn.execute(
            "INSERT INTO alert_rules (org_id, name, kind, source, column_name, device_id,"
            " location_id, op, threshold, clear_op, clear_threshold, for_seconds,"
            " clear_for_seconds, units, channels, active) VALUES (%(org)s, %(name)s, %(kind)s,"
            " %(source)s, %(column)s, %(device)s, %(location)s, %(op)s, %(threshold)s,"
            " %(clear_op)s, %(clear_threshold)s, %(for_s)s, %(clear_for_s)s, %(units)s,"
            " %(channels)s, %(active)s) RETURNING id",
            _values(rule, org, device_id, location_id)).fetchone()
        assert row is not None
        _announce(conn)
        created = _fetch(conn, org, row[0])
    return _record(*created)


@blp.route("/<rule_id>", methods=["GET"])
@blp.response(200)
@requires("notifications:read")
def get_rule(rule_id: str) -> Any:
    """One rule, with its current state per device."""
    org = current_principal().org_id
    rid = _rule_id(rule_id)
    with pool().connection() as conn:
        rule, times = _fetch(conn, org, rid)
        states = conn.execute(
            "SELECT device, status, since, value, at FROM alert_states"
            " WHERE org_id = %s AND rule_id = %s ORDER BY device", (org, rid)).fetchall()
    return _record(rule, times) | {"states": [
        {"device": d, "state": s, "since": stamp(since),
         "value": alertrules.shown(rule, v) if v is not None else None, "at": stamp(at)}
        for d, s, since, v, at in states]}


@blp.route("/<rule_id>", methods=["PATCH"])
@blp.response(200)
@requires("notifications:write")
def change_rule(rule_id: str) -> Any:
    """Change fields of a rule; a changed condition starts its states again from ok."""
    org = current_principal().org_id
    rid = _rule_id(rule_id)
    body = request_body(form=False)
    with pool().connection() as conn, conn.transaction():
        base, _times = _fetch(conn, org, rid)
        rule = alertrules.parse(body, base=base, query_units=_query_units())
        device_id, location_id = _scope_ids(conn, org, rule)
        conn.execute(
            "UPDATE alert_rules SET name = %(name)s, kind = %(kind)s, source = %(source)s,"
            " column_name = %(column)s, device_id = %(device)s, location_id = %(location)s,"
            " op = %(op)s, threshold = %(threshold)s, clear_op = %(clear_op)s,"
            " clear_threshold = %(clear_threshold)s, for_seconds = %(for_s)s,"
            " clear_for_seconds = %(clear_for_s)s, units = %(units)s, channels = %(channels)s,"
            " active = %(active)s, updated_at = now() WHERE org_id = %(org)s AND id = %(id)s",
            _values(rule, org, device_id, location_id) | {"id": rid})
        if _condition_of(rule) != _condition_of(base):
            conn.execute("DELETE FROM alert_states WHERE org_id = %s AND rule_id = %s",
                         (org, rid))
        _announce(conn)
        changed = _fetch(conn, org, rid)
    return _record(*changed)


def _condition_of(rule: Rule) -> tuple[Any, ...]:
    return (rule.kind, rule.source, rule.column, rule.device, rule.location_id, rule.op,
            rule.threshold, rule.clear_op, rule.clear_threshold, rule.for_seconds,
            rule.clear_for_seconds)


@blp.route("/<rule_id>", methods=["DELETE"])
@blp.response(204)
@requires("notifications:write")
def delete_rule(rule_id: str) -> Any:
    """Delete a rule; its events stay in the history (their body names the rule)."""
    org = current_principal().org_id
    rid = _rule_id(rule_id)
    with pool().connection() as conn, conn.transaction():
        gone = conn.execute("DELETE FROM alert_rules WHERE org_id = %s AND id = %s",
                            (org, rid)).rowcount
        if not gone:
            raise UnknownObject(f"unknown alert rule {rid}")
        _announce(conn)
    return ""
