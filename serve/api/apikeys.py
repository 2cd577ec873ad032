"""`/api/v2/apikeys`: create, list, change and delete the caller's API keys; the scope map.

Keys are looked up by their SHA-256 digest. As the interface spec says (2.7, 3, 4.8), the key
value is in the creation answer and, for the owner with basic or bearer credentials, in the
listing and in PUT answers, deactivated keys included: the database keeps a copy sealed with
SDS_APIKEY_SEAL_KEYS (shared.sealing). With SDS_APIKEY_RETRIEVABLE=false (or no seal key) keys
are show-once: listings show a masked value (docs/spec/reference-facts.md decision 9). A
listing made with an API key (`apikeys:read`, decision 11) is always masked. Creating,
changing and deleting keys needs basic or bearer credentials. Another user's key id answers
exactly like a missing one (404).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from flask import current_app
from marshmallow import Schema, ValidationError, fields, validate, validates
from psycopg.rows import dict_row

from people import accounts, credentials, keypolicy
from serve import ids
from serve.auth import audit_actor, current_principal, requires, requires_user
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.pool import pool
from serve.records import stamp
from shared import audit, sealing
from shared.errors import BadParameter
from shared.timeutil import INSTANT_RANGE, format_utc_z_exact, parse_instant

blp = Blueprint("apikeys", __name__, url_prefix="/api/v2/apikeys",
                description="API keys of the calling user, and the scopes a key can hold.")

# Fields a client may see but never set; naming them in a body is a 400 (mass assignment).
READ_ONLY = ("id", "apikey", "created", "updated", "created_by", "last_seen", "user_id",
             "org_id", "digest", "prefix", "last4")
NAME_MAX = 200
# PostgreSQL text cannot hold NUL; other control characters have no place in a label either.
NAME_RULES = [validate.Length(max=NAME_MAX),
              validate.Regexp(r"^[^\x00-\x1f\x7f]*$", error="must not contain control characters")]


class Instant(fields.Field):
    """An ISO 8601 UTC datetime (a date alone means 00:00 UTC) that lies in the future."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> datetime:
        if not isinstance(value, str):
            raise ValidationError("must be an ISO 8601 datetime string")
        try:
            when = parse_instant(value, name=attr or "exp")
        except BadParameter as exc:
            if INSTANT_RANGE in exc.message:
                raise ValidationError(f"must lie from {INSTANT_RANGE}") from None
            raise ValidationError(
                "must be an ISO 8601 datetime, e.g. 2030-01-01T00:00:00Z") from None
        if when <= datetime.now(UTC):
            raise ValidationError("must be in the future")
        return when


def _check_scopes(value: list[str]) -> None:
    if not value:
        raise ValidationError("at least one scope is required")
    unknown = sorted(set(value) - set(credentials.SCOPES))
    if unknown:
        raise ValidationError(f"unknown scope(s) {', '.join(unknown)}; valid: "
                              + ", ".join(credentials.SCOPES))


def _scope_list(**kwargs: Any) -> fields.List:
    # enum and minItems only describe the rule in the OpenAPI document; _check_scopes enforces
    # it with one message naming every unknown scope.
    return fields.List(fields.String(metadata={"enum": list(credentials.SCOPES)}),
                       metadata={"minItems": 1}, **kwargs)


class ApiKeyCreateSchema(Schema):
    """Body of POST /apikeys; unknown and read-only fields are refused."""

    scopes = _scope_list(required=True)
    name = fields.String(load_default="", validate=NAME_RULES)
    exp = Instant(load_default=None, allow_none=True, metadata={
        "type": "string", "format": "date-time", "description": "must lie in the future"})
    active = fields.Boolean(load_default=True)

    @validates("scopes")
    def _scopes(self, value: list[str], **_kwargs: Any) -> None:
        _check_scopes(value)


class ApiKeyUpdateSchema(Schema):
    """Body of PUT /apikeys/{id}: any of scopes, name, exp (null removes it), active."""

    scopes = _scope_list()
    name = fields.String(validate=NAME_RULES)
    exp = Instant(allow_none=True, metadata={
        "type": "string", "format": "date-time",
        "description": "must lie in the future; null removes the expiry"})
    active = fields.Boolean()

    @validates("scopes")
    def _scopes(self, value: list[str], **_kwargs: Any) -> None:
        _check_scopes(value)


class ApiKeySchema(Schema):
    """An API key record (section 2.7)."""

    id = fields.String()
    apikey = fields.String(metadata={"description": (
        "The key value: at creation, and for its owner with basic or bearer credentials in "
        "listings and PUT answers (unless the service runs with show-once keys); otherwise "
        "masked as prefix...last4")})
    name = fields.String()
    scopes = fields.List(fields.String())
    exp = fields.String(allow_none=True)
    active = fields.Boolean()
    created = fields.String()
    updated = fields.String()
    created_by = fields.String()
    last_seen = fields.String(allow_none=True)


def format_exp(t: datetime | None) -> str | None:
    """`2030-01-01T00:00:00Z`: the expiry as an ISO 8601 UTC datetime."""
    return None if t is None else format_utc_z_exact(t)


def key_record(row: dict[str, Any], *, value: str | None = None) -> dict[str, Any]:
    """The served record of a key row; the full value when given, else the masked one."""
    return {
        "id": str(row["id"]),
        "apikey": value if value is not None else credentials.mask(row["prefix"], row["last4"]),
        "name": row["name"],
        "scopes": list(row["scopes"]),
        "exp": format_exp(row["exp"]),
        "active": row["active"],
        "created": stamp(row["created"]),
        "updated": stamp(row["updated"]),
        "created_by": str(row["created_by"]),
        "last_seen": stamp(row["last_seen"]),
    }


_LIST_SQL = """
SELECT id, name, prefix, last4, sealed, scopes, exp, active, created, updated, created_by,
       last_seen
FROM api_keys WHERE user_id = %s ORDER BY created, id
"""
# Only the four changeable fields; a field not sent keeps its value (exp: null clears it).
_UPDATE_SQL = """
UPDATE api_keys SET
    scopes = CASE WHEN %(set_scopes)s THEN %(scopes)s::text[] ELSE scopes END,
    name = coalesce(%(name)s, name),
    exp = CASE WHEN %(set_exp)s THEN %(exp)s::timestamptz ELSE exp END,
    active = coalesce(%(active)s, active),
    updated = CASE WHEN %(changed)s THEN now() ELSE updated END
WHERE id = %(id)s AND user_id = %(user)s
RETURNING id, name, prefix, last4, sealed, scopes, exp, active, created, updated, created_by,
          last_seen
"""
# Answers that may hold key values: no cache along the way may keep them.
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


def _sealer() -> sealing.Sealer | None:
    """This app's Sealer (None: show-once keys), made once from its settings."""
    ext = current_app.extensions
    if "apikey_sealer" not in ext:
        ext["apikey_sealer"] = sealing.from_settings(ext["settings"])
    found: sealing.Sealer | None = ext["apikey_sealer"]
    return found


def _owner_value(row: dict[str, Any]) -> str | None:
    """The key value for its owner calling with basic or bearer credentials, when the key has
    a sealed copy that opens; None (masked) otherwise."""
    sealer = _sealer()
    if sealer is None or current_principal().kind == "apikey":
        return None
    return sealer.open(row["sealed"])


@blp.route("", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": ApiKeyCreateSchema}}})
@blp.response(200, ApiKeySchema)
@requires_user()
def create_key() -> Any:
    """Create an API key; the response holds the key value.

    Needs basic or bearer credentials (an API key cannot create keys). `scopes` is required
    and each scope must exist (GET /apikeys/scopes); `exp` must be a future UTC datetime.
    orgs:write, users:write and teams:write need an administrator (403); a user holds at most
    SDS_API_MAX_KEYS_PER_USER keys (409).
    """
    body = request_body(form=False)
    args = load(ApiKeyCreateSchema(), body, read_only=READ_ONLY)
    principal = current_principal()
    with pool().connection() as conn:
        keypolicy.check_scopes(conn, principal, args["scopes"])
        keypolicy.check_key_cap(conn, principal,
                                current_app.extensions["settings"].api_max_keys_per_user)
        record = accounts.create_api_key(
            conn, user=principal.user_id, scopes=args["scopes"], name=args["name"],
            exp=args["exp"], active=args["active"], sealer=_sealer(), org=principal.org_id)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn), action="apikey.create",
                     target_type="apikey", target_id=record["id"],
                     details={"name": args["name"], "scopes": sorted(set(args["scopes"]))})
    return key_record(record, value=record["apikey"]), 200, NO_STORE


@blp.route("", methods=["GET"])
@blp.response(200, ApiKeySchema(many=True))
@requires("apikeys:read")
def list_keys() -> Any:
    """The caller's API keys, oldest first. With basic or bearer credentials each key's value
    (deactivated keys included), unless the service runs with show-once keys; with an API key,
    masked values."""
    principal = current_principal()
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_LIST_SQL, (principal.user_id,)).fetchall()
    return [key_record(r, value=_owner_value(r)) for r in rows], 200, NO_STORE


@blp.route("/scopes", methods=["GET"])
@blp.response(200)
@requires("apikeys:read")
def list_scopes() -> Any:
    """Every scope a key can hold, mapped to its meaning."""
    return dict(credentials.SCOPES)


@blp.route("/<objid('API key'):key_id>", methods=["PUT"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": ApiKeyUpdateSchema}}})
@blp.response(200, ApiKeySchema)
@requires_user()
def update_key(key_id: UUID) -> Any:
    """Change a key's `scopes`, `name`, `exp` or `active`; other fields are refused (400).
    orgs:write, users:write and teams:write need an administrator (403)."""
    wanted = key_id
    body = request_body(form=False)
    changes = load(ApiKeyUpdateSchema(), body, read_only=READ_ONLY)
    principal = current_principal()
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        keypolicy.check_scopes(conn, principal, changes.get("scopes") or [])
        row = cur.execute(
            _UPDATE_SQL,
            {"set_scopes": "scopes" in changes,
             "scopes": sorted(set(changes.get("scopes") or [])),
             "name": changes.get("name"), "set_exp": "exp" in changes,
             "exp": changes.get("exp"), "active": changes.get("active"),
             "changed": bool(changes), "id": wanted, "user": principal.user_id}).fetchone()
        if row is None:
            raise ids.unknown("API key", key_id)
        if changes:
            audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                         action="apikey.update", target_type="apikey", target_id=wanted,
                         details={k: (sorted(set(v)) if k == "scopes" else v)
                                  for k, v in changes.items()})
    return key_record(row, value=_owner_value(row)), 200, NO_STORE


@blp.route("/<objid('API key'):key_id>", methods=["DELETE"])
@blp.response(204)
@requires_user()
def delete_key(key_id: UUID) -> Any:
    """Delete a key for good; it stops working at once."""
    wanted = key_id
    principal = current_principal()
    with pool().connection() as conn:
        cur = conn.execute("DELETE FROM api_keys WHERE id = %s AND user_id = %s",
                           (wanted, principal.user_id))
        if cur.rowcount == 0:
            raise ids.unknown("API key", key_id)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn), action="apikey.delete",
                     target_type="apikey", target_id=wanted)
    return None
