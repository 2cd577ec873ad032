"""`/api/v2/silences`: silences and quiet hours of the organisation's alert rules
(docs/alerts.md "Silences and quiet hours").

A `silence` is a time window matching a rule and/or a device; a `mute` (quiet hours) is a
weekly window in a time zone matching a rule (or every rule) and/or a device. Events created
inside either are still written and listed in the inbox; the deliverer sends them to no
channel (alerts/delivery/outbox.py, the fan-out). `notifications:read` lists and reads,
`notifications:write` creates, expires and deletes; each change is audited. Another
organisation's silence, rule or device is the same as a missing one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate, validates_schema
from psycopg.rows import dict_row

from serve import ids
from serve.args import Instant
from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import stamp
from shared import audit
from shared.errors import BadRequest

blp = Blueprint("silences", __name__, url_prefix="/api/v2/silences",
                description="Silences and quiet hours (mute timings) of alert rules.")

MAX_SILENCE = timedelta(days=366)
DEVICE_NAME = validate.Regexp(r"^[A-Za-z0-9_.-]{1,64}$", error="must be a device name")
CLOCK = validate.Regexp(r"^([01][0-9]|2[0-3]):[0-5][0-9]$|^24:00$", error="must be HH:MM")
_COLUMNS = ("id, kind, rule_id, device, starts_at, ends_at, weekdays, start_minute,"
            " end_minute, time_zone, comment, created_by, created_at")
_SELECT = f"SELECT {_COLUMNS} FROM alert_silences"  # nosec B608  constant text of this module
# Listing filter: `active` true = a silence whose window holds now, or any mute.
_FILTER = """ WHERE org_id = %(org)s
AND (%(rule)s::uuid IS NULL OR rule_id = %(rule)s)
AND (%(device)s::text IS NULL OR device = %(device)s)
AND (%(active)s::boolean IS NULL OR (kind = 'mute' OR (starts_at <= now() AND ends_at > now()))
     = %(active)s)"""


class SilenceSchema(Schema):
    """Body of POST /silences. Silence: `rule` and/or `device`, `ends_at` or `duration`
    (seconds), optional `starts_at` (default now). Mute: `kind: "mute"`, `weekdays` (1 Monday
    .. 7 Sunday), `from` and `to` (HH:MM local; `to` before `from` runs over midnight),
    `time_zone` (an IANA name), optional `rule` and `device`."""

    kind = fields.String(load_default="silence", validate=validate.OneOf(("silence", "mute")))
    rule = fields.UUID(allow_none=True, load_default=None)
    device = fields.String(allow_none=True, load_default=None, validate=DEVICE_NAME)
    starts_at = Instant()
    ends_at = Instant()
    duration = fields.Integer(validate=validate.Range(
        min=60, max=int(MAX_SILENCE.total_seconds()), error="must be 60 s to 366 days"))
    weekdays = fields.List(fields.Integer(validate=validate.Range(min=1, max=7)),
                           validate=validate.Length(min=1, max=7))
    from_ = fields.String(data_key="from", validate=CLOCK)
    to = fields.String(validate=CLOCK)
    time_zone = fields.String(validate=validate.Length(min=1, max=64))
    comment = fields.String(load_default="", validate=[
        validate.Length(max=500),
        validate.Regexp(r"^[^\x00-\x1f\x7f]*$", error="must not contain control characters")])

    @validates_schema
    def _by_kind(self, data: dict[str, Any], **_kwargs: Any) -> None:
        if data["kind"] == "silence":
            for name in ("weekdays", "from_", "to", "time_zone"):
                if name in data:
                    raise ValidationError("only a mute (quiet hours) has it",
                                          name.rstrip("_"))
            if data.get("rule") is None and data.get("device") is None:
                raise ValidationError("a silence needs a rule or a device (or both)", "rule")
            if ("ends_at" in data) == ("duration" in data):
                raise ValidationError("give exactly one of ends_at or duration", "ends_at")
            return
        for name in ("starts_at", "ends_at", "duration"):
            if name in data:
                raise ValidationError("only a silence has it (a mute recurs weekly)", name)
        for name in ("weekdays", "from_", "to", "time_zone"):
            if name not in data:
                raise ValidationError("required for a mute", name.rstrip("_"))
        if _minute(data["from_"]) % 1440 == _minute(data["to"]):
            raise ValidationError("must differ from `from`", "to")


def _minute(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def _clock(minute: int | None) -> str | None:
    return None if minute is None else f"{minute // 60:02d}:{minute % 60:02d}"


def silence_record(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The served record of a silence row: a silence's `state` is `pending`, `active` or
    `expired`; a mute's is `recurring`."""
    record: dict[str, Any] = {
        "id": str(row["id"]), "kind": row["kind"],
        "rule_id": str(row["rule_id"]) if row["rule_id"] else None, "device": row["device"],
        "comment": row["comment"],
        "created_by": str(row["created_by"]) if row["created_by"] else None,
        "created_at": stamp(row["created_at"])}
    if row["kind"] == "silence":
        state = ("pending" if now < row["starts_at"] else
                 "active" if now < row["ends_at"] else "expired")
        record.update(starts_at=stamp(row["starts_at"]), ends_at=stamp(row["ends_at"]),
                      state=state)
    else:
        record.update(weekdays=list(row["weekdays"]), time_zone=row["time_zone"],
                      state="recurring", **{"from": _clock(row["start_minute"]),
                                            "to": _clock(row["end_minute"])})
    return record


def _bad(field: str, message: str) -> BadRequest:
    return BadRequest(f"invalid body: {field}: {message}", errors={"json": {field: [message]}})


def _check_targets(conn: psycopg.Connection, org: UUID, args: dict[str, Any]) -> None:
    """400 for a rule or device the organisation does not have, or an unknown time zone (one
    PostgreSQL does not know would make the deliverer's fan-out fail for everyone)."""
    if args["rule"] is not None and conn.execute(
            "SELECT 1 FROM alert_rules WHERE org_id = %s AND id = %s",
            (org, args["rule"])).fetchone() is None:
        raise _bad("rule", "no such alert rule in the organisation")
    if args["device"] is not None and conn.execute(
            "SELECT 1 FROM devices WHERE org_id = %s AND name = %s",
            (org, args["device"])).fetchone() is None:
        raise _bad("device", "no such device in the organisation")
    if args["kind"] == "mute" and conn.execute(
            "SELECT 1 FROM pg_timezone_names WHERE name = %s",
            (args["time_zone"],)).fetchone() is None:
        raise _bad("time_zone", "not a time zone name (IANA, like Europe/Paris)")


@blp.route("", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": SilenceSchema}}})
@blp.response(201)
@requires("notifications:write")
def create_silence() -> Any:
    """Create a silence or a mute (201, its record); audited as `alert.silence`."""
    args = load(SilenceSchema(), request_body(form=False),
                read_only=("id", "state", "created_by", "created_at"))
    principal = current_principal()
    now = datetime.now(UTC)
    starts = ends = None
    if args["kind"] == "silence":
        starts = args["starts_at"].instant if "starts_at" in args else now
        ends = (args["ends_at"].instant if "ends_at" in args
                else starts + timedelta(seconds=args["duration"]))
        if ends <= starts:
            raise _bad("ends_at", "must be after starts_at")
        if ends - starts > MAX_SILENCE or ends <= now:
            raise _bad("ends_at", "must be in the future and at most 366 days after starts_at")
    start_minute = _minute(args["from_"]) % 1440 if "from_" in args else None
    end_minute = _minute(args["to"]) if "to" in args else None
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        _check_targets(conn, principal.org_id, args)
        row = cur.execute(
            "INSERT INTO alert_silences (org_id, kind, rule_id, device, starts_at, ends_at,"  # nosec B608  constants of this module
            " weekdays, start_minute, end_minute, time_zone, comment, created_by)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING " + _COLUMNS,
            (principal.org_id, args["kind"], args["rule"], args["device"], starts, ends,
             sorted(set(args["weekdays"])) if "weekdays" in args else None, start_minute,
             end_minute, args.get("time_zone"), args["comment"],
             principal.user_id)).fetchone()
        assert row is not None
        record = silence_record(row, now)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                     action="alert.silence", target_type="alert_silence", target_id=row["id"],
                     details={k: v for k, v in record.items()
                              if k not in ("id", "created_at", "created_by", "state")})
    return record, 201


class SilenceListArgs(PageArgsSchema):
    """Filters of the listing, and the page."""

    class Meta:
        unknown = EXCLUDE

    rule = fields.UUID(load_default=None)
    device = fields.String(load_default=None, validate=DEVICE_NAME)
    active = fields.Boolean(load_default=None)


@blp.route("", methods=["GET"])
@blp.arguments(SilenceListArgs, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("notifications:read")
def list_silences(limit: int, page: int, rule: UUID | None, device: str | None,
                  active: bool | None) -> Any:
    """Silences and mutes newest first; `active=true`: those in effect now (a mute always)."""
    params = {"org": current_principal().org_id, "rule": rule, "device": device,
              "active": active}
    now = datetime.now(UTC)
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute("SELECT count(*) AS n FROM alert_silences" + _FILTER,  # nosec B608  constants of this module
                            params).fetchone()
        total = found["n"] if found else 0
        pages = check_page(total, limit, page)
        rows = cur.execute(_SELECT + _FILTER + " ORDER BY created_at DESC, id"
                           " LIMIT %(limit)s OFFSET %(offset)s",
                           params | {"limit": limit, "offset": offset(limit, page)}).fetchall()
    return envelope([silence_record(r, now) for r in rows], total=total, limit=limit,
                    page=page, pages=pages)


def _fetch(cur: Any, sid: UUID) -> dict[str, Any]:
    row = cur.execute(_SELECT + " WHERE org_id = %s AND id = %s",
                      (current_principal().org_id, sid)).fetchone()
    if row is None:
        raise ids.unknown("silence", sid)
    return dict(row)


@blp.route("/<objid('silence'):silence_id>", methods=["GET"])
@blp.response(200)
@requires("notifications:read")
def get_silence(silence_id: UUID) -> Any:
    """One silence or mute."""
    with pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        return silence_record(_fetch(cur, silence_id), datetime.now(UTC))


@blp.route("/<objid('silence'):silence_id>/expire", methods=["POST"])
@blp.response(200)
@requires("notifications:write")
def expire_silence(silence_id: UUID) -> Any:
    """End a silence now (200, its record; kept in the list as `expired`); audited as
    `alert.silence_expire`. A mute is deleted instead (400 names DELETE)."""
    sid = silence_id
    principal = current_principal()
    with pool().connection() as conn, conn.transaction(), \
            conn.cursor(row_factory=dict_row) as cur:
        row = _fetch(cur, sid)
        if row["kind"] == "mute":
            raise BadRequest("a mute (quiet hours) recurs: delete it with "
                             "DELETE /api/v2/silences/{id}",
                             errors={"json": {"kind": ["a mute cannot expire"]}})
        changed = cur.execute(
            "UPDATE alert_silences SET ends_at = now(), starts_at = least(starts_at, now())"  # nosec B608  constants of this module
            " WHERE id = %s AND ends_at > now() RETURNING " + _COLUMNS, (sid,)).fetchone()
        if changed is not None:
            row = dict(changed)
            audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                         action="alert.silence_expire", target_type="alert_silence",
                         target_id=sid)
        return silence_record(row, datetime.now(UTC))


@blp.route("/<objid('silence'):silence_id>", methods=["DELETE"])
@blp.response(204)
@requires("notifications:write")
def delete_silence(silence_id: UUID) -> Any:
    """Delete a silence or mute (204); audited as `alert.silence_delete`."""
    sid = silence_id
    principal = current_principal()
    with pool().connection() as conn, conn.transaction():
        gone = conn.execute("DELETE FROM alert_silences WHERE org_id = %s AND id = %s",
                            (principal.org_id, sid)).rowcount
        if not gone:
            raise ids.unknown("silence", sid)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                     action="alert.silence_delete", target_type="alert_silence",
                     target_id=sid)
    return "", 204
