"""`/api/v2/orgs`: the caller's organisations and their members (issue 23).

- `GET /orgs` (the caller's organisations, paged, with their role in each), `GET /orgs/{id}`
  (any of them), `GET /orgs/{id}/users` (members of the request's organisation: any member
  may see who else is in it) need `orgs:read`.
- `PATCH /orgs/{id}` (rename), `POST /orgs/{id}/users` (invite an existing user of the
  instance by email: they join when they accept it signed in, docs/auth.md),
  `PUT /orgs/{id}/users/{user_id}` (role, teams_only) and
  `DELETE /orgs/{id}/users/{user_id}` (remove: their tokens and keys for the organisation stop
  at once) are for the organisation's owners and administrators (`orgs:write`, which the
  role table gives them only: people.roles.ROLE_SCOPES); only an owner makes, unmakes
  or removes an owner (people/members.py).
A request acts in one organisation (docs/auth.md "Which organisation a request acts in"):
changes are made there; another of the caller's organisations is 403 saying how to act in it,
one they do not belong to is the same 404 as a missing one. Every change is in the audit log.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from flask import current_app
from marshmallow import Schema, fields
from marshmallow.validate import Length, OneOf
from psycopg import errors as pgerr

from people import keypolicy, links, members, roles
from people.principal import Principal
from serve import ids
from serve.auth import audit_actor, authenticator, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from shared import audit
from shared.errors import DuplicateName, Forbidden, UnknownObject

blp = Blueprint("orgs", __name__, url_prefix="/api/v2/orgs",
                description="The caller's organisations and their members.")


class OrgUpdateSchema(Schema):
    """Body of PATCH /orgs/{id}."""

    name = fields.String(required=True, validate=Length(min=1, max=200))


class RoleSchema(Schema):
    """Body of PUT /orgs/{id}/users/{user_id}."""

    role = fields.String(required=True, validate=OneOf(roles.ROLES))
    teams_only = fields.Boolean(load_default=None, metadata={
        "description": "sees only their teams' devices and locations (member, viewer only)"})


class AddMemberSchema(RoleSchema):
    """Body of POST /orgs/{id}/users: an existing user of the service, by email."""

    email = fields.String(required=True, validate=Length(min=3, max=320))


def _own_org(org_id: UUID, principal: Principal) -> UUID:
    """The request's organisation named in the path. Another of the caller's organisations is
    403 (the request acts in one: a token bound to the other is needed); any other is the
    same 404 as a missing one."""
    if org_id == principal.org_id:
        return principal.org_id
    with pool().connection() as conn:
        mine = {o["id"] for o in members.my_orgs(conn)}
    if org_id in mine:
        raise Forbidden(f"this request acts in organisation {principal.org_id}; to act in "
                        f"{org_id} use a token for it (POST /api/v2/auth/token with "
                        "\"org\") or one of its API keys")
    raise ids.unknown("organisation", org_id)


def _admin(conn: Any, principal: Principal, what: str) -> None:
    if not keypolicy.is_admin(conn, principal):
        raise Forbidden(f"{what} is for administrators of the organisation")




@blp.route("", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("orgs:read")
def list_orgs(limit: int, page: int) -> Any:
    """The caller's organisations by name, each with the caller's role in it."""
    with pool().connection() as conn:
        items = [members.org_record(o, role=o["role"], members=o["members"],
                                    teams_only=o["teams_only"]) for o in members.my_orgs(conn)]
    pages = check_page(len(items), limit, page)
    return envelope(items[offset(limit, page):offset(limit, page) + limit], total=len(items),
                    limit=limit, page=page, pages=pages)


@blp.route("/<objid('organisation'):org_id>", methods=["GET"])
@blp.response(200)
@requires("orgs:read")
def get_org(org_id: UUID) -> Any:
    """One organisation of the caller's, with their role and the number of active members."""
    with pool().connection() as conn:
        for o in members.my_orgs(conn):
            if o["id"] == org_id:
                return members.org_record(o, role=o["role"], members=o["members"],
                                          teams_only=o["teams_only"])
    raise ids.unknown("organisation", org_id)


@blp.route("/<objid('organisation'):org_id>", methods=["PATCH"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": OrgUpdateSchema}}})
@blp.response(200)
@requires("orgs:write")
def update_org(org_id: UUID) -> Any:
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
    return members.org_record(row, role=principal.role, members=count)


@blp.route("/<objid('organisation'):org_id>/users", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("orgs:read")
def list_members(org_id: UUID, limit: int, page: int) -> Any:
    """The organisation's active members by email: id, email, name, role (no preferences)."""
    principal = current_principal()
    org = _own_org(org_id, principal)
    with pool().connection() as conn:
        rows, total = members.user_page(conn, org, limit, offset(limit, page), active_only=True)
    pages = check_page(total, limit, page)
    return envelope([members.user_record(r, full=False) for r in rows], total=total,
                    limit=limit, page=page, pages=pages)


@blp.route("/<objid('organisation'):org_id>/users", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": AddMemberSchema}}})
@blp.response(202)
@requires("orgs:write")
def add_member(org_id: UUID) -> Any:
    """Invite an existing user of the service (by email) into the organisation with a role:
    202 with the pending invitation, which the user accepts signed in (owners and
    administrators; an owner only by an owner; 404 for an unknown email, 409 for a member
    already). New people are invited with the invitations' paths."""
    principal = current_principal()
    body = load(AddMemberSchema(), request_body(form=False))
    with pool().connection() as conn:
        _admin(conn, principal, "adding a member")
        org = _own_org(org_id, principal)
        roles.check_owner_rule(by_owner=principal.owns, roles=(body["role"],),
                               action="makes an owner")
        # The API role sees only this organisation's people: the lookup by exact email goes
        # through the same narrow function the sign-in uses (migration 0052, 0150).
        found = conn.execute("SELECT id FROM sds_member_lookup(%s)", (body["email"],)).fetchone()
        if found is None:
            raise UnknownObject("no user of this service has that email; invite them instead")
        # Never joined by the organisation alone (issue 30): a pending invitation that the
        # account accepts signed in (POST /users/me/invitations/{id}/accept).
        issued = links.invite(conn, authenticator(current_app).settings, org=org,
                              email=body["email"], role=body["role"],
                              teams_only=bool(body["teams_only"]), actor=audit_actor(conn),
                              by_owner=principal.owns)
        record = links.invite_record(links.fetch_invite(conn, org, issued.id))
    return {**record, "pending": True}, 202


@blp.route("/<objid('organisation'):org_id>/users/<objid('user'):user_id>", methods=["PUT"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": RoleSchema}}})
@blp.response(200)
@requires("orgs:write")
def change_role(org_id: UUID, user_id: UUID) -> Any:
    """Give a member a role and teams_only (owners and administrators; making or unmaking an
    owner is for owners: 403; 409 for the last owner or administrator)."""
    principal = current_principal()
    body = load(RoleSchema(), request_body(form=False))
    with pool().connection() as conn:
        _admin(conn, principal, "changing a member's role")
        org = _own_org(org_id, principal)
        asked = user_id
        before = members.fetch_user(conn, asked, org)
        row = members.set_role(conn, org=org, user=asked, role=body["role"],
                               teams_only=body["teams_only"],
                               by_owner=principal.owns)
        if (before["role"], before["teams_only"]) != (row["role"], row["teams_only"]):
            audit.record(conn, org=org, actor=audit_actor(conn), action="member.role",
                         target_type="user", target_id=asked,
                         details={"email": row["email"], "from": before["role"],
                                  "to": row["role"], "teams_only": row["teams_only"]})
    return members.user_record(row, full=False)


@blp.route("/<objid('organisation'):org_id>/users/<objid('user'):user_id>", methods=["DELETE"])
@blp.response(204)
@requires("orgs:write")
def remove_member(org_id: UUID, user_id: UUID) -> Any:
    """Remove a member: the membership ends and every token and key of theirs for this
    organisation stops working at once; an account with no membership left is deactivated
    (owners and administrators; an owner only by an owner; 409 for the last one)."""
    principal = current_principal()
    with pool().connection() as conn:
        _admin(conn, principal, "removing a member")
        org = _own_org(org_id, principal)
        asked = user_id
        before = members.fetch_user(conn, asked, org)
        done = members.remove_member(conn, org=org, user=asked,
                                     by_owner=principal.owns)
        audit.record(conn, org=org, actor=audit_actor(conn), action="member.remove",
                     target_type="user", target_id=asked,
                     details={"email": before["email"], "role": before["role"], **done})
    return None
