"""`/api/v2/auth/token`: trade email and password for a bearer token (POST), log out (DELETE).

Tokens are random, stored only as SHA-256 digests, and expire after `SDS_TOKEN_TTL` seconds
(reference-facts decision 8). Failed logins are throttled exactly as for Basic credentials.
"""

from __future__ import annotations

from typing import Any

from flask import current_app, request
from flask_smorest.error_handler import ErrorSchema
from marshmallow import Schema, ValidationError, fields, validate
from werkzeug.exceptions import UnsupportedMediaType

from serve.auth import (
    authenticator,
    client_address,
    current_principal,
    public,
    requires_user,
)
from serve.errors import Blueprint
from shared.errors import BadRequest

blp = Blueprint("auth", __name__, url_prefix="/api/v2/auth",
                description="Bearer tokens: log in with email and password, log out.")

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class TokenRequestSchema(Schema):
    """Login body: the user's email and password (JSON, or form-encoded)."""

    email = fields.String(required=True, validate=validate.Length(min=1, max=320))
    password = fields.String(required=True, validate=validate.Length(min=1, max=1024))


class TokenSchema(Schema):
    """A new bearer token (a secret) and the id of its user."""

    token = fields.String(required=True)
    user_id = fields.String(required=True)


def request_body(*, form: bool) -> dict[str, Any]:
    """The request's JSON object (or form fields when `form`); 415 for other content types."""
    mimetype = request.mimetype
    if mimetype == "application/json" or mimetype.endswith("+json"):
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body
    if form and mimetype in FORM_TYPES:
        return request.form.to_dict()
    accepted = "application/json" + (" or application/x-www-form-urlencoded" if form else "")
    raise UnsupportedMediaType(
        f"Content-Type {mimetype or '(none)'!r} is not supported; send {accepted}")


def _plain(messages: Any) -> Any:
    """marshmallow messages with every key a string (list errors are keyed by index)."""
    if isinstance(messages, dict):
        return {str(k): _plain(v) for k, v in messages.items()}
    if isinstance(messages, list | tuple):
        return [_plain(m) for m in messages]
    return str(messages)


def _flatten(messages: Any) -> str:
    if isinstance(messages, dict):
        return " ".join(f"[{k}] {_flatten(v)}" if k.isdigit() else _flatten(v)
                        for k, v in messages.items())
    if isinstance(messages, list):
        return " ".join(_flatten(m) for m in messages)
    return str(messages)


def load(schema: Schema, body: dict[str, Any], *, read_only: tuple[str, ...] = ()
         ) -> dict[str, Any]:
    """`body` validated by `schema`; one BadRequest naming every rejected field and why:
    read-only fields (named in `read_only`), unknown fields and invalid values alike."""
    messages: dict[str, Any] = {k: ["read-only field"] for k in body if k in read_only}
    try:
        loaded = dict(schema.load({k: v for k, v in body.items() if k not in messages}))
    except ValidationError as exc:
        found = _plain(exc.normalized_messages())
        messages.update(found if isinstance(found, dict) else {"_schema": found})
    if not messages:
        return loaded
    text = "; ".join(f"{field}: {_flatten(msgs)}" if field != "_schema" else _flatten(msgs)
                     for field, msgs in sorted(messages.items()))
    raise BadRequest(f"invalid body: {text}", errors={"json": messages})


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
    with auth.pool.connection() as conn:
        user, _org = auth.login(conn, creds["email"], creds["password"],
                                client_address(auth.settings))
        token = auth.issue_token(conn, user)
    return {"token": token, "user_id": str(user)}, 200, {
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
    auth = authenticator(current_app)
    with auth.pool.connection() as conn:
        conn.execute("UPDATE auth_tokens SET revoked_at = now() WHERE id = %s"
                     " AND revoked_at IS NULL", (principal.token_id,))
    return None
