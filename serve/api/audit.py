"""`GET /api/v2/audit`: the organisation's audit log (shared/audit.py), for its administrators.

Newest first in the paged envelope, filtered by `action` (exact, or a prefix ending in a dot:
`location.`), `target_type`, `target_id` and a `since`/`until` window. Administrators only;
an API key needs `orgs:read` (the spec's "read org info") and an administrator as its owner.
"""

from __future__ import annotations

from typing import Any

from marshmallow import fields
from psycopg import sql
from psycopg.rows import dict_row

from people import keypolicy
from serve.auth import current_principal, requires
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import stamp
from shared.errors import BadParameter, Forbidden
from shared.timeutil import parse_instant

blp = Blueprint("audit", __name__, url_prefix="/api/v2/audit",
                description="Who changed what in the organisation, when and from where.")


class AuditArgsSchema(PageArgsSchema):
    """Paging plus the filters."""

    action = fields.String(metadata={"description": "e.g. location.update, or a prefix: apikey."})
    target_type = fields.String(metadata={"description": "apikey, location, user, org, ..."})
    target_id = fields.String()
    since = fields.String(metadata={"description": "ISO 8601; entries at or after it"})
    until = fields.String(metadata={"description": "ISO 8601; entries before it"})


def _filters(args: dict[str, Any]) -> tuple[sql.Composable, list[Any]]:
    """The WHERE clause (after the organisation) and its parameters."""
    clauses: list[sql.Composable] = []
    params: list[Any] = []
    action = args.get("action")
    if action:
        if len(action) > 100:
            raise BadParameter("action: at most 100 characters")
        if action.endswith("."):
            clauses.append(sql.SQL("starts_with(action, %s)"))
        else:
            clauses.append(sql.SQL("action = %s"))
        params.append(action)
    for name in ("target_type", "target_id"):
        if args.get(name):
            clauses.append(sql.SQL("{} = %s").format(sql.Identifier(name)))
            params.append(args[name][:200])
    if args.get("since"):
        clauses.append(sql.SQL("at >= %s"))
        params.append(parse_instant(args["since"], name="since"))
    if args.get("until"):
        clauses.append(sql.SQL("at < %s"))
        params.append(parse_instant(args["until"], name="until"))
    where = sql.SQL("").join(sql.SQL(" AND ") + c for c in clauses)
    return where, params


def entry_record(row: dict[str, Any]) -> dict[str, Any]:
    """One served audit entry."""
    return {
        "id": row["id"],
        "at": stamp(row["at"]),
        "actor": {"label": row["actor"], "user_id": _text(row["actor_user"]),
                  "key_id": _text(row["actor_key"]), "via": row["via"],
                  "address": row["address"]},
        "action": row["action"],
        "target": {"type": row["target_type"], "id": row["target_id"]},
        "details": row["details"],
    }


def _text(value: object | None) -> str | None:
    return None if value is None else str(value)


@blp.route("", methods=["GET"])
@blp.arguments(AuditArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("orgs:read")
def list_entries(limit: int, page: int, **filters: Any) -> Any:
    """The organisation's audit entries, newest first (administrators only: 403 otherwise)."""
    principal = current_principal()
    where, params = _filters(filters)
    with pool().connection() as conn:
        if not keypolicy.is_admin(conn, principal):
            raise Forbidden("the audit log is for administrators of the organisation")
        base = sql.SQL("FROM audit_log WHERE org_id = %s") + where
        row = conn.execute(sql.SQL("SELECT count(*) ") + base,
                           [principal.org_id, *params]).fetchone()
        total = int(row[0]) if row else 0
        pages = check_page(total, limit, page)
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                sql.SQL("SELECT * ") + base + sql.SQL(" ORDER BY at DESC, id DESC"
                                                      " LIMIT %s OFFSET %s"),
                [principal.org_id, *params, limit, offset(limit, page)]).fetchall()
    return envelope([entry_record(r) for r in rows], total=total, limit=limit, page=page,
                    pages=pages)
