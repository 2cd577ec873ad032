"""`/api/v2/data/{table}`: time series rows of one device and/or location, page by page.

Parameters are validated before any database work. A JSON page then usually takes one
statement: the first chunk of rows plus one (so `X-Cursor-Next`, which must be known before the
body starts, is known too), with the device's tenant check inside it; longer pages continue in
a REPEATABLE READ transaction through a server-side cursor, streamed a chunk at a time. A CSV
page is a COPY ... TO STDOUT streamed block by block, after the next page's key, in one
REPEATABLE READ transaction.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from flask import Response, current_app, request
from psycopg_pool import ConnectionPool

from serve import pagination, queries, render
from serve.api.schemas import table_or_404
from serve.args import DataArgs, TimeArg
from serve.auth import current_principal, requires
from serve.errors import Blueprint
from shared import units
from shared.columns import Column, Table
from shared.errors import BadParameter, BadTimeRange, UnknownColumn

log = logging.getLogger(__name__)

blp = Blueprint("data", __name__, url_prefix="/api/v2/data",
                description="Time series rows, JSON or CSV, with keyset paging.")

CHUNK_ROWS = 1000  # rows per FETCH from the server-side cursor, and per body chunk

_HEADERS_DOC = {
    "X-Cursor-Next": {"description": "Send as cursor= (same other parameters) for the next "
                                     "page; absent on the last page", "schema": {"type": "string"}},
    "X-Units": {"description": "Unit codes in effect for the measurement classes present, "
                               "e.g. C,mb,pct,mm", "schema": {"type": "string"}},
    "Access-Control-Allow-Origin": {"schema": {"type": "string"}},
}
_RESPONSES_DOC = {
    "200": {
        "description": "Rows in time order (then device). JSON: a bare array of objects; CSV "
                       "(Accept: text/csv): a header line, then one line per row.",
        "headers": _HEADERS_DOC,
        "content": {
            "application/json": {
                "schema": {"type": "array", "items": {"type": "object"}},
                "example": [{"time": "2019-07-01T00:00:00Z", "device": "A000101",
                             "tair": 21.3, "rh": 65.2,
                             "local_time": "2019-06-30T19:00:00-0500"}]},
            "text/csv": {"schema": {"type": "string"},
                         "example": "time,device,tair\n2019-07-01T00:00:00+0000,A000101,21.3\n"},
        },
    },
    "404": {"description": "Unknown table, device or location"},
}


def select_columns(table: Table, raw: str | None, *, local_time: bool) -> tuple[Column, ...]:
    """Columns named by `select`, in request order (duplicates dropped); all when absent.

    `local_time` may be named when the local_time parameter is sent; it is always last.
    """
    if raw is None:
        return table.columns
    names: list[str] = []
    for part in raw.split(","):
        name = part.strip().lower()
        if name and name not in names:
            names.append(name)
    if not names:
        return table.columns
    valid = table.column_names
    unknown = [n for n in names if n not in valid and n != "local_time"]
    if unknown:
        raise UnknownColumn(
            f"select: unknown column{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"in table {table.name}; valid columns: {', '.join(valid)}",
            errors={"select": [f"unknown column: {n}" for n in unknown]})
    if "local_time" in names and not local_time:
        raise UnknownColumn(
            "select: local_time is not a stored column; send the local_time parameter "
            "(a time zone or offset) to add it",
            errors={"select": ["local_time needs the local_time parameter"]})
    return tuple(table.column(n) for n in names if n != "local_time")


def _time_key(arg: TimeArg | None) -> str:
    if arg is None:
        return ""
    return arg.instant.isoformat() + ("/date" if arg.day is not None else "")


def _window(table: Table, start: TimeArg | None, end: TimeArg | None) -> tuple[datetime, datetime]:
    """Inclusive [start, end]: end defaults to now, start to end minus the table's window."""
    end_at = end.instant if end is not None else datetime.now(UTC).replace(microsecond=0)
    start_at = start.instant if start is not None else end_at - table.default_window
    if start_at > end_at:
        shown_end = end.raw if end is not None else f"now ({end_at.isoformat()})"
        raise BadTimeRange(
            f"start_time ({start.raw if start else start_at.isoformat()}) is after end_time "
            f"({shown_end})",
            errors={"start_time": ["must not be after end_time"]})
    return start_at, end_at


def _json_page(
    conn: psycopg.Connection, scan: queries.Scan, tz: Any, resources: list[Any],
    release: Callable[[], None],
) -> tuple[pagination.Position | None, render.RowStream]:
    """Next-page key and body of a JSON page; `conn` is in autocommit.

    One statement reads the first chunk plus one row (with the tenant check of the device).
    When that answers the whole page (at most CHUNK_ROWS rows, or a listing ending within the
    chunk) the connection is freed before the body is sent. Otherwise a REPEATABLE READ
    transaction reads the rest of the page through a server-side cursor, keyset-continued
    from the first row not yet sent, and the next page's key counted from there: the page
    holds exactly `limit` rows, none twice. (A row stored behind that point after the first
    statement is not in this listing, as with any row stored behind a cursor.)
    """
    probe = min(scan.limit, CHUNK_ROWS)
    stmt, params = queries.page_statement(scan, limit=probe + 1)
    with conn.cursor(binary=True) as cur:
        first = cur.execute(stmt, params).fetchall()  # type: ignore[call-overload]
    if not first and scan.device is not None:
        queries.find_device(conn, org=scan.org, name=scan.device)  # 404 when not the caller's
    writer = render.JsonRows([c.name for c in scan.columns], tz)
    if len(first) <= probe or scan.limit <= CHUNK_ROWS:
        following = None
        if len(first) > probe:
            following = pagination.Position(first[probe][-2], first[probe][-1])
            first = first[:probe]
        release()
        return following, render.RowStream(writer, first, list, CHUNK_ROWS, release)
    rest = dataclasses.replace(scan, after=pagination.Position(first[probe][-2],
                                                               first[probe][-1]),
                               limit=scan.limit - probe)
    conn.autocommit = False
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    following = queries.next_key(conn, rest)
    stmt, params = queries.page_statement(rest)
    cursor = conn.cursor(name="sds_page", binary=True)
    resources.append(cursor)
    cursor.execute(stmt, params)  # type: ignore[call-overload]
    return following, render.RowStream(writer, first[:probe],
                                       lambda: cursor.fetchmany(CHUNK_ROWS), CHUNK_ROWS, release)


def _csv_page(
    conn: psycopg.Connection, scan: queries.Scan, tz: Any, resources: list[Any],
    release: Callable[[], None],
) -> tuple[pagination.Position | None, render.CopyStream]:
    """Next-page key and body of a CSV page: COPY (page) TO STDOUT, streamed block by block
    (PostgreSQL formats the lines; the first block is read before the headers go out, so a
    failing statement is still a JSON error). `conn` is in a REPEATABLE READ transaction."""
    following = queries.next_key(conn, scan)
    stmt, params = queries.copy_statement(scan, local_tz=tz)
    copy_cm = conn.cursor().copy(stmt, params)  # type: ignore[arg-type]
    copy = copy_cm.__enter__()
    resources.append(copy_cm)
    header = render.csv_header(scan.columns, tz is not None)
    return following, render.CopyStream(header, bytes(copy.read()),
                                        lambda: bytes(copy.read()), release)


@blp.route("/<table>")
@requires("data:read")
@blp.arguments(DataArgs, location="query", as_kwargs=False)
@blp.doc(responses=_RESPONSES_DOC)
def get_data(args: Mapping[str, Any], table: str) -> Response:
    """Rows of a table for a device or a location.

    Either `device` or `location` is required; with both, the rows of that device while it
    stood at that location; with a location alone, the rows of every device that stood there,
    ordered by time then device. `start_time` and `end_time` are inclusive. Without
    `start_time` the window is the table's default window before `end_time` (7 days for
    calibrated and health, 100 days for hourly tables, 730 days for daily); without `limit`
    a page holds the table's row cap (2050, 2400, 730). When more rows remain, the response
    carries `X-Cursor-Next`: send it back as `cursor` with the same other parameters.
    For `daily`, a date alone in start_time/end_time names local days. `Accept: text/csv`
    gives CSV; otherwise JSON.
    """
    tbl = table_or_404(table)
    local = args.get("local_time")
    columns = select_columns(tbl, args.get("select"), local_time=local is not None)
    device_ref, location_ref = args.get("device"), args.get("location")
    if device_ref is None and location_ref is None:
        raise BadParameter(
            "device or location is required (device=<name> and/or location=<id>)",
            errors={"device": ["device or location is required"],
                    "location": ["device or location is required"]})
    chosen = {p: args.get(p) or units.parse_unit(p, None) for p in units.UNIT_PARAMS}
    descending = args.get("order") == "desc"
    limit: int = args.get("limit") or tbl.row_cap
    start_arg: TimeArg | None = args.get("start_time")
    end_arg: TimeArg | None = args.get("end_time")
    by_local_day = tbl.resolution >= timedelta(days=1)
    start, end = _window(tbl, start_arg, end_arg)
    csv = render.wants_csv(request.accept_mimetypes)
    org = current_principal().org_id
    key: bytes = current_app.extensions["cursor_key"]

    tz = local.tz if local is not None else None
    pool: ConnectionPool = current_app.extensions["db"]
    conn = pool.getconn()
    resources: list[Any] = []  # server cursor / COPY context to end before the connection
    released = False

    def release() -> None:
        nonlocal released
        if released:
            return
        released = True
        try:
            for resource in reversed(resources):
                if isinstance(resource, psycopg.ServerCursor):
                    resource.close()
                else:
                    resource.__exit__(None, None, None)
            conn.rollback()
            conn.autocommit = False  # as the pool hands connections out
        except psycopg.Error as exc:
            log.warning("could not end a page's cursor or COPY cleanly: %s", exc)
        finally:
            pool.putconn(conn)

    try:
        if csv:
            # Lookups, next-page key and COPY read one snapshot.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            if device_ref is not None:
                queries.find_device(conn, org=org, name=device_ref)
        else:
            # A JSON page usually takes one statement (see _json_page): no transaction.
            conn.autocommit = True
        location, foreign = (queries.find_location(conn, org=org, ref=location_ref)
                             if location_ref else (None, False))
        only_devices = None
        if location is not None and device_ref is None and foreign:
            only_devices = queries.org_device_names(conn, org=org)
        binding = {
            "org": org, "table": tbl.name, "device": device_ref, "location": location,
            "order": "desc" if descending else "asc",
            "start_time": _time_key(start_arg), "end_time": _time_key(end_arg),
        }
        after = None
        token = args.get("cursor")
        if token is not None:
            state = pagination.decode(token, key=key, binding=binding)
            start, end, after = state.start, state.end, state.position
        scan = queries.Scan(
            table=tbl, columns=columns, units=chosen, org=org, device=device_ref,
            location=location, start=start, end=end,
            start_day=start_arg.day if by_local_day and start_arg is not None else None,
            end_day=end_arg.day if by_local_day and end_arg is not None else None,
            after=after, descending=descending, limit=limit, csv=csv,
            only_devices=only_devices)
        if csv:
            following, body = _csv_page(conn, scan, tz, resources, release)
        else:
            following, body = _json_page(conn, scan, tz, resources, release)
    except psycopg.errors.InvalidParameterValue as exc:
        release()
        # A zone Python knows but this PostgreSQL's time zone data does not.
        raise BadParameter(f"local_time: {exc.diag.message_primary}",
                           errors={"local_time": ["unknown to the database"]}) from None
    except BaseException:
        release()
        raise

    response = Response(body, status=200, content_type=(
        "text/csv; charset=utf-8" if csv else "application/json"))
    response.headers["X-Units"] = render.units_header(columns, chosen)
    response.vary.add("Accept")
    if following is not None:
        response.headers["X-Cursor-Next"] = pagination.encode(
            pagination.CursorState(following, start, end), key=key, binding=binding)
    return response
