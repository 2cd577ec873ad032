"""`/api/v2/channels`: where the organisation's alert events are delivered (docs/alerts.md).

Kinds: `webhook` (an http(s) URL; requests signed per Standard Webhooks with the channel's
`whsec_` secret, shown once in the creation answer and kept sealed with SDS_APIKEY_SEAL_KEYS),
`email` (recipients, sent through the organisation's SMTP settings or SDS_SMTP_*; refused while
there are none) and `mqtt` (the organisation's alerts topic). A webhook's `format` is `standard`
or a service's own message shape (alerts.delivery.formats: Slack, Teams, Telegram, ntfy,
PagerDuty), which carries no signature and so no secret.
`notifications:read` lists and reads, `notifications:write` creates, changes, deletes and
sends a test. Another organisation's channel is the same 404 as a missing one. A webhook URL
given as an IRI is stored as its URI (`iri_to_uri`: what an HTTP request line can carry);
URLs that resolve to non-public addresses are refused (shared.netguard) unless
SDS_WEBHOOK_ALLOW_PRIVATE. The deliverer (alerts.delivery) sets `disabled_at` after
SDS_CHANNEL_MAX_FAILURES failed attempts in a row; `PATCH {"active": true}` enables it again.
A disabled or paused channel receives nothing, a test included (409). Each record carries its
newest delivery (`last_delivery`: state, status, the receiver's answer, the error).
"""

from __future__ import annotations

import base64
import secrets
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit
from uuid import UUID

from flask import current_app
from marshmallow import Schema, ValidationError, fields, validate, validates, validates_schema
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from serve import ids
from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import stamp
from shared import alerttopic, audit, channelformats, netguard, sealing, smtpsettings
from shared.errors import BadRequest, Conflict

blp = Blueprint("channels", __name__, url_prefix="/api/v2/channels",
                description="Delivery channels of the organisation's alert events.")

KINDS = ("webhook", "email", "mqtt")
READ_ONLY = ("id", "secret", "secret_hint", "topic", "consecutive_failures", "disabled_at",
             "disabled_reason", "created_at", "updated_at", "last_delivery")
NAME_RULES = [validate.Length(min=1, max=120),
              validate.Regexp(r"^[^\x00-\x1f\x7f]*$", error="must not contain control characters")]
MAX_RECIPIENTS = 20
# Answers holding a secret: no cache along the way may keep them.
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_COLUMNS = ("id, org_id, name, kind, url, secret_last4, recipients, active, consecutive_failures,"
            " disabled_at, disabled_reason, created_at, updated_at, format, options")
# The channel's newest delivery, beside each row (the dashboard's status and Test result).
_LAST = ("d.event_id AS ld_event_id, e.kind AS ld_kind, d.state AS ld_state,"
         " d.attempts AS ld_attempts, d.last_status AS ld_status, d.last_error AS ld_error,"
         " d.last_answer AS ld_answer, d.last_attempt_at AS ld_at, d.delivered_at AS ld_delivered")

# Statements built from the constant column list above (values are always bound parameters).
_PREFIXED = ", ".join("c." + c.strip() for c in _COLUMNS.split(","))
_SELECT = (f"SELECT {_PREFIXED}, {_LAST}"  # nosec B608  constant text of this module
           " FROM alert_channels c LEFT JOIN LATERAL (SELECT * FROM alert_deliveries x"
           " WHERE x.channel_id = c.id ORDER BY x.created_at DESC, x.id DESC LIMIT 1) d ON true"
           " LEFT JOIN alert_events e ON e.id = d.event_id")
_RETURNING = f" RETURNING {_COLUMNS}"
_PUBLIC_NAMES = {"fmt": "format"}  # schema attributes whose body name differs


def _encode_non_ascii(text: str) -> str:
    # Only characters beyond ASCII (RFC 3987 3.1): ASCII is left to shared.netguard's rules
    # (a space or a control character stays refused, never quietly encoded).
    return "".join(quote(c, safe="") if ord(c) > 127 else c for c in text)


def iri_to_uri(url: str) -> str:
    """`url` with its non-ASCII parts mapped as RFC 3987 says: a host's labels to IDNA
    (`bücher.example` -> `xn--bcher-kva.example`), every other non-ASCII character to its
    UTF-8 bytes percent-encoded (`/é` -> `/%C3%A9`). ASCII text comes back unchanged.
    ValueError when it cannot be (an invalid label, text that is not Unicode)."""
    if url.isascii():
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if not netloc.isascii():
        userinfo, at, hostport = netloc.rpartition("@")
        host, colon, port = hostport, "", ""
        if not hostport.startswith("["):  # an IPv6 literal has no non-ASCII form
            host, colon, port = hostport.partition(":")
        try:
            host = host.encode("idna").decode("ascii") if not host.isascii() else host
        except UnicodeError as exc:
            raise ValueError(f"host {host!r} is not a valid internationalised domain name "
                             f"({exc})") from None
        netloc = _encode_non_ascii(userinfo) + at + host + colon + _encode_non_ascii(port)
    mapped = urlunsplit((parts.scheme, netloc, _encode_non_ascii(parts.path),
                         _encode_non_ascii(parts.query), _encode_non_ascii(parts.fragment)))
    if not mapped.isascii():
        raise ValueError("has characters that cannot be mapped to a URI")
    return mapped


class WebhookUrl(fields.String):
    """A webhook URL: a string, an IRI stored as its URI (`iri_to_uri`)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        try:
            return iri_to_uri(text)
        except (ValueError, UnicodeError) as exc:  # a lone surrogate does not encode
            raise ValidationError(f"is not a URL this service can send to: {exc}") from None


def _recipient_list(**kwargs: Any) -> fields.List:
    return fields.List(fields.Email(validate=validate.Length(max=254)),
                       validate=validate.Length(min=1, max=MAX_RECIPIENTS), **kwargs)


class ChannelCreateSchema(Schema):
    """Body of POST /channels: `url` for a webhook, `recipients` for email, nothing for mqtt."""

    name = fields.String(required=True, validate=NAME_RULES)
    kind = fields.String(required=True, validate=validate.OneOf(KINDS))
    url = WebhookUrl(validate=validate.Length(max=netguard.URL_MAX))
    recipients = _recipient_list()
    active = fields.Boolean(load_default=True)
    fmt = fields.String(data_key="format", validate=validate.OneOf(channelformats.FORMATS))
    options = fields.Dict(keys=fields.String(validate=validate.Length(max=40)),
                          values=fields.String(validate=validate.Length(max=200)))

    @validates_schema
    def _by_kind(self, data: dict[str, Any], **_kwargs: Any) -> None:
        kind = data.get("kind")
        for key, name in (("fmt", "format"), ("options", "options")):
            if kind != "webhook" and key in data:
                raise ValidationError(f"only a webhook channel has a {name}", name)
        if kind == "webhook" and "url" not in data:
            raise ValidationError("required for a webhook channel", "url")
        if kind == "email" and "recipients" not in data:
            raise ValidationError("required for an email channel", "recipients")
        if kind != "webhook" and "url" in data:
            raise ValidationError("only a webhook channel has a url", "url")
        if kind != "email" and "recipients" in data:
            raise ValidationError("only an email channel has recipients", "recipients")


class ChannelUpdateSchema(Schema):
    """Body of PATCH /channels/{id}: any of name, url (webhook), recipients (email), active."""

    name = fields.String(validate=NAME_RULES)
    url = WebhookUrl(validate=validate.Length(max=netguard.URL_MAX))
    recipients = _recipient_list()
    active = fields.Boolean()
    fmt = fields.String(data_key="format", validate=validate.OneOf(channelformats.FORMATS))
    options = fields.Dict(keys=fields.String(validate=validate.Length(max=40)),
                          values=fields.String(validate=validate.Length(max=200)))

    @validates("url")
    def _url(self, value: str, **_kwargs: Any) -> None:
        _check_url(value)


def _check_url(value: str) -> None:
    allow = current_app.extensions["settings"].webhook_allow_private
    try:
        netguard.check_url(value, allow_private=allow)
    except netguard.Refused as exc:
        raise ValidationError(str(exc)) from None


def channel_record(row: dict[str, Any], *, secret: str | None = None) -> dict[str, Any]:
    """The served record of a channel row (the secret only when given: at creation)."""
    record: dict[str, Any] = {
        "id": str(row["id"]), "name": row["name"], "kind": row["kind"],
        "active": row["active"], "consecutive_failures": row["consecutive_failures"],
        "disabled_at": stamp(row["disabled_at"]), "disabled_reason": row["disabled_reason"],
        "created_at": stamp(row["created_at"]), "updated_at": stamp(row["updated_at"]),
    }
    if row["kind"] == "webhook":
        record["url"] = row["url"]
        record["format"] = row["format"]
        if row["format"] == "standard":
            record["secret_hint"] = f"whsec_...{row['secret_last4']}"
        else:
            record["options"] = dict(row["options"] or {})
        if secret is not None:
            record["secret"] = secret
    elif row["kind"] == "email":
        record["recipients"] = list(row["recipients"] or [])
    else:
        record["topic"] = alerttopic.subscription(row["org_id"])
    record["last_delivery"] = None if row.get("ld_state") is None else {
        "event_id": str(row["ld_event_id"]), "event_kind": row["ld_kind"],
        "state": row["ld_state"], "attempts": row["ld_attempts"], "status": row["ld_status"],
        "answer": row["ld_answer"], "error": row["ld_error"],
        "attempted_at": stamp(row["ld_at"]), "delivered_at": stamp(row["ld_delivered"])}
    return record


def new_secret() -> str:
    """A Standard Webhooks signing secret: whsec_ and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _check_format(fmt: str, url: str, options: dict[str, Any]) -> None:
    problems = channelformats.check(fmt, url, options)
    if problems:
        text = "; ".join(f"{k}: {v}" for k, v in problems.items())
        raise BadRequest(f"invalid body: {text}",
                         errors={"json": {k: [v] for k, v in problems.items()}})


def _check_email_on(conn: Any, org: Any) -> None:
    """Conflict while neither the server nor the organisation has SMTP settings: an email
    channel would only fail until the deliverer disables it."""
    settings = current_app.extensions["settings"]
    if smtpsettings.source(settings, smtpsettings.stored(conn, org)) == "none":
        raise Conflict("email is off: this server has no SMTP settings (SDS_SMTP_HOST) and the "
                       "organisation has none of its own; an owner sets them at "
                       "PUT /api/v2/email-settings (the dashboard's Channels page)",
                       errors={"json": {"kind": ["email needs SMTP settings"]}})


def _sealer() -> sealing.Sealer:
    ext = current_app.extensions
    if "secret_sealer" not in ext:
        ext["secret_sealer"] = sealing.secret_sealer(ext["settings"])
    found: sealing.Sealer | None = ext["secret_sealer"]
    if found is None:
        raise Conflict("webhook channels need SDS_APIKEY_SEAL_KEYS (the signing secret is kept "
                       "sealed); the operator has not set it")
    return found


@blp.route("", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": ChannelCreateSchema}}})
@blp.response(201)
@requires("notifications:write")
def create_channel() -> Any:
    """Create a channel (201). A webhook's answer holds its `secret` (whsec_...): the only
    time it is shown; keep it to verify signatures."""
    args = load(ChannelCreateSchema(), request_body(form=False), read_only=READ_ONLY)
    fmt = args.get("fmt", "standard")
    if args["kind"] == "webhook":
        try:
            _check_url(args["url"])
        except ValidationError as exc:
            raise BadRequest(f"invalid body: url: {' '.join(exc.messages)}",
                             errors={"json": {"url": exc.messages}}) from None
        _check_format(fmt, args["url"], args.get("options") or {})
    secret = new_secret() if args["kind"] == "webhook" and fmt == "standard" else None
    sealed = _sealer().seal(secret) if secret else None
    org = current_principal().org_id
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        if args["kind"] == "email":
            _check_email_on(conn, org)
        row = cur.execute(
            "INSERT INTO alert_channels"  # nosec B608  constant text and columns; values bound
            " (org_id, name, kind, url, secret_sealed, secret_last4, recipients, active,"
            " format, options) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (org_id, name) DO NOTHING" + _RETURNING,
            (org, args["name"], args["kind"], args.get("url"), sealed,
             secret[-4:] if secret else None, args.get("recipients"), args["active"], fmt,
             Jsonb(args.get("options") or {}))).fetchone()
        if row is not None:  # the secret never goes into the log (options may hold a key)
            audit.record(conn, org=org, actor=audit_actor(conn), action="channel.create",
                         target_type="channel", target_id=row["id"],
                         details={**{k: args.get(k) for k in ("name", "kind", "url",
                                                              "recipients", "active")},
                                  "format": fmt})
    if row is None:
        raise Conflict(f"a channel named {args['name']!r} exists already",
                       errors={"json": {"name": ["already used by another channel"]}})
    return channel_record(row, secret=secret), 201, NO_STORE


@blp.route("", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("notifications:read")
def list_channels(limit: int, page: int) -> Any:
    """The organisation's channels in the paged envelope, oldest first."""
    org = current_principal().org_id
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute("SELECT count(*) AS n FROM alert_channels WHERE org_id = %s",
                            (org,)).fetchone()
        total = found["n"] if found else 0
        pages = check_page(total, limit, page)
        rows = cur.execute(
            _SELECT + " WHERE c.org_id = %s ORDER BY c.created_at, c.id LIMIT %s OFFSET %s",
            (org, limit, offset(limit, page))).fetchall()
    return envelope([channel_record(r) for r in rows], total=total, limit=limit, page=page,
                    pages=pages)


def _fetch(cur: Any, wanted: UUID) -> dict[str, Any]:
    row = cur.execute(_SELECT + " WHERE c.id = %s AND c.org_id = %s",
                      (wanted, current_principal().org_id)).fetchone()
    if row is None:
        raise ids.unknown("channel", wanted)
    return dict(row)


@blp.route("/<objid('channel'):channel_id>", methods=["GET"])
@blp.response(200)
@requires("notifications:read")
def get_channel(channel_id: UUID) -> Any:
    """One channel, with its failure count and, when disabled, when and why."""
    wanted = channel_id
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        return channel_record(_fetch(cur, wanted))


@blp.route("/<objid('channel'):channel_id>", methods=["PATCH"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": ChannelUpdateSchema}}})
@blp.response(200)
@requires("notifications:write")
def update_channel(channel_id: UUID) -> Any:
    """Change `name`, `url` (webhook), `format` and `options` (webhook), `recipients` (email)
    or `active`. `active: true` also enables a channel the deliverer disabled (failures
    reset; its pending deliveries resume). A new `format` takes its own `options` (the old
    format's are dropped); a change to `standard` makes a new signing secret, shown in this
    answer only; a change from it drops the secret."""
    wanted = channel_id
    changes = load(ChannelUpdateSchema(), request_body(form=False), read_only=READ_ONLY)
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        row = _fetch(cur, wanted)
        for field, name, only in (("url", "url", "webhook"), ("recipients", "recipients", "email"),
                                  ("options", "options", "webhook"),
                                  ("fmt", "format", "webhook")):
            if field in changes and row["kind"] != only:
                raise BadRequest(f"invalid body: {name}: only a {only} channel has it",
                                 errors={"json": {name: [f"only a {only} channel has it"]}})
        fmt = changes.get("fmt", row["format"])
        new_format = fmt != row["format"]
        if new_format and "options" not in changes:
            changes["options"] = {}  # the old format's options mean nothing to the new one
        if row["kind"] == "webhook" and ("url" in changes or "options" in changes):
            _check_format(fmt, changes.get("url", row["url"]),
                          changes.get("options", row["options"]) or {})
        secret = new_secret() if new_format and fmt == "standard" else None
        sealed = _sealer().seal(secret) if secret else None
        enable = changes.get("active") is True
        updated = cur.execute(
            "UPDATE alert_channels"  # nosec B608  constant text and columns; values bound
            " SET name = coalesce(%(name)s, name),"
            " url = coalesce(%(url)s, url), recipients = coalesce(%(recipients)s, recipients),"
            " options = coalesce(%(options)s, options),"
            " format = %(format)s,"
            " secret_sealed = CASE WHEN %(format)s <> 'standard' THEN NULL"
            "   ELSE coalesce(%(sealed)s, secret_sealed) END,"
            " secret_last4 = CASE WHEN %(format)s <> 'standard' THEN NULL"
            "   ELSE coalesce(%(last4)s, secret_last4) END,"
            " active = coalesce(%(active)s, active),"
            " disabled_at = CASE WHEN %(enable)s THEN NULL ELSE disabled_at END,"
            " disabled_reason = CASE WHEN %(enable)s THEN NULL ELSE disabled_reason END,"
            " consecutive_failures = CASE WHEN %(enable)s THEN 0 ELSE consecutive_failures END,"
            " updated_at = now()"
            " WHERE id = %(id)s AND org_id = %(org)s"
            " AND NOT EXISTS (SELECT 1 FROM alert_channels o WHERE o.org_id = %(org)s"
            "   AND o.name = %(name)s AND o.id <> %(id)s)" + _RETURNING,
            {"name": changes.get("name"), "url": changes.get("url"),
             "recipients": changes.get("recipients"), "active": changes.get("active"),
             "options": Jsonb(changes["options"]) if "options" in changes else None,
             "format": fmt, "sealed": sealed, "last4": secret[-4:] if secret else None,
             "enable": enable, "id": wanted, "org": row["org_id"]}).fetchone()
        if updated is not None and changes:  # options may hold a key: never logged
            audit.record(conn, org=row["org_id"], actor=audit_actor(conn),
                         action="channel.update", target_type="channel", target_id=wanted,
                         details={_PUBLIC_NAMES.get(k, k): v
                                  for k, v in changes.items() if k != "options"})
        if updated is None:
            raise Conflict(f"a channel named {changes.get('name')!r} exists already",
                           errors={"json": {"name": ["already used by another channel"]}})
        if secret is None:
            return channel_record(_fetch(cur, wanted))
        return channel_record(_fetch(cur, wanted), secret=secret), 200, NO_STORE


@blp.route("/<objid('channel'):channel_id>", methods=["DELETE"])
@blp.response(204)
@requires("notifications:write")
def delete_channel(channel_id: UUID) -> Any:
    """Delete a channel; its pending deliveries are dropped with it."""
    wanted = channel_id
    with pool().connection() as conn:
        cur = conn.execute("DELETE FROM alert_channels WHERE id = %s AND org_id = %s",
                           (wanted, current_principal().org_id))
        if cur.rowcount == 0:
            raise ids.unknown("channel", channel_id)
        audit.record(conn, org=current_principal().org_id, actor=audit_actor(conn),
                     action="channel.delete", target_type="channel", target_id=wanted)
    return None


@blp.route("/<objid('channel'):channel_id>/test", methods=["POST"])
@blp.response(202)
@requires("notifications:write")
def send_test(channel_id: UUID) -> Any:
    """Send a `test` event to this channel only (202, the event's id; its outcome is the
    channel's `last_delivery`). A disabled or paused channel receives nothing, a test
    included (409: enable it first); an email channel while there are no SMTP settings
    neither."""
    wanted = channel_id
    org = current_principal().org_id
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        row = _fetch(cur, wanted)
        if row["disabled_at"] is not None or not row["active"]:
            why = "disabled by the deliverer" if row["disabled_at"] else "paused"
            raise Conflict(f"the channel {row['name']!r} is {why}: a disabled channel receives "
                           "nothing, tests included; enable it first (PATCH {\"active\": true})",
                           errors={"json": {"active": ["the channel is not active"]}})
        if row["kind"] == "email":
            _check_email_on(conn, org)
        event = cur.execute(
            "INSERT INTO alert_events (org_id, kind, at, title, body, channels)"
            " VALUES (%s, 'test', now(), %s, %s, ARRAY[%s]::uuid[]) RETURNING id",
            (org, f"Test of channel {row['name']}",
             Jsonb({"test": True, "channel": str(wanted)}), wanted)).fetchone()
    assert event is not None
    return {"event_id": str(event["id"]), "channel_id": str(wanted)}
