"""`/api/v2/auth/token`: trade email and password for a bearer token (POST), log out (DELETE).

Tokens are random, stored only as SHA-256 digests, and expire after `SDS_TOKEN_TTL` seconds
(docs/spec/reference-facts.md decision 8). Failed logins are throttled exactly as for Basic
credentials.

A token is bound to one organisation (docs/auth.md "Which organisation a request acts in"):
the optional `org` of the login body (an id of one of the user's organisations), else the
user's home organisation. An organisation the user is not a member of answers 401 "not a
member of that organisation" whether it exists or not, so a login tells nothing about which
organisations exist.
"""

from __future__ import annotations

from typing import Any

from flask import current_app
from flask_smorest.error_handler import ErrorSchema
from marshmallow import Schema, fields, validate

from serve.auth import (
    authenticator,
    client_address,
    current_principal,
    public,
    requires_user,
)
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.pool import pool
from shared.errors import BadRequest, Unauthorized

blp = Blueprint("auth", __name__, url_prefix="/api/v2/auth",
                description="Bearer tokens: log in with email and password, log out.")


class TokenRequestSchema(Schema):
    """Login body: the user's email and password (JSON, or form-encoded)."""

    email = fields.String(required=True, validate=validate.Length(min=1, max=320))
    password = fields.String(required=True, validate=validate.Length(min=1, max=1024))
    org = fields.UUID(load_default=None, metadata={
        "description": "the organisation the token acts in (default: the user's home one)"})


class TokenSchema(Schema):
    """A new bearer token (a secret), the id of its user and of its organisation."""

    token = fields.String(required=True)
    user_id = fields.String(required=True)
    org_id = fields.String(required=True)


@blp.route("/token", methods=["POST"])
@blp.doc(security=[], requestBody={"required": True, "content": {
    "application/json": {"schema": TokenRequestSchema},
    "application/x-www-form-urlencoded": {"schema": TokenRequestSchema}}})
@blp.response(200, TokenSchema)
@public
def create_token() -> Any:
    """Log in: a bearer token for `Authorization: Bearer <token>`.

    The token expires after the configured lifetime; failed attempts are throttled per
    account and per client address (429 with Retry-After).
    """
    creds = load(TokenRequestSchema(), request_body(form=True))
    auth = authenticator(current_app)
    with pool().connection() as conn:
        login = auth.login(conn, creds["email"], creds["password"],
                           client_address(auth.settings))
        org = creds["org"] or login.org_id
        if auth.membership(conn, login.user_id, org) is None:
            raise Unauthorized("not a member of that organisation", scheme="Basic")
        token = auth.issue_token(conn, login.user_id, org)
    return {"token": token, "user_id": str(login.user_id), "org_id": str(org)}, 200, {
        "Cache-Control": "no-store", "Pragma": "no-cache"}


@blp.route("/token", methods=["DELETE"])
@blp.response(204)
@blp.alt_response(400, schema=ErrorSchema,
                  description="Sent with Basic credentials: there is no token to revoke")
@requires_user()
def revoke_token() -> Any:
    """Log out: revoke the bearer token this request carries; it answers 401 from now on."""
    principal = current_principal()
    if principal.kind != "bearer" or principal.token_id is None:
        raise BadRequest("DELETE /api/v2/auth/token revokes the token it is sent with: send "
                         "'Authorization: Bearer <token>'")
    with pool().connection() as conn:
        conn.execute("UPDATE auth_tokens SET revoked_at = now() WHERE id = %s"
                     " AND revoked_at IS NULL", (principal.token_id,))
    return None
