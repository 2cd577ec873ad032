"""`/api/v2/data/{table}`: time series rows of one device and/or location, page by page.

A request goes parse -> plan -> stream. `DataRequest.parse` validates the parameters before
any database work. `DataPage.plan` takes one pooled connection, which the page owns until its
body is consumed or closed, and runs the lookups and the first statements: a JSON page usually
takes one statement, the first chunk of rows plus one (so `X-Cursor-Next` is known before the
body starts), with the device's tenant check (on calibrated, the cold tier's) inside it; longer
pages continue in a REPEATABLE READ transaction. A CSV page is a COPY ... TO STDOUT streamed
after the next page's key, in one REPEATABLE READ transaction (so is a calibrated page whose
window reaches cold files, with their rows: serve.coldread, serve.coldpage). `serve.render`
formats; an aggregated page (`interval=`, `points=`) is read whole by `serve.aggregation`
(with its window's cold readings: serve.coldagg; a broken cold file answers 503).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
from collections.abc import Generator, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any, cast
from uuid import UUID

import psycopg
from flask import Response, current_app, request
from psycopg_pool import ConnectionPool
from werkzeug.exceptions import HTTPException

from serve import aggregation, caching, coldpage, coldread, coldtier, fairshare, queries, render
from serve import cursor as cursors
from serve.args import DataArgs, TimeArg, check_parameters, ignored_header
from serve.auth import current_principal, requires
from serve.data_doc import RESPONSES_DOC
from serve.errors import Blueprint
from serve.pool import ReadChoice, pool, read_pool
from serve.readmodels import table_or_404
from shared import units
from shared.columns import TABLES, Column, Table
from shared.errors import BadCursor, BadParameter, BadTimeRange, ServiceError, UnknownColumn
from shared.timeutil import format_utc_micros_z
from shared.units import Unit

log = logging.getLogger(__name__)

blp = Blueprint("data", __name__, url_prefix="/api/v2/data",
                description="Time series rows, JSON or CSV, with keyset paging.")

CHUNK_ROWS = 1000  # rows per chunk read from the database, and per body chunk

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


# An updated_since listing without start_time has no lower bound on time: a mirror wants
# every row that changed, however old its time.
_NO_START = datetime(1970, 1, 1, tzinfo=UTC)
# The parameters of /data: the schema's, and `apikey`, read by authentication.
KNOWN_PARAMETERS = frozenset(DataArgs().fields) | {"apikey"}


def _window(table: Table, start: TimeArg | None, end: TimeArg | None, *,
            unbounded: bool = False) -> tuple[datetime, datetime]:
    """Inclusive [start, end]: end defaults to now, start to end minus the table's window
    (to no lower bound when `unbounded`)."""
    end_at = end.instant if end is not None else datetime.now(UTC).replace(microsecond=0)
    if start is not None:
        start_at = start.instant
    else:
        start_at = min(_NO_START, end_at) if unbounded else end_at - table.default_window
    if start_at > end_at:
        shown_end = end.raw if end is not None else f"now ({end_at.isoformat()})"
        raise BadTimeRange(
            f"start_time ({start.raw if start else start_at.isoformat()}) is after end_time "
            f"({shown_end})",
            errors={"start_time": ["must not be after end_time"]})
    return start_at, end_at


@dataclass(frozen=True, slots=True)
class DataRequest:
    """A `/data` request as parsed: everything that is checked before any database work."""

    table: Table
    columns: tuple[Column, ...]
    units: dict[str, Unit]
    org: UUID
    devices: tuple[str, ...]  # the device names as sent (none: a location's rows)
    location: str | None  # the id or name as sent
    start_arg: TimeArg | None
    end_arg: TimeArg | None
    start: datetime
    end: datetime
    descending: bool
    limit: int
    csv: bool
    local_tz: tzinfo | None
    cursor: str | None
    updated_since: TimeArg | None = None
    ignored: tuple[str, ...] = ()  # unknown parameters, named in X-Ignored-Parameters
    bucketing: aggregation.Bucketing | None = None  # interval= / points= (serve.aggregation)

    @property
    def device(self) -> str | None:
        """The one device asked for (its rows take the single-device plan), else None."""
        return self.devices[0] if len(self.devices) == 1 else None

    @property
    def several(self) -> tuple[str, ...] | None:
        """The device names when more than one is asked for, else None."""
        return self.devices if len(self.devices) > 1 else None

    @classmethod
    def parse(cls, args: Mapping[str, Any], table: str, *, org: UUID, csv: bool,
              sent: list[str] | None = None) -> DataRequest:
        """Validate one request (404 for the table, then 400s in parameter order). `sent` is
        the query's parameter names, checked against the unknown-parameter policy; a
        `format` parameter overrides `csv` (which comes from Accept)."""
        tbl = table_or_404(table)
        ignored = check_parameters(sent or [], KNOWN_PARAMETERS)
        local = args.get("local_time")
        columns = select_columns(tbl, args.get("select"), local_time=local is not None)
        names: tuple[str, ...] | None = args.get("device")
        location = args.get("location")
        if names is None and location is None:
            raise BadParameter(
                "device or location is required (device=<name> and/or location=<id>)",
                errors={"device": ["device or location is required"],
                        "location": ["device or location is required"]})
        chosen = {p: args.get(p) or units.parse_unit(p, None) for p in units.UNIT_PARAMS}
        start_arg: TimeArg | None = args.get("start_time")
        end_arg: TimeArg | None = args.get("end_time")
        updated: TimeArg | None = args.get("updated_since")
        if updated is not None and "update_time" not in tbl.column_names:
            with_update = [t.name for t in TABLES.values()
                           if "update_time" in t.column_names]
            raise BadParameter(
                f"updated_since: table {tbl.name} has no update_time (its rows are stored "
                f"once, never recomputed); use it with {', '.join(with_update)}",
                errors={"updated_since": [f"not available on {tbl.name}"]})
        start, end = _window(tbl, start_arg, end_arg, unbounded=updated is not None)
        fmt = args.get("format")
        return cls(
            table=tbl, columns=columns, units=chosen, org=org, devices=names or (),
            location=location, start_arg=start_arg, end_arg=end_arg, start=start, end=end,
            descending=args.get("order") == "desc", limit=args.get("limit") or tbl.row_cap,
            csv=(fmt == "csv") if fmt is not None else csv,
            local_tz=local.tz if local is not None else None,
            cursor=args.get("cursor"), updated_since=updated, ignored=tuple(ignored),
            bucketing=aggregation.parse(args, tbl.name))

    def binding(self, location: UUID | None) -> dict[str, object]:
        """What a cursor of this listing is bound to: a cursor fits only the same listing.
        (Keys are added only for the new parameters in use, so the cursors of listings
        without them are bound exactly as before.)"""
        binding: dict[str, object] = {
            "org": self.org, "table": self.table.name,
            "device": self.device if self.several is None else ",".join(sorted(self.devices)),
            "location": location, "order": "desc" if self.descending else "asc",
            "start_time": _time_key(self.start_arg), "end_time": _time_key(self.end_arg),
        }
        if self.updated_since is not None:
            binding["updated_since"] = self.updated_since.instant.isoformat()
        if self.bucketing is not None:
            binding.update(self.bucketing.binding())
        return binding

    def filename(self) -> str:
        """A CSV page's download name: table, who, and only the bounds the request gave."""
        who = self.device or (f"{len(self.devices)}-devices" if self.several else None) or (
            f"location-{self.location}")
        start, end = self.start_arg and self.start.date(), self.end_arg and self.end.date()
        dates = f"_{start}_{end}" if start and end else f"_from-{start}" if start else (
            f"_to-{end}" if end else "")
        return f"{self.table.name}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', who)[:80]}{dates}.csv"

    def day(self, arg: TimeArg | None) -> date | None:
        """The local day a date-only bound names, for tables of daily resolution."""
        if arg is None or self.table.resolution < timedelta(days=1):
            return None
        return arg.day


class DataPage:
    """One page of `/data`, owning one pooled connection from `plan()` until its body (this
    object: a generator never started, on HEAD, would not run `finally`) is consumed or closed."""

    def __init__(self, req: DataRequest, conn_pool: ConnectionPool, key: bytes) -> None:
        self.req = req
        self._pool = conn_pool
        self._key = key
        self._conn: psycopg.Connection | None = None
        self._resources = ExitStack()  # server cursor / COPY: ended before the connection
        self._body: Iterator[bytes] = iter(())
        self._binding: dict[str, object] = {}
        self.start, self.end = req.start, req.end  # a cursor carries its listing's window
        self.bound: datetime | None = None  # updated_since: the listing's watermark
        self.following: cursors.Position | None = None
        self.headers: dict[str, str] = {}  # an aggregated page's X-Aggregated-From, ...
        self._guard = True  # calibrated JSON: try the one guarded statement first

    # -- plan ----------------------------------------------------------------------------------

    def plan(self) -> None:
        """Look up, read the first rows and the next page's key; errors free the connection."""
        conn = self._conn = self._pool.getconn()
        try:
            scan = self._scan(conn)
            if self.req.bucketing is not None:
                buckets = aggregation.read_page(conn, scan, self.req.bucketing, self.start,
                                                self.end, self.req.local_tz)
                self.close()  # the page is in memory
                self._body, self.following = buckets.body, buckets.following
                self.headers = buckets.headers
            elif self.req.csv and (scan.cold is None or scan.cold.page is None):
                self._plan_csv(conn, scan)
            else:
                self._plan_json(conn, scan)
        except psycopg.errors.InvalidParameterValue as exc:
            self.close()
            # A zone Python knows but this PostgreSQL's time zone data does not.
            raise BadParameter(f"local_time: {exc.diag.message_primary}",
                               errors={"local_time": ["unknown to the database"]}) from None
        except BaseException:
            self.close()
            raise

    def _scan(self, conn: psycopg.Connection) -> queries.Scan:
        """The tenant-checked lookups and the cursor: what one statement of the page reads."""
        req, org = self.req, self.req.org
        if req.updated_since is not None and req.cursor is None and self.bound is None:
            # The first page fixes the watermark before the snapshot (queries.sync_watermark).
            _one_statement_each(conn)
            self.bound = queries.sync_watermark(conn)
        # calibrated JSON: first one statement checking the cold tier itself (Scan.guard)
        guard = (self._guard and not req.csv and req.table.name == "calibrated"
                 and req.bucketing is None)
        if req.csv or (req.table.name == "calibrated" and not guard):
            # Lookups, next key, rows (and the cold catalogue: serve.coldread) in one snapshot.
            _one_snapshot(conn)
            if req.csv and req.device is not None:
                queries.find_device(conn, org=org, name=req.device)
        else:  # a JSON page usually takes one statement (see _plan_json): no transaction
            _one_statement_each(conn)
        if req.several is not None:
            queries.find_devices(conn, org=org, names=req.several)
        location, foreign = (queries.find_location(conn, org=org, ref=req.location)
                             if req.location else (None, False))
        only_devices = None
        if location is not None and not req.devices and foreign:
            only_devices = queries.org_device_names(conn, org=org)
        self._binding = req.binding(location)
        after = None
        if req.cursor is not None:
            state = cursors.decode(req.cursor, key=self._key, binding=self._binding)
            self.start, self.end, after = state.start, state.end, state.position
            self.bound = state.bound
            if req.updated_since is not None and self.bound is None:  # only with a leaked key
                raise BadCursor("cursor: not from an updated_since listing; start again "
                                "without cursor", errors={"cursor": ["invalid cursor"]})
        scan = queries.Scan(
            table=req.table, columns=req.columns, units=req.units, org=org, device=req.device,
            location=location, start=self.start, end=self.end,
            start_day=req.day(req.start_arg), end_day=req.day(req.end_arg),
            after=after, descending=req.descending, limit=req.limit, csv=req.csv,
            only_devices=only_devices, devices=req.several, guard=guard,
            updated_since=req.updated_since.instant if req.updated_since else None,
            updated_before=self.bound)
        return coldtier.attach(conn, scan, req.bucketing, (self.start, self.end),
                               current_app.extensions["settings"].cold_path)

    def _plan_json(self, conn: psycopg.Connection, scan: queries.Scan) -> None:
        """Next-page key and body of a JSON page; `conn` in autocommit (or a snapshot).

        One statement reads the first chunk plus one row (with the tenant check of the device);
        when that answers the whole page the connection is freed before the body is sent.
        Otherwise a REPEATABLE READ transaction reads the next page's key and the rest,
        keyset-continued from the first row not yet sent (exactly `limit` rows, none twice),
        as one SELECT whose rows arrive CHUNK_ROWS at a time (libpq's chunked rows mode: a
        server-side cursor cost a FETCH round trip per chunk, docs/benchmarks.md); at most
        9,000 rows, it fits the socket buffers, so it ends without waiting for a slow reader.
        """
        if scan.cold is not None and scan.cold.page is not None:  # wholly cold, JSON or CSV
            self._body, self.following = coldpage.body(scan, self.req.local_tz, conn)
            return self.close()
        probe = min(scan.limit, CHUNK_ROWS)
        stmt, params = queries.page_statement(scan, limit=probe + 1)
        with conn.cursor(binary=True) as cur:
            first = cur.execute(stmt, params).fetchall()
        if not first and scan.guard:  # nothing, or a cold file there: read it in a snapshot
            self._guard = False
            return self._plan_json(conn, self._scan(conn))
        if not first and scan.device is not None:
            queries.find_device(conn, org=scan.org, name=scan.device)  # 404 when not the caller's
        writer = render.JsonRows([c.name for c in scan.columns], self.req.local_tz)
        if len(first) <= probe or scan.limit <= CHUNK_ROWS:
            if len(first) > probe:
                self.following = cursors.Position(first[probe][-2], first[probe][-1])
                first = first[:probe]
            self.close()  # the whole page is in memory: the connection goes back now
            self._body = render.json_body(writer, first, list, CHUNK_ROWS)
            return
        rest = dataclasses.replace(scan, after=cursors.Position(first[probe][-2],
                                                                   first[probe][-1]),
                                   limit=scan.limit - probe)
        _one_snapshot(conn)
        if scan.guard and coldread.reaches(conn, rest):  # a file went live since: start over
            self._guard = False
            return self._plan_json(conn, self._scan(conn))
        self.following = queries.next_key(conn, rest)
        stmt, params = queries.page_statement(rest)
        cursor = self._resources.enter_context(conn.cursor(binary=True))
        # A generator (typed as an iterator): closed unfinished, it cancels the statement and
        # drains what was sent, so the connection goes back idle.
        rows = cast(Generator[tuple[Any, ...], None, None],
                    cursor.stream(stmt, params, size=CHUNK_ROWS))
        self._resources.callback(rows.close)
        # Send the statement and wait for its first rows: a statement that fails is still a
        # JSON error, sent before the headers.
        head = next(rows, None)
        pending = itertools.chain(() if head is None else (head,), rows)
        self._body = render.json_body(
            writer, first[:probe], lambda: list(itertools.islice(pending, CHUNK_ROWS)),
            CHUNK_ROWS)

    def _plan_csv(self, conn: psycopg.Connection, scan: queries.Scan) -> None:
        """Next-page key and body of a CSV page: COPY (page) TO STDOUT, streamed block by block
        (PostgreSQL formats the lines; the first block is read before the headers go out, so a
        failing statement is still a JSON error). `conn` is in a REPEATABLE READ transaction."""
        self.following = queries.next_key(conn, scan)
        stmt, params = queries.copy_statement(scan, local_tz=self.req.local_tz)
        copy = self._resources.enter_context(
            conn.cursor().copy(stmt, params))
        header = render.csv_header(scan.columns, self.req.local_tz is not None)
        self._body = render.copy_body(header + bytes(copy.read()), lambda: bytes(copy.read()))

    @property
    def in_memory(self) -> bool:
        """True once planned when every row is read and the connection given back."""
        return self._conn is None

    # -- stream ----------------------------------------------------------------------------

    def response(self) -> Response:
        """The 200 answer streaming this page, with X-Units and X-Cursor-Next."""
        req = self.req
        response = Response(self, status=200, content_type=(
            "text/csv; charset=utf-8" if req.csv else "application/json"))
        response.headers["X-Units"] = render.units_header(req.columns, req.units)
        response.vary.add("Accept")
        if req.csv:
            response.headers["Content-Disposition"] = (
                f'attachment; filename="{req.filename()}"')
        if req.ignored:
            response.headers["X-Ignored-Parameters"] = ignored_header(list(req.ignored))
        if self.bound is not None:
            response.headers["X-Updated-Since-Next"] = format_utc_micros_z(self.bound)
        response.headers.extend(self.headers)
        if self.following is not None:
            response.headers["X-Cursor-Next"] = cursors.encode(
                cursors.CursorState(self.following, self.start, self.end, self.bound),
                key=self._key, binding=self._binding)
        return response

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._body
        except Exception:
            # Headers are gone: the client sees a cut-off body (no final chunk), never a
            # well-formed but incomplete page.
            log.exception("error while streaming %s", "a CSV page" if self.req.csv else "a page")
            raise
        finally:
            self.close()

    def close(self) -> None:
        """End the cursor or COPY, give the connection back as it came (once; WSGI may repeat)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            self._resources.close()
            conn.rollback()
            conn.autocommit = False  # as the pool hands connections out
        except psycopg.Error as exc:
            log.warning("could not end a page's cursor or COPY cleanly: %s", exc)
        finally:
            self._pool.putconn(conn)


# How a page's connection runs its statements: the only two modes, set only here (and reset
# by DataPage.close, as the pool hands connections out).
def _one_statement_each(conn: psycopg.Connection) -> None:
    """Autocommit: each statement its own transaction (no snapshot held while rows go out)."""
    conn.autocommit = True


def _one_snapshot(conn: psycopg.Connection) -> None:
    """One read-only REPEATABLE READ transaction: lookups, next key and rows in one snapshot."""
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        return  # already in one (a calibrated JSON page's, see DataPage._scan)
    conn.autocommit = False
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


def request_cost() -> int:
    """This request's estimated cost in rows served (serve.fairshare; aggregation.cost), parsed
    as the view parses it (no organisation needed); 0 for one the view refuses."""
    try:
        args = blp.ARGUMENTS_PARSER.parse(DataArgs, request, location="query")
        req = DataRequest.parse(args, (request.view_args or {}).get("table", ""),
                                org=UUID(int=0), csv=False, sent=list(request.args.keys()))
        return aggregation.cost(req.bucketing, req.start, req.end, len(req.devices), req.limit)
    except (ServiceError, HTTPException):
        return 0


@blp.route("/<table>")
@fairshare.metered(request_cost)
@requires("data:read")
@blp.arguments(DataArgs, location="query", as_kwargs=False)
@blp.doc(responses=RESPONSES_DOC)
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
    gives CSV; otherwise JSON. On `calibrated`, `interval` (or `points`) gives one row per
    bucket and device: each column by its registry rule, a mean with `<name>_min` and
    `<name>_max`, then `samples`, `expected` and `complete`; `X-Aggregated-From` names the
    table read (docs/api.md "Aggregation").
    """
    req = DataRequest.parse(args, table, org=current_principal().org_id,
                            csv=render.wants_csv(request.accept_mimetypes),
                            sent=list(request.args.keys()))
    # Reads go to the hot standby while it is current enough (SDS_DATABASE_READ_URL). An
    # updated_since listing reads the primary: its watermark is the primary's oldest running
    # writer, which a standby may not have replayed every row stamped before yet.
    source = read_pool()
    if req.updated_since is not None and source.pool is not pool():
        source = ReadChoice(pool(), 'primary; reason="updated_since reads the primary"')
    page = DataPage(req, source.pool, current_app.extensions["cursor_key"])
    page.plan()
    response = page.response()
    settings = current_app.extensions["settings"]
    if req.updated_since is None and caching.settled(page.end, settings.ingest_horizon_days):
        # Rows past the late-data horizon cannot change: the page is built whole and gets an
        # ETag of its bytes, so a client holding it gets a 304 (serve.caching).
        response.set_data(b"".join(page))
        response = caching.conditional(response)
    elif page.in_memory:
        # All read, the connection back: one write with a Content-Length, so an instance
        # killed mid-answer almost never leaves a half-sent page the edge cannot retry.
        response.set_data(b"".join(page))
    if source.header is not None:
        response.headers["X-Read-Source"] = source.header
    return response
