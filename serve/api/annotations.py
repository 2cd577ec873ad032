"""`/api/v2/annotations`: notes on a device or a location, for an instant or a time range.

An annotation has `text`, `tags` and its `author` (the user who created it, also when an API
key of theirs did). Listings are paged like `/devices` and filtered by device, location, a time
window (an annotation is listed when its instant or range overlaps it) and tags; `format=csv`
or `Accept: text/csv` gives the same page as CSV, text made spreadsheet-safe
(shared/spreadsheet.py). Reading needs `annotations:read`, changing `annotations:write`; any
member of the organisation may change any of its annotations (docs/api.md "Annotations").
Row-level security keeps each organisation to its own rows (migration 0110); another
organisation's annotation, device or location answers exactly like a missing one.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from flask import Response, request
from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate, validates_schema
from psycopg.rows import dict_row

from serve import ids, render
from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import stamp
from shared import audit
from shared.errors import BadParameter, BadRequest, UnknownDevice, UnknownLocation
from shared.spreadsheet import escape
from shared.timeutil import INSTANT_RANGE, parse_instant

blp = Blueprint("annotations", __name__, url_prefix="/api/v2/annotations",
                description="Notes on a device or a location, for an instant or a time range.")

# Hostile sizes stop here (and again in the table's CHECKs, migration 0110).
TEXT_MAX = 2000
TAGS_MAX = 20
TAG_MAX = 64
# Tags are words people filter by: no control characters, and no comma (the `tag=` filter
# and the CSV's tags column separate tags with commas).
TAG_RULES = [validate.Length(min=1, max=TAG_MAX),
             validate.Regexp(r"^[^\x00-\x1f\x7f,]+$",
                             error="must not contain commas or control characters")]
# Notes may span lines; other control characters (NUL, which PostgreSQL text cannot hold,
# escapes that would repaint a terminal) are refused.
TEXT_RULES = [validate.Length(min=1, max=TEXT_MAX),
              validate.Regexp(r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*$",
                              error="must not contain control characters other than newlines "
                                    "and tabs")]
READ_ONLY = ("id", "author", "author_id", "created", "updated", "org_id")
CSV_COLUMNS = ("id", "device", "location", "start_time", "end_time", "text", "tags",
               "author_id", "author", "created", "updated")


class Instant(fields.Field):
    """An ISO 8601 instant (a date alone is 00:00 UTC; no offset means UTC)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> datetime:
        if not isinstance(value, str):
            raise ValidationError("must be an ISO 8601 datetime string")
        try:
            return parse_instant(value, name=attr or "time")
        except BadParameter as exc:
            if INSTANT_RANGE in exc.message:
                raise ValidationError(f"must lie from {INSTANT_RANGE}") from None
            raise ValidationError(
                "must be an ISO 8601 datetime, e.g. 2026-11-24T06:00:00Z") from None


def _tags_field(**kwargs: Any) -> fields.List:
    return fields.List(fields.String(validate=TAG_RULES),
                       validate=validate.Length(max=TAGS_MAX,
                                                error=f"at most {TAGS_MAX} tags"), **kwargs)


def _check_range(data: dict[str, Any]) -> None:
    start, end = data.get("start_time"), data.get("end_time")
    if start is not None and end is not None and end < start:
        raise ValidationError("must not be before start_time", "end_time")


class AnnotationCreateSchema(Schema):
    """Body of POST /annotations: `device` (name) or `location` (id), `start_time`, an
    optional `end_time` (a range; omitted or null: an instant), `text`, `tags`."""

    device = fields.String(load_default=None, allow_none=True,
                           validate=validate.Length(min=1, max=64))
    location = fields.UUID(load_default=None, allow_none=True)
    start_time = Instant(required=True, metadata={"type": "string", "format": "date-time"})
    end_time = Instant(load_default=None, allow_none=True,
                       metadata={"type": "string", "format": "date-time"})
    text = fields.String(required=True, validate=TEXT_RULES)
    tags = _tags_field(load_default=list)

    @validates_schema
    def _subject(self, data: dict[str, Any], **_kwargs: Any) -> None:
        if (data.get("device") is None) == (data.get("location") is None):
            raise ValidationError("give exactly one of device and location", "device")
        _check_range(data)


class AnnotationUpdateSchema(Schema):
    """Body of PUT /annotations/{id}: any of `start_time`, `end_time` (null: an instant),
    `text`, `tags`. The subject (device or location) is fixed at creation."""

    start_time = Instant(metadata={"type": "string", "format": "date-time"})
    end_time = Instant(allow_none=True, metadata={"type": "string", "format": "date-time"})
    text = fields.String(validate=TEXT_RULES)
    tags = _tags_field()

    @validates_schema
    def _range(self, data: dict[str, Any], **_kwargs: Any) -> None:
        _check_range(data)


class AnnotationArgsSchema(PageArgsSchema):
    """Paging plus the filters: device, location, start_time/end_time (overlap), tag, format."""

    class Meta:
        unknown = EXCLUDE

    device = fields.String(validate=validate.Length(min=1, max=64),
                           metadata={"description": "only annotations on this device"})
    location = fields.String(metadata={"description": "only annotations on this location (id)"})
    start_time = Instant(metadata={"type": "string", "format": "date-time", "description":
                                   "only annotations ending at or after this instant"})
    end_time = Instant(metadata={"type": "string", "format": "date-time", "description":
                                 "only annotations starting at or before this instant"})
    tag = fields.String(metadata={"description": "comma-separated tags the annotation must "
                                                 "all carry"})
    format = fields.String(validate=validate.OneOf(["csv", "json"], error="must be csv or json"),
                           metadata={"enum": ["csv", "json"], "description":
                                     "csv or json, whatever Accept says"})


class AnnotationSchema(Schema):
    """An annotation record."""

    id = fields.String()
    device = fields.String(allow_none=True)
    location = fields.String(allow_none=True)
    start_time = fields.String()
    end_time = fields.String(allow_none=True)
    text = fields.String()
    tags = fields.List(fields.String())
    author_id = fields.String(allow_none=True)
    author = fields.String(allow_none=True)
    created = fields.String()
    updated = fields.String()


# ---- SQL ---------------------------------------------------------------------------------------

_SELECT = """
SELECT a.id, d.name AS device, a.location_id, a.start_time, a.end_time, a.text, a.tags,
       a.author_id, coalesce(nullif(u.name, ''), u.email) AS author, a.created_at, a.updated_at
FROM annotations a
LEFT JOIN devices d ON d.id = a.device_id
LEFT JOIN users u ON u.id = a.author_id
"""
# Overlap with the window [start, end], both ends inclusive as /data's; an instant's range is
# the instant itself. Every filter is optional (NULL: not asked for).
_WHERE = """
WHERE a.org_id = %(org)s
  AND (%(device)s::uuid IS NULL OR a.device_id = %(device)s)
  AND (%(location)s::uuid IS NULL OR a.location_id = %(location)s)
  AND (%(start)s::timestamptz IS NULL OR coalesce(a.end_time, a.start_time) >= %(start)s)
  AND (%(end)s::timestamptz IS NULL OR a.start_time <= %(end)s)
  AND a.tags @> %(tags)s::text[]
"""
_COUNT = "SELECT count(*) FROM annotations a" + _WHERE  # nosec B608  constant text; values bound
_INSERT = """
INSERT INTO annotations (org_id, device_id, location_id, start_time, end_time, text, tags,
                         author_id)
VALUES (%(org)s, %(device)s, %(location)s, %(start)s, %(end)s, %(text)s, %(tags)s, %(author)s)
RETURNING id
"""
_UPDATE = """
UPDATE annotations SET
    start_time = coalesce(%(start)s, start_time),
    end_time = CASE WHEN %(set_end)s THEN %(end)s::timestamptz ELSE end_time END,
    text = coalesce(%(text)s, text),
    tags = coalesce(%(tags)s::text[], tags),
    updated_at = now()
WHERE id = %(id)s AND org_id = %(org)s
RETURNING id
"""


def record(row: dict[str, Any]) -> dict[str, Any]:
    """The served record of an annotation row."""
    return {
        "id": str(row["id"]),
        "device": row["device"],
        "location": None if row["location_id"] is None else str(row["location_id"]),
        "start_time": stamp(row["start_time"]),
        "end_time": stamp(row["end_time"]),
        "text": row["text"],
        "tags": list(row["tags"]),
        "author_id": None if row["author_id"] is None else str(row["author_id"]),
        "author": row["author"],
        "created": stamp(row["created_at"]),
        "updated": stamp(row["updated_at"]),
    }


def csv_text(records: list[dict[str, Any]]) -> str:
    """Records as CSV: a header line, then one line per record; every text a person chose
    (text, tags, author, device) made spreadsheet-safe, tags joined by commas."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(CSV_COLUMNS)
    for r in records:
        flat = {**r, "tags": ",".join(r["tags"])}
        out.writerow([escape(flat[c]) if isinstance(flat[c], str) and c in (
            "device", "text", "tags", "author") else ("" if flat[c] is None else flat[c])
            for c in CSV_COLUMNS])
    return buf.getvalue()


def _tags(raw: str | None) -> list[str]:
    """The `tag` filter: comma-separated, blanks ignored."""
    found = sorted({t.strip() for t in (raw or "").split(",") if t.strip()})
    if len(found) > TAGS_MAX or any(len(t) > TAG_MAX for t in found):
        raise BadParameter(f"tag: at most {TAGS_MAX} tags of at most {TAG_MAX} characters",
                           errors={"tag": ["too many or too long"]})
    return found


def _device_id(conn: psycopg.Connection, org: UUID, name: str) -> UUID | None:
    row = conn.execute("SELECT id FROM devices WHERE org_id = %s AND name = %s",
                       (org, name)).fetchone()
    return None if row is None else row[0]


def _location_id(conn: psycopg.Connection, org: UUID, raw: UUID | str) -> UUID | None:
    try:
        wanted = raw if isinstance(raw, UUID) else UUID(raw)
    except ValueError:
        return None
    row = conn.execute("SELECT id FROM locations WHERE org_id = %s AND id = %s",
                       (org, wanted)).fetchone()
    return None if row is None else row[0]


def _fetch(conn: psycopg.Connection, org: UUID, wanted: UUID) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_SELECT + " WHERE a.org_id = %s AND a.id = %s",
                          (org, wanted)).fetchone()
    if row is None:
        raise ids.unknown("annotation", wanted)
    return row


def _dedupe(tags: list[str]) -> list[str]:
    """Tags trimmed, each once, in the order given."""
    return list(dict.fromkeys(t.strip() for t in tags if t.strip()))


# ---- views -------------------------------------------------------------------------------------


@blp.route("", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": AnnotationCreateSchema}}})
@blp.response(201, AnnotationSchema)
@requires("annotations:write")
def create_annotation() -> Any:
    """Create an annotation on a device (`device`: its name) or a location (`location`: its
    id), at `start_time` or over `start_time`..`end_time`; the caller is its author."""
    args = load(AnnotationCreateSchema(), request_body(form=False), read_only=READ_ONLY)
    principal = current_principal()
    org = principal.org_id
    with pool().connection() as conn:
        device = location = None
        if args["device"] is not None:
            device = _device_id(conn, org, args["device"])
            if device is None:
                raise BadRequest(f"device: unknown device {args['device']!r}",
                                 errors={"json": {"device": ["unknown device"]}})
        else:
            location = _location_id(conn, org, args["location"])
            if location is None:
                raise BadRequest(f"location: unknown location {str(args['location'])!r}",
                                 errors={"json": {"location": ["unknown location"]}})
        row = conn.execute(_INSERT, {
            "org": org, "device": device, "location": location, "start": args["start_time"],
            "end": args["end_time"], "text": args["text"], "tags": _dedupe(args["tags"]),
            "author": principal.user_id}).fetchone()
        assert row is not None  # INSERT ... RETURNING gives its row
        audit.record(conn, org=org, actor=audit_actor(conn), action="annotation.create",
                     target_type="annotation", target_id=row[0],
                     details={"device": args["device"], "location": location,
                              "text": args["text"], "tags": _dedupe(args["tags"])})
        return record(_fetch(conn, org, row[0])), 201


@blp.route("", methods=["GET"])
@blp.arguments(AnnotationArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("annotations:read")
def list_annotations(limit: int, page: int, **filters: Any) -> Any:
    """The organisation's annotations in the paged envelope, by start_time then id.

    Filters: `device` (name), `location` (id), `start_time`/`end_time` (annotations whose
    instant or range overlaps the window, ends inclusive), `tag` (comma-separated; all must be
    carried). An unknown device or location is 404. `format=csv` (or Accept: text/csv) gives
    the page as CSV, with `X-Total`, `X-Page` and `X-Pages` headers instead of the envelope.
    """
    org = current_principal().org_id
    fmt = filters.get("format")
    as_csv = fmt == "csv" if fmt is not None else render.wants_csv(request.accept_mimetypes)
    with pool().connection() as conn:
        device = location = None
        if filters.get("device") is not None:
            device = _device_id(conn, org, filters["device"])
            if device is None:
                raise UnknownDevice(f"unknown device {filters['device']!r}")
        if filters.get("location") is not None:
            location = _location_id(conn, org, filters["location"])
            if location is None:
                raise UnknownLocation(f"unknown location {filters['location']!r}")
        bind = {"org": org, "device": device, "location": location,
                "start": filters.get("start_time"), "end": filters.get("end_time"),
                "tags": _tags(filters.get("tag"))}
        counted = conn.execute(_COUNT, bind).fetchone()
        total = counted[0] if counted else 0
        pages = check_page(total, limit, page)
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(_SELECT + _WHERE + " ORDER BY a.start_time, a.id"
                               " LIMIT %(limit)s OFFSET %(offset)s",
                               {**bind, "limit": limit, "offset": offset(limit, page)}).fetchall()
    items = [record(r) for r in rows]
    if not as_csv:
        return envelope(items, total=total, limit=limit, page=page, pages=pages)
    response = Response(csv_text(items), status=200, content_type="text/csv; charset=utf-8")
    response.headers["Content-Disposition"] = 'attachment; filename="annotations.csv"'
    response.headers.update({"X-Total": str(total), "X-Page": str(page), "X-Pages": str(pages)})
    response.vary.add("Accept")
    return response


@blp.route("/<objid('annotation'):annotation_id>", methods=["GET"])
@blp.response(200, AnnotationSchema)
@requires("annotations:read")
def get_annotation(annotation_id: UUID) -> Any:
    """One annotation of the organisation, by id."""
    wanted = annotation_id
    with pool().connection() as conn:
        return record(_fetch(conn, current_principal().org_id, wanted))


@blp.route("/<objid('annotation'):annotation_id>", methods=["PUT"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": AnnotationUpdateSchema}}})
@blp.response(200, AnnotationSchema)
@requires("annotations:write")
def update_annotation(annotation_id: UUID) -> Any:
    """Change an annotation's `start_time`, `end_time` (null: an instant), `text` or `tags`;
    fields not sent keep their value. The result must still end at or after it starts."""
    wanted = annotation_id
    changes = load(AnnotationUpdateSchema(), request_body(form=False),
                   read_only=READ_ONLY + ("device", "location"))
    org = current_principal().org_id
    with pool().connection() as conn:
        before = _fetch(conn, org, wanted)
        start = changes.get("start_time", before["start_time"])
        end = changes["end_time"] if "end_time" in changes else before["end_time"]
        if end is not None and end < start:
            raise BadRequest("invalid body: end_time: must not be before start_time",
                             errors={"json": {"end_time": ["must not be before start_time"]}})
        tags = changes.get("tags")
        conn.execute(_UPDATE, {
            "start": changes.get("start_time"), "set_end": "end_time" in changes, "end": end,
            "text": changes.get("text"), "tags": None if tags is None else _dedupe(tags),
            "id": wanted, "org": org})
        return record(_fetch(conn, org, wanted))


@blp.route("/<objid('annotation'):annotation_id>", methods=["DELETE"])
@blp.response(204)
@requires("annotations:write")
def delete_annotation(annotation_id: UUID) -> Any:
    """Delete an annotation for good."""
    wanted = annotation_id
    org = current_principal().org_id
    with pool().connection() as conn:
        cur = conn.execute("DELETE FROM annotations WHERE id = %s AND org_id = %s"
                           " RETURNING text", (wanted, org))
        gone = cur.fetchone()
        if gone is None:
            raise ids.unknown("annotation", annotation_id)
        audit.record(conn, org=org, actor=audit_actor(conn), action="annotation.delete",
                     target_type="annotation", target_id=wanted, details={"text": gone[0]})
    return None
