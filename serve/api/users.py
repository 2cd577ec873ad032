"""`/api/v2/users`: the caller (`/users/me`), and for administrators the organisation's users.

- `GET /users/me` and `PATCH /users/me` (name and preferences; never the password: that has
  its own paths, docs/auth.md) for anyone signed in; an API key needs `users:read` /
  `users:write`.
- `GET /users`, `GET /users/{id}` (owners and administrators; the caller's own record for
  anyone) and `GET /users/{id}/orgs` (the organisations a user belongs to, with their role
  in each: all of them for the caller themself; for a manager asking about a member, only the
  request's organisation: a member's other organisations are not theirs to see).
- `GET /users/me/invitations` (the caller's pending invitations into other organisations) and
  `POST /users/me/invitations/{id}/accept` (join, by the account's own consent: password or
  token, never an API key; only an account whose email is proven, docs/auth.md "Proven emails
  and joining another organisation"), and `POST /users/me/credentials/revoke` (sign out
  everywhere: every token and API key of the caller, in every organisation).
Records are of the user as a member of the request's organisation (role, teams_only there).
Records and roles come from people/members.py; preferences are checked by the dashboard's rules
(serve/preferences.py), the one home of what a preference may hold.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from flask import current_app, request
from marshmallow import Schema, fields
from marshmallow.validate import Length

from people import consent, keypolicy, logins, members
from serve import ids, preferences
from serve.auth import audit_actor, authenticator, current_principal, requires, requires_user
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from shared import audit
from shared.errors import BadRequest, Forbidden

blp = Blueprint("users", __name__, url_prefix="/api/v2/users",
                description="The caller, and the organisation's users for administrators.")

READ_ONLY = ("id", "email", "org_id", "role", "teams_only", "active", "created")


class MeUpdateSchema(Schema):
    """Body of PATCH /users/me: a display name and preferences (the dashboard's defaults)."""

    name = fields.String(allow_none=True, validate=Length(max=200))
    preferences = fields.Dict(metadata={
        "description": "units {param: code}, zone, columns {table: [names]}; docs/dashboard.md"})


@blp.route("/me", methods=["GET"])
@blp.response(200)
@requires("users:read")
def get_me() -> Any:
    """The caller's own record: id, email, name, org_id, role, active, created, preferences."""
    principal = current_principal()
    with pool().connection() as conn:
        row = members.fetch_user(conn, principal.user_id, principal.org_id)
    return members.user_record(row)


@blp.route("/me", methods=["PATCH"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": MeUpdateSchema}}})
@blp.response(200)
@requires("users:write")
def update_me() -> Any:
    """Change the caller's `name` or `preferences` (merged key by key into the stored ones).
    A `password` is refused here: it changes through the sign-in paths (400)."""
    body = request_body(form=False)
    if "password" in body:
        raise BadRequest("password: not changed through /users/me; an operator runs "
                         "`sds access passwd`, a signed-in user uses the dashboard's form",
                         errors={"json": {"password": ["not changed here"]}})
    changes = load(MeUpdateSchema(), body, read_only=READ_ONLY)
    principal = current_principal()
    with pool().connection() as conn:
        members.fetch_user(conn, principal.user_id, principal.org_id)  # 404 once removed
        if "preferences" in changes:
            preferences.write(conn, user=principal.user_id, org=principal.org_id,
                              changes=preferences.check(changes["preferences"]))
        if "name" in changes:
            conn.execute("UPDATE users SET name = %s WHERE id = %s",
                         (changes["name"], principal.user_id))
        if changes:
            audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                         action="user.update", target_type="user", target_id=principal.user_id,
                         details=changes)
        row = members.fetch_user(conn, principal.user_id, principal.org_id)
    return members.user_record(row)


@blp.route("", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("users:read")
def list_users(limit: int, page: int) -> Any:
    """The organisation's members by email, deactivated accounts included (owners and
    administrators only)."""
    principal = current_principal()
    with pool().connection() as conn:
        if not keypolicy.is_admin(conn, principal):
            raise Forbidden("listing users is for administrators of the organisation")
        rows, total = members.user_page(conn, principal.org_id, limit, offset(limit, page),
                                        active_only=False)
    pages = check_page(total, limit, page)
    return envelope([members.user_record(r) for r in rows], total=total, limit=limit,
                    page=page, pages=pages)


def _visible_user(asked: UUID) -> dict[str, Any]:
    """The user row a caller may see: their own, or any of the organisation's for an
    administrator; the same 404 otherwise (no telling whom the organisation has)."""
    principal = current_principal()
    with pool().connection() as conn:
        if asked != principal.user_id and not keypolicy.is_admin(conn, principal):
            raise ids.unknown("user", asked)
        return members.fetch_user(conn, asked, principal.org_id)


@blp.route('/<objid("user"):user_id>', methods=["GET"])
@blp.response(200)
@requires("users:read")
def get_user(user_id: UUID) -> Any:
    """One user: the caller's own record, or for an administrator any of the organisation's."""
    return members.user_record(_visible_user(user_id))


@blp.route('/<objid("user"):user_id>/orgs', methods=["GET"])
@blp.response(200)
@requires("users:read")
def user_orgs(user_id: UUID) -> Any:
    """The organisations the user belongs to, each with the user's role there (a list)."""
    row = _visible_user(user_id)
    principal = current_principal()
    with pool().connection() as conn:
        if row["id"] == principal.user_id:
            return [members.org_record(o, role=o["role"], members=o["members"],
                                       teams_only=o["teams_only"])
                    for o in members.my_orgs(conn)]
        org, count = members.fetch_org(conn, principal.org_id)
    return [members.org_record(org, role=row["role"], members=count,
                               teams_only=row["teams_only"])]


class MyAcceptSchema(Schema):
    """Body of POST /users/me/invitations/{id}/accept (optional): the invitation link's secret,
    which proves the email when the link was mailed to it."""

    token = fields.String(load_default=None, allow_none=True, validate=Length(max=200))


@blp.route("/me/invitations", methods=["GET"])
@blp.response(200)
@requires("users:read")
def my_invitations() -> Any:
    """The caller's pending invitations into organisations they are not in (a list, newest
    first): each waits for the caller's own acceptance."""
    with pool().connection() as conn:
        return [consent.my_invitation_record(r) for r in consent.my_invitations(conn)]


@blp.route('/me/invitations/<objid("invitation"):invitation_id>/accept', methods=["POST"])
@blp.doc(requestBody={"required": False,
                      "content": {"application/json": {"schema": MyAcceptSchema}}})
@blp.response(200)
@requires_user()
def accept_my_invitation(invitation_id: UUID) -> Any:
    """Join the organisation of one of the caller's pending invitations, with its role. 409
    while the account's email is not proven (the invitation stays pending); 404 for any
    invitation that is not the caller's."""
    # The body is optional: no body is no token.
    body = load(MyAcceptSchema(), request_body(form=False) if request.get_data(cache=True)
                else {})
    principal = current_principal()
    link = invitation_id
    settings = authenticator(current_app).settings
    with pool().connection() as conn:
        return consent.accept_mine(conn, settings, user=principal.user_id, link=link,
                                 secret=body["token"], actor=audit_actor(conn))


@blp.route("/me/credentials/revoke", methods=["POST"])
@blp.response(200)
@requires_user()
def revoke_my_credentials() -> Any:
    """Sign out everywhere: revoke every bearer token and deactivate every API key of the
    caller, in every organisation, in one step (this request's own token too)."""
    principal = current_principal()
    with pool().connection() as conn:
        actor = audit_actor(conn)
        ended = logins.revoke_everything(conn, user=principal.user_id)
        audit.record(conn, org=principal.org_id, actor=actor, action="user.logout_everywhere",
                     target_type="user", target_id=principal.user_id,
                     details={"tokens_revoked": ended.tokens, "keys_deactivated": ended.keys})
    return {"tokens_revoked": ended.tokens, "keys_deactivated": ended.keys}
