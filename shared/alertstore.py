"""Alert rules in the database: the one insert, update and read of `alert_rules`, shared by
the API (serve/api/alerts.py), the operator CLI (`sds alert`) and the demo. Each change sends
NOTIFY `sds_alert_rules` (delivered at commit) so the evaluator reads the rules again at once.
The caller owns the transaction."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from shared.alertrules import Rule
from shared.errors import BadRequest, Conflict
from shared.locks import lock_key

COLUMNS = """
r.id, r.org_id, r.name, r.kind, r.source, r.column_name, d.name AS device, r.location_id,
r.op, r.threshold, r.clear_op, r.clear_threshold, r.for_seconds, r.clear_for_seconds,
r.units, r.channels, r.active, r.created_at, r.updated_at, r.repeat_interval_s
"""
FROM = " FROM alert_rules r LEFT JOIN devices d ON d.id = r.device_id "


def rule_of(row: tuple[Any, ...]) -> tuple[Rule, Any, Any]:
    """(Rule, created_at, updated_at) of a row selected with COLUMNS."""
    (rid, org, name, kind, source, column, device, location, op, threshold, clear_op,
     clear_threshold, for_s, clear_for_s, chosen, channels, active, created, updated,
     repeat) = row
    rule = Rule(name=name, kind=kind, source=source, column=column, op=op, threshold=threshold,
                clear_op=clear_op, clear_threshold=clear_threshold, for_seconds=for_s,
                clear_for_seconds=clear_for_s, device=device, location_id=location,
                units=dict(chosen or {}),
                channels=tuple(channels) if channels is not None else None, active=active,
                repeat_interval=repeat, id=rid, org_id=org)
    return rule, created, updated


def fetch(conn: psycopg.Connection, org: UUID | None, rid: UUID) -> tuple[Rule, Any, Any] | None:
    """One rule of `org` (None: of any organisation, for the operator)."""
    row = conn.execute(f"SELECT {COLUMNS}{FROM} WHERE r.id = %s"
                       " AND (%s::uuid IS NULL OR r.org_id = %s)", (rid, org, org)).fetchone()
    return rule_of(row) if row else None


def scope_ids(conn: psycopg.Connection, org: UUID, rule: Rule) -> tuple[UUID | None,
                                                                          UUID | None]:
    """(device id, location id) of the rule's scope in `org`; a 400 naming `scope` when it
    names nothing of that organisation's (another's device is the same as a missing one)."""
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


def _values(conn: psycopg.Connection, org: UUID, rule: Rule) -> dict[str, Any]:
    device_id, location_id = scope_ids(conn, org, rule)
    return {"org": org, "name": rule.name, "kind": rule.kind, "source": rule.source,
            "column": rule.column, "device": device_id, "location": location_id, "op": rule.op,
            "threshold": rule.threshold, "clear_op": rule.clear_op,
            "clear_threshold": rule.clear_threshold, "for_s": rule.for_seconds,
            "clear_for_s": rule.clear_for_seconds, "units": Jsonb(rule.units),
            "channels": list(rule.channels) if rule.channels is not None else None,
            "active": rule.active, "repeat": rule.repeat_interval}


def announce(conn: psycopg.Connection) -> None:
    """Tell the evaluator the rules changed (at the caller's commit)."""
    conn.execute("SELECT pg_notify('sds_alert_rules', '')")


def check_cap(conn: psycopg.Connection, org: UUID, cap: int) -> None:
    """Conflict when `org` already has `cap` rules (0: no cap). Locks the count until the
    transaction ends, so the rule created in it is counted by the next request.

    Every rule costs the evaluator work on each reading of its scope; a member created 600
    organisation-wide rules in 4.6 s before this cap (issue 30 item 6.4)."""
    if cap <= 0:
        return
    # The shared.locks key scheme; a transaction lock: it ends with the transaction.
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(f"alert_rules:{org}"),))
    row = conn.execute("SELECT count(*) FROM alert_rules WHERE org_id = %s", (org,)).fetchone()
    if row is not None and int(row[0]) >= cap:
        raise Conflict(f"the organisation has {row[0]} alert rules, the most one organisation "
                       f"may have ({cap}, SDS_ALERT_MAX_RULES); delete rules it no longer "
                       "uses (DELETE /api/v2/alerts/{id}) to make room",
                       errors={"rules": [f"at most {cap} per organisation"]})


def create(conn: psycopg.Connection, org: UUID, rule: Rule) -> UUID:
    """Insert `rule` into `org`; its id."""
    row = conn.execute(
        "INSERT INTO alert_rules (org_id, name, kind, source, column_name, device_id,"
        " location_id, op, threshold, clear_op, clear_threshold, for_seconds,"
        " clear_for_seconds, units, channels, active, repeat_interval_s) VALUES (%(org)s,"
        " %(name)s, %(kind)s, %(source)s, %(column)s, %(device)s, %(location)s, %(op)s,"
        " %(threshold)s, %(clear_op)s, %(clear_threshold)s, %(for_s)s, %(clear_for_s)s,"
        " %(units)s, %(channels)s, %(active)s, %(repeat)s) RETURNING id",
        _values(conn, org, rule)).fetchone()
    assert row is not None
    announce(conn)
    rid: UUID = row[0]
    return rid


def condition_of(rule: Rule) -> tuple[Any, ...]:
    """What decides a rule's states: a change of it starts them again from ok."""
    return (rule.kind, rule.source, rule.column, rule.device, rule.location_id, rule.op,
            rule.threshold, rule.clear_op, rule.clear_threshold, rule.for_seconds,
            rule.clear_for_seconds)


def update(conn: psycopg.Connection, org: UUID, base: Rule, rule: Rule) -> None:
    """Replace rule `base` (of `org`) by `rule`; a changed condition drops its states."""
    conn.execute(
        "UPDATE alert_rules SET name = %(name)s, kind = %(kind)s, source = %(source)s,"
        " column_name = %(column)s, device_id = %(device)s, location_id = %(location)s,"
        " op = %(op)s, threshold = %(threshold)s, clear_op = %(clear_op)s,"
        " clear_threshold = %(clear_threshold)s, for_seconds = %(for_s)s,"
        " clear_for_seconds = %(clear_for_s)s, units = %(units)s, channels = %(channels)s,"
        " active = %(active)s, repeat_interval_s = %(repeat)s, updated_at = now()"
        " WHERE org_id = %(org)s AND id = %(id)s",
        _values(conn, org, rule) | {"id": base.id})
    if condition_of(rule) != condition_of(base):
        conn.execute("DELETE FROM alert_states WHERE org_id = %s AND rule_id = %s",
                     (org, base.id))
    announce(conn)


def delete(conn: psycopg.Connection, org: UUID | None, rid: UUID) -> bool:
    """Delete a rule (of `org`; None: any, for the operator); False when there is none."""
    gone = conn.execute("DELETE FROM alert_rules WHERE id = %s"
                        " AND (%s::uuid IS NULL OR org_id = %s)", (rid, org, org)).rowcount
    if gone:
        announce(conn)
    return bool(gone)
