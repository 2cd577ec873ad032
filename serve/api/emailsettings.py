"""`/api/v2/email-settings`: the SMTP server the organisation's alert email goes through.

Without settings of its own an organisation's email uses the server's SDS_SMTP_* (`source`
`server`), and with neither email is off (`none`: email channels are refused). An owner sets
the organisation's own (`PUT`, audited as `email_settings.update`; the password sealed with
SDS_APIKEY_SEAL_KEYS and never shown again) or removes them (`DELETE`); the deliverer reads
them at each send, so no process is restarted. Any member with `notifications:read` reads them
(without the password). shared.smtpsettings keeps the table.
"""

from __future__ import annotations

from typing import Any

from flask import current_app
from marshmallow import Schema, fields, validate

from people import roles
from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.pool import pool
from serve.records import stamp
from shared import audit, sealing, smtpsettings
from shared.errors import Conflict

blp = Blueprint("email_settings", __name__, url_prefix="/api/v2/email-settings",
                description="The SMTP server of the organisation's alert email.")

_HOST = validate.Regexp(r"^[A-Za-z0-9.\-:\[\]]{1,253}$",
                        error="must be a host name or an address")
_NO_CONTROL = validate.Regexp(r"^[^\x00-\x1f\x7f]*$", error="must not contain control characters")
READ_ONLY = ("source", "password_set", "updated_at")


class EmailSettingsSchema(Schema):
    """Body of PUT /email-settings. `password` omitted keeps the stored one; "" removes it."""

    host = fields.String(required=True, validate=_HOST)
    port = fields.Integer(load_default=587, validate=validate.Range(min=1, max=65535))
    security = fields.String(load_default="starttls",
                             validate=validate.OneOf(smtpsettings.SECURITY))
    username = fields.String(allow_none=True,
                             validate=[validate.Length(max=254), _NO_CONTROL])
    password = fields.String(validate=[validate.Length(max=500), _NO_CONTROL])
    sender = fields.Email(data_key="from", required=True, validate=validate.Length(max=254))


def _owner() -> None:
    roles.require_owner(current_principal().role, "changes its email settings")


def _record(row: dict[str, Any] | None) -> dict[str, Any]:
    settings = current_app.extensions["settings"]
    record: dict[str, Any] = {"source": smtpsettings.source(settings, row)}
    if row is not None:
        record.update({"host": row["host"], "port": row["port"], "security": row["security"],
                       "username": row["username"], "from": row["from_address"],
                       "password_set": row["password_sealed"] is not None,
                       "updated_at": stamp(row["updated_at"])})
    elif settings.smtp_host:  # the server's, without its password
        record.update({"host": settings.smtp_host, "port": settings.smtp_port,
                       "security": settings.smtp_security, "username": settings.smtp_username,
                       "from": settings.smtp_from,
                       "password_set": settings.smtp_password is not None})
    return record


@blp.route("", methods=["GET"])
@blp.response(200)
@requires("notifications:read")
def get_email_settings() -> Any:
    """The SMTP settings the organisation's email goes through, and where they come from
    (`organisation`, `server` or `none`); never the password."""
    with pool().connection() as conn:
        return _record(smtpsettings.stored(conn, current_principal().org_id))


@blp.route("", methods=["PUT"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": EmailSettingsSchema}}})
@blp.response(200)
@requires("notifications:write")
def put_email_settings() -> Any:
    """Set the organisation's own SMTP settings (owners only; audited). Taken up by the
    deliverer at its next send."""
    # The body is judged first (a 400 names a bad field whoever sends it), then the role.
    args = load(EmailSettingsSchema(), request_body(form=False), read_only=READ_ONLY)
    _owner()
    args["from"] = args.pop("sender")
    keep = "password" not in args
    sealed = None
    if args.get("password"):
        sealer = sealing.secret_sealer(current_app.extensions["settings"])
        if sealer is None:
            raise Conflict("an SMTP password is kept sealed with SDS_APIKEY_SEAL_KEYS; the "
                           "operator has not set it",
                           errors={"json": {"password": ["cannot be kept on this server"]}})
        sealed = sealer.seal(args["password"])
    principal = current_principal()
    with pool().connection() as conn:
        smtpsettings.save(conn, principal.org_id, args, password_sealed=sealed,
                          keep_password=keep, user=principal.user_id)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                     action="email_settings.update", target_type="organisation",
                     target_id=principal.org_id,
                     details={**{k: v for k, v in args.items() if k != "password"},
                              "password": "kept" if keep else ("set" if sealed else "removed")})
        return _record(smtpsettings.stored(conn, principal.org_id))


@blp.route("", methods=["DELETE"])
@blp.response(200)
@requires("notifications:write")
def delete_email_settings() -> Any:
    """Remove the organisation's own settings (owners only; audited): the server's apply."""
    _owner()
    principal = current_principal()
    with pool().connection() as conn:
        if smtpsettings.remove(conn, principal.org_id):
            audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                         action="email_settings.delete", target_type="organisation",
                         target_id=principal.org_id)
        return _record(None)
