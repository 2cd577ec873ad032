"""`/api/v2/orgs`: the caller's organisation and its members (issue 23).

- `GET /orgs` (the caller's organisations, paged), `GET /orgs/{id}`, `GET /orgs/{id}/users`
  (members: any member may see who else is in the organisation) need `orgs:read` for a key.
- `PATCH /orgs/{id}` (rename), `PUT /orgs/{id}/users/{user_id}` (change a member's role) and
  `DELETE /orgs/{id}/users/{user_id}` (remove a member: their tokens and keys stop at once)
  are for the organisation's administrators; a key needs `orgs:write`, which only an
  administrator can hold (serve/keypolicy.py).
Another organisation is the same 404 as a missing one (after the administrator check, so a
member learns nothing either way). Every change is in the audit log.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from marshmallow import Schema, fields
from marshmallow.validate import Length, OneOf
from psycopg import errors as pgerr

from serve import keypolicy, members
from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.principal import Principal
from shared import audit
from shared.errors import DuplicateName, Forbidden, UnknownObject

blp = Blueprint("orgs", __name__, url_prefix="/api/v2/orgs",
                description="The caller's organisation and its members.")


class OrgUpdateSchema(Schema):
    """Body of PATCH /orgs/{id}."""

    name = fields.String(required=True, validate=Length(min=1, max=200))


class RoleSchema(Schema):
    """Body of PUT /orgs/{id}/users/{user_id}."""

    role = fields.String(required=True, validate=OneOf(members.ROLES))


def _own_org(org_id: str, principal: Principal) -> UUID:
    """The caller's organisation named in the path; any other is the same 404 as a missing one."""
    try:
        asked = UUID(org_id)
    except ValueError:
        asked = None
    if asked != principal.org_id:
        raise UnknownObject(f"unknown organisation {org_id!r}")
    return principal.org_id


def _admin(conn: Any, principal: Principal, what: str) -> None:
    if not keypolicy.is_admin(conn, principal):
        raise Forbidden(f"{what} is for administrators of the organisation")


def _member_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError:
        raise UnknownObject(f"unknown user {raw!r}") from None


@blp.route("", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("orgs:read")
def list_orgs(limit: int, page: int) -> Any:
    """The caller's organisations (one today), each with the caller's role in it."""
    principal = current_principal()
    with pool().connection() as conn:
        org, count = members.fetch_org(conn, principal.org_id)
        role = members.role_of(keypolicy.is_admin(conn, principal))
    items = [members.org_record(org, role=role, members=count)]
    pages = check_page(len(items), limit, page)
    return envelope(items[offset(limit, page):offset(limit, page) + limit], total=len(items),
                    limit=limit, page=page, pages=pages)


@blp.route("/<org_id>", methods=["GET"])
@blp.response(200)
@requires("orgs:read")
def get_org(org_id: str) -> Any:
    """One organisation of the caller's, with their role and the number of active members."""
    principal = current_principal()
    org = _own_org(org_id, principal)
    with pool().connection() as conn:
        row, count = members.fetch_org(conn, org)
        role = members.role_of(keypolicy.is_admin(conn, principal))
    return members.org_record(row, role=role, members=count)


@blp.route("/<org_id>", methods=["PATCH"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": OrgUpdateSchema}}})
@blp.response(200)
@requires("orgs:write")
def update_org(org_id: str) -> Any:
    """Rename the organisation (administrators; names are unique across the service: 409)."""
    principal = current_principal()
    changes = load(OrgUpdateSchema(), request_body(form=False),
                   read_only=("id", "created", "role", "members"))
    with pool().connection() as conn:
        _admin(conn, principal, "renaming the organisation")
        org = _own_org(org_id, principal)
        try:
            with conn.transaction():
                conn.execute("UPDATE organisations SET name = %s WHERE id = %s",
                             (changes["name"], org))
        except pgerr.UniqueViolation:
            raise DuplicateName("that organisation name is taken") from None
        audit.record(conn, org=org, actor=audit_actor(conn), action="org.update",
                     target_type="org", target_id=org, details=changes)
        row, count = members.fetch_org(conn, org)
    return members.org_record(row, role="admin", members=count)


@blp.route("/<org_id>/users", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("orgs:read")
def list_members(org_id: str, limit: int, page: int) -> Any:
    """The organisation's active members by email: id, email, name, role (no preferences)."""
    principal = current_principal()
    org = _own_org(org_id, principal)
    with pool().connection() as conn:
        rows, total = members.user_page(conn, org, limit, offset(limit, page), active_only=True)
    pages = check_page(total, limit, page)
    return envelope([members.user_record(r, full=False) for r in rows], total=total,
                    limit=limit, page=page, pages=pages)


@blp.route("/<org_id>/users/<user_id>", methods=["PUT"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": RoleSchema}}})
@blp.response(200)
@requires("orgs:write")
def change_role(org_id: str, user_id: str) -> Any:
    """Give a member the role `admin` or `member` (administrators; 409 for the last admin)."""
    principal = current_principal()
    role = load(RoleSchema(), request_body(form=False))["role"]
    with pool().connection() as conn:
        _admin(conn, principal, "changing a member's role")
        org = _own_org(org_id, principal)
        asked = _member_id(user_id)
        before = members.fetch_user(conn, asked, org)
        row = members.set_role(conn, org=org, user=asked, role=role)
        if members.role_of(before["is_admin"]) != role:
            audit.record(conn, org=org, actor=audit_actor(conn), action="member.role",
                         target_type="user", target_id=asked,
                         details={"email": row["email"], "from": members.role_of(
                             before["is_admin"]), "to": role})
    return members.user_record(row, full=False)


@blp.route("/<org_id>/users/<user_id>", methods=["DELETE"])
@blp.response(204)
@requires("orgs:write")
def remove_member(org_id: str, user_id: str) -> Any:
    """Remove a member: their account is deactivated and every token and key of theirs stops
    working at once (administrators; 409 for the last admin)."""
    principal = current_principal()
    with pool().connection() as conn:
        _admin(conn, principal, "removing a member")
        org = _own_org(org_id, principal)
        asked = _member_id(user_id)
        email = members.fetch_user(conn, asked, org)["email"]
        done = members.remove_member(conn, org=org, user=asked)
        audit.record(conn, org=org, actor=audit_actor(conn), action="member.remove",
                     target_type="user", target_id=asked, details={"email": email, **done})
    return None
