"""The audit log (issue 23): who changed what in an organisation, when, and from where.

Every change an organisation's people make through the API or an operator makes with `sds`
(API keys, locations, users, organisations; memberships, roles, teams and alert rules as they
arrive) is written with `record` in the transaction that makes the change, so a change that
rolls back leaves no entry and an entry never describes a change that did not happen. The log
is append-only for the API role (migration 0141); the scheduler deletes entries older than
SDS_AUDIT_RETENTION_DAYS (`purge`). Administrators read it at GET /api/v2/audit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

MAX_DETAIL_TEXT = 500
"""Longest string kept in an entry's details (a note or a name is cut, with an ellipsis)."""


@dataclass(frozen=True)
class Actor:
    """Who made a change: the user and key, a label that stays readable after the user is
    gone (their email, or "operator"), how they authenticated, and their address."""

    label: str
    via: str  # 'basic' | 'bearer' | 'apikey' | 'session' | 'cli'
    user_id: UUID | None = None
    key_id: UUID | None = None
    address: str | None = None


OPERATOR = Actor(label="operator", via="cli")
"""The actor of an `sds` command (run on the server by whoever can reach its database)."""


def _bounded(value: Any) -> Any:
    """`value` with long strings cut, so an entry stays small whatever a caller sent."""
    if isinstance(value, str) and len(value) > MAX_DETAIL_TEXT:
        return value[:MAX_DETAIL_TEXT] + "…"
    if isinstance(value, dict):
        return {str(k): _bounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_bounded(v) for v in value[:100]]
    if isinstance(value, UUID):
        return str(value)
    return value if value is None or isinstance(value, bool | int | float) else str(value)


def record(conn: psycopg.Connection, *, org: UUID, actor: Actor, action: str,
           target_type: str, target_id: object | None = None,
           details: dict[str, Any] | None = None) -> None:
    """Append one entry (`action` like "location.update"); the caller owns the transaction."""
    conn.execute(
        "INSERT INTO audit_log (org_id, actor_user, actor_key, actor, via, address, action,"
        " target_type, target_id, details) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (org, actor.user_id, actor.key_id, actor.label[:320], actor.via,
         None if actor.address is None else actor.address[:64], action, target_type,
         None if target_id is None else str(target_id)[:200],
         Jsonb(_bounded(details or {}))))


def purge(conn: psycopg.Connection, days: int) -> int:
    """Delete entries older than `days` (0: keep everything); returns the count."""
    if days <= 0:
        return 0
    cur = conn.execute("DELETE FROM audit_log WHERE at < now() - make_interval(days => %s)",
                       (days,))
    return cur.rowcount
