"""Invitations and password reset (issue 23; docs/auth.md "Invitations and password reset").

- `POST /orgs/{id}/invitations` (`email`, `role`, optional `teams_only`), `GET` (pending ones),
  `DELETE /orgs/{id}/invitations/{invitation_id}` (revoke), and `POST
  /orgs/{id}/users/{user_id}/reset-link` are for the organisation's administrators (an API key
  needs `orgs:write`, or `orgs:read` to list). The link is mailed when SMTP is configured,
  otherwise shown in the answer (`mailed: false`); a reset link made by an administrator is
  always shown to them.
- `POST /auth/accept` (`token`, `password`, optional `name` and `sign_out_everywhere`)
  and `POST /auth/password-reset` (`email`) are public: the link's secret is the
  credential, and a reset request answers the same 202 whether or not the email has an
  account.
The rules are people/links.py.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from flask import current_app
from marshmallow import Schema, fields
from marshmallow.validate import Length

from people import keypolicy, links, members
from people.principal import Principal
from serve import ids
from serve.auth import (
    audit_actor,
    authenticator,
    client_address,
    current_principal,
    public,
    requires,
)
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import stamp
from shared import mail
from shared.errors import Forbidden

blp = Blueprint("invitations", __name__, url_prefix="/api/v2",
                description="Invitations into the organisation and password reset links.")

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


class InviteSchema(Schema):
    """Body of POST /orgs/{id}/invitations."""

    email = fields.String(required=True, validate=Length(min=3, max=320))
    role = fields.String(required=True, metadata={"description": "owner, admin, member, viewer"})
    teams_only = fields.Boolean(load_default=False)


class AcceptSchema(Schema):
    """Body of POST /auth/accept: the link's secret and the new password (and a name)."""

    token = fields.String(required=True, validate=Length(min=1, max=200))
    password = fields.String(load_default=None, validate=Length(min=1, max=1024))
    name = fields.String(load_default=None, allow_none=True, validate=Length(max=200))
    sign_out_everywhere = fields.Boolean(load_default=False, metadata={
        "description": "a reset also ends every token and API key of the account, in every "
                       "organisation"})


class ResetRequestSchema(Schema):
    """Body of POST /auth/password-reset."""

    email = fields.String(required=True, validate=Length(min=1, max=320))


def _admin_of(conn: Any, principal: Principal, org_id: UUID, what: str) -> UUID:
    """The organisation named in the path, for one of its owners and administrators:
    Forbidden for anyone else first (a member learns nothing); then, as in /orgs, another of
    the caller's organisations is 403 (the request acts in one) and any other is the same 404
    as a missing one."""
    if not keypolicy.is_admin(conn, principal):
        raise Forbidden(f"{what} is for administrators of the organisation")
    if org_id == principal.org_id:
        return principal.org_id
    if org_id in {o["id"] for o in members.my_orgs(conn)}:
        raise Forbidden(f"this request acts in organisation {principal.org_id}; to act in "
                        f"{org_id} use a token for it (POST /api/v2/auth/token with \"org\")")
    raise ids.unknown("organisation", org_id)


@blp.route("/orgs/<objid('organisation'):org_id>/invitations", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": InviteSchema}}})
@blp.response(201)
@requires("orgs:write")
def create_invitation(org_id: UUID) -> Any:
    """Invite someone by email with a role: with SMTP configured the link's email is queued
    in the durable outbox (`mailed: true`; the deliverer sends and retries it), else the link
    is shown here (`link`, `mailed: false`) for the administrator to pass on."""
    principal = current_principal()
    body = load(InviteSchema(), request_body(form=False))
    settings = authenticator(current_app).settings
    mailed = mail.configured(settings)
    with pool().connection() as conn:
        org = _admin_of(conn, principal, org_id, "inviting")
        issued = links.invite(conn, settings, org=org, email=body["email"], role=body["role"],
                              teams_only=body["teams_only"], actor=audit_actor(conn),
                              by_owner=principal.owns)
        record = links.invite_record(links.fetch_invite(conn, org, issued.id))
        if mailed:  # in the link's transaction: both are kept, or neither
            links.queue_mail(conn, settings, issued, purpose="invite",
                             org_name=members.fetch_org(conn, org)[0]["name"],
                             role=record["role"], mailed_only=True)
    record["mailed"] = mailed
    if not mailed:
        record["link"] = issued.url  # not mailed: the administrator passes it on
        record["not_mailed_because"] = "email is off: SDS_SMTP_HOST is not set"
    return record, 201, NO_STORE


@blp.route("/orgs/<objid('organisation'):org_id>/invitations", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("orgs:read")
def list_invitations(org_id: UUID, limit: int, page: int) -> Any:
    """The organisation's pending invitations, newest first (never their links)."""
    principal = current_principal()
    with pool().connection() as conn:
        org = _admin_of(conn, principal, org_id, "listing invitations")
        rows, total = links.pending_invites(conn, org, limit, offset(limit, page))
    pages = check_page(total, limit, page)
    return envelope([links.invite_record(r) for r in rows], total=total, limit=limit,
                    page=page, pages=pages)


@blp.route("/orgs/<objid('organisation'):org_id>/invitations/"
           "<objid('invitation'):invitation_id>", methods=["DELETE"])
@blp.response(204)
@requires("orgs:write")
def revoke_invitation(org_id: UUID, invitation_id: UUID) -> Any:
    """Revoke a pending invitation: its link stops working at once."""
    principal = current_principal()
    with pool().connection() as conn:
        org = _admin_of(conn, principal, org_id, "revoking an invitation")
        links.revoke_invite(conn, org=org, link=invitation_id,
                            actor=audit_actor(conn))
    return None


@blp.route("/orgs/<objid('organisation'):org_id>/users/<objid('user'):user_id>/reset-link",
           methods=["POST"])
@blp.response(201)
@requires("orgs:write")
def create_reset_link(org_id: UUID, user_id: UUID) -> Any:
    """A password-reset link for a member, shown to the administrator (who passes it on)."""
    principal = current_principal()
    settings = authenticator(current_app).settings
    with pool().connection() as conn:
        org = _admin_of(conn, principal, org_id, "making a password-reset link")
        issued = links.reset_link(conn, settings, org=org, user=user_id,
                                  actor=audit_actor(conn), by_owner=principal.owns)
    return {"id": str(issued.id), "user_id": str(user_id), "link": issued.url,
            "expires": stamp(issued.expires)}, 201, NO_STORE


@blp.route("/auth/accept", methods=["POST"])
@blp.doc(security=[], requestBody={"required": True, "content": {
    "application/json": {"schema": AcceptSchema},
    "application/x-www-form-urlencoded": {"schema": AcceptSchema}}})
@blp.response(200)
@public
def accept_link() -> Any:
    """Accept an invitation or a password reset with the link's secret (`token`): sets the
    password (a new account, or a reset; `sign_out_everywhere` also ends every token and key
    of the account). An invitation for an email that has an account is 409: that account
    accepts it signed in (/users/me/invitations). Throttled like a sign-in; any secret that
    does not accept gets the same 400."""
    body = load(AcceptSchema(), request_body(form=True))
    auth = authenticator(current_app)
    with pool().connection() as conn:
        done = links.accept(conn, auth, secret=body["token"].strip(), password=body["password"],
                            name=body["name"], address=client_address(auth.settings),
                            everywhere=body["sign_out_everywhere"])
    return done, 200, NO_STORE


@blp.route("/auth/password-reset", methods=["POST"])
@blp.doc(security=[], requestBody={"required": True, "content": {
    "application/json": {"schema": ResetRequestSchema},
    "application/x-www-form-urlencoded": {"schema": ResetRequestSchema}}})
@blp.response(202)
@public
def request_password_reset() -> Any:
    """Ask for a password-reset link by email. The answer is the same 202 whether or not the
    email has an account (no account oracle); with SMTP configured the link is mailed to it.
    Requests count like failed sign-ins per email and address (429 past the limit)."""
    email = load(ResetRequestSchema(), request_body(form=True))["email"]
    auth = authenticator(current_app)
    address = client_address(auth.settings)
    subject = "reset:" + email.strip().lower()
    with pool().connection() as conn:
        auth.check_throttle(conn, subject, address)
        auth.record_failure(conn, subject, address)
        links.request_reset(conn, auth.settings, email=email, address=address)
    return {"message": "if this email has an account, a link to reset its password is on its "
            "way"}, 202, NO_STORE
