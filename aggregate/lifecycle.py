"""Data lifecycle: raw `calibrated` and `health` rows past their retention horizon are exported
(CSV.gz, by device and month) and then removed; rollups are never touched.

Horizons are set globally (SDS_RETENTION_CALIBRATED_DAYS, SDS_RETENTION_HEALTH_DAYS; 0 keeps
forever) and may be overridden per organisation (organisations.*_retention_days, migration
0060). Chunks are shared by every organisation, so the work is split (docs/operations.md
"Data lifecycle"):

- whole chunks whose every row is past the *longest* horizon in force are dropped with
  TimescaleDB's drop_chunks, after their rows were exported under an EXCLUSIVE lock (reads go
  on, writes wait), so the export is exactly what is dropped;
- organisations (and devices of no organisation, under the global horizon) whose horizon is
  shorter have their older rows removed with `COPY (DELETE ... RETURNING ...)`: the export is
  exactly what was deleted.

Files are fsynced and listed in a manifest (rows and SHA-256 per file) before the transaction
that removes the rows commits; a failure anywhere rolls the removal back and leaves the files,
which the next run rewrites. Functions take `conn` first and never commit.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote
from uuid import UUID

import psycopg
from psycopg import sql

from shared import spreadsheet
from shared.columns import TABLES, Column
from shared.config import Settings

log = logging.getLogger(__name__)

RAW_TABLES = ("calibrated", "health")
# A reading as old as SDS_INGEST_HORIZON_DAYS is still accepted and marks its local day for a
# rollup; a calibrated horizon must lie beyond that day, or a late reading would arrive in a
# range whose raw rows are gone and its rollup recompute would replace the kept rollup rows
# with ones made from that reading alone.
INGEST_MARGIN_DAYS = 2


class RetentionError(ValueError):
    """A retention policy that cannot be applied safely (the message says why)."""


@dataclass(frozen=True, slots=True)
class Group:
    """Devices sharing one horizon: an organisation's, or (org None) devices of none."""

    org: UUID | None
    name: str
    days: int  # 0: kept forever


@dataclass(slots=True)
class Part:
    """Rows to export and remove: `how` is 'drop' (whole chunks) or 'delete' (one group)."""

    how: str
    cutoff: datetime  # rows strictly before this instant
    start: datetime | None = None  # and at or after this one (None: from the beginning)
    group: str | None = None
    org: UUID | None = None
    chunks: list[str] = field(default_factory=list)
    rows: int = 0


@dataclass(slots=True)
class Plan:
    """What one run removes from one table."""

    table: str
    now: datetime
    parts: list[Part] = field(default_factory=list)
    blocked: str | None = None  # why nothing is removed this run (None: go ahead)

    @property
    def rows(self) -> int:
        """Rows to export and remove."""
        return sum(p.rows for p in self.parts)


@dataclass(slots=True)
class ExportFile:
    """One CSV.gz file of an export."""

    path: str  # relative to the export directory
    device: str
    month: str
    rows: int
    sha256: str


@dataclass(slots=True)
class Result:
    """What a run did to one table."""

    table: str
    rows: int = 0
    dropped_chunks: list[str] = field(default_factory=list)
    deleted: int = 0
    files: list[ExportFile] = field(default_factory=list)
    manifest: str | None = None
    blocked: str | None = None


def global_days(settings: Settings, table: str) -> int:
    """The global horizon of `table` in days (0: forever)."""
    if table == "calibrated":
        return settings.retention_calibrated_days
    if table == "health":
        return settings.retention_health_days
    raise RetentionError(f"retention applies to {' and '.join(RAW_TABLES)} only, not {table}")


def check_days(settings: Settings, table: str, days: int, who: str) -> None:
    """Refuse a horizon a late reading could still reach (see INGEST_MARGIN_DAYS)."""
    if days < 0:
        raise RetentionError(f"{who}: {table} retention must be 0 (forever) or positive days")
    if table == "calibrated" and days:
        floor = settings.ingest_horizon_days + INGEST_MARGIN_DAYS
        if days < floor:
            raise RetentionError(
                f"{who}: calibrated retention of {days} days is shorter than the ingest horizon "
                f"(SDS_INGEST_HORIZON_DAYS={settings.ingest_horizon_days}) plus "
                f"{INGEST_MARGIN_DAYS} days: a late reading could land where raw rows are gone "
                f"and its rollups be recomputed from it alone. Use at least {floor} days or "
                "lower SDS_INGEST_HORIZON_DAYS")


def groups(conn: psycopg.Connection, settings: Settings, table: str) -> list[Group]:
    """Every organisation that has devices with its effective horizon, then the devices of
    no organisation under the global one."""
    base = global_days(settings, table)
    column = sql.Identifier(f"{table}_retention_days")
    rows = conn.execute(sql.SQL(
        "SELECT o.id, o.name, {} FROM organisations o"
        " WHERE EXISTS (SELECT 1 FROM devices d WHERE d.org_id = o.id) ORDER BY o.name"
    ).format(column)).fetchall()
    out = [Group(r[0], r[1], r[2] if r[2] is not None else base) for r in rows]
    out.append(Group(None, "(devices of no organisation)", base))
    for g in out:
        check_days(settings, table, g.days, g.name)
    return out


def _devices_clause(group: Group) -> tuple[sql.Composable, dict[str, object]]:
    if group.org is None:
        return (sql.SQL("NOT EXISTS (SELECT 1 FROM devices d WHERE d.name = t.device)"), {})
    return (sql.SQL("t.device IN (SELECT d.name FROM devices d WHERE d.org_id = %(org)s)"),
            {"org": group.org})


def _count(conn: psycopg.Connection, table: str, where: sql.Composable,
           params: dict[str, object]) -> int:
    row = conn.execute(sql.SQL("SELECT count(*) FROM {} t WHERE {}").format(
        sql.Identifier(table), where), params).fetchone()
    return int(row[0]) if row else 0


def plan(conn: psycopg.Connection, settings: Settings, table: str,
         now: datetime | None = None, *, lock: bool = False) -> Plan:
    """What a run would remove from `table` now. With `lock` (a real run, inside its
    transaction) the chunks to drop are locked against writes until the transaction ends."""
    now = now or datetime.now(UTC)
    result = Plan(table, now)
    found = groups(conn, settings, table)
    kept = [g.days for g in found]
    longest = 0 if 0 in kept else max(kept)
    chunk_cut: datetime | None = None
    if longest:
        older = now - timedelta(days=longest)
        if lock:
            chunks = [(r[0], r[1], r[2]) for r in conn.execute(
                "SELECT chunk, range_start, range_end FROM sds_lock_raw_chunks(%s, %s)",
                (table, older))]
        else:
            chunks = _peek_chunks(conn, table, older)
        if chunks:
            chunk_cut = max(c[2] for c in chunks)
            part = Part("drop", chunk_cut, None, chunks=[c[0] for c in chunks])
            part.rows = _count(conn, table, sql.SQL("t.time < %(cut)s"), {"cut": chunk_cut})
            result.parts.append(part)
    for g in found:
        if not g.days or (longest and g.days >= longest):
            continue
        cutoff = now - timedelta(days=g.days)
        if chunk_cut is not None and cutoff <= chunk_cut:
            continue
        part = Part("delete", cutoff, chunk_cut, group=g.name, org=g.org)
        where, params = _part_where(part, g)
        part.rows = _count(conn, table, where, params)
        if part.rows:
            result.parts.append(part)
    if table == "calibrated" and result.parts:
        latest = max(p.cutoff for p in result.parts)
        row = conn.execute("SELECT count(*) FROM rollup_dirty WHERE bucket < %s",
                           (latest,)).fetchone()
        pending = int(row[0]) if row else 0
        if pending:
            result.blocked = (f"{pending} rollup buckets before {latest.isoformat()} are still "
                              "pending; raw rows are removed only once their rollups are done")
    return result


def _peek_chunks(conn: psycopg.Connection, table: str,
                 older: datetime) -> list[tuple[str, datetime, datetime]]:
    """The chunks a run would drop, without locking them (dry runs; any role that reads)."""
    has = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'").fetchone()
    if not has:
        return []
    rows = conn.execute(
        "SELECT format('%%I.%%I', chunk_schema, chunk_name), range_start, range_end"
        " FROM timescaledb_information.chunks WHERE hypertable_schema = 'public'"
        " AND hypertable_name = %s AND range_end <= %s ORDER BY range_start",
        (table, older)).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def _part_where(part: Part, group: Group | None) -> tuple[sql.Composable, dict[str, object]]:
    clauses: list[sql.Composable] = [sql.SQL("t.time < %(cut)s")]
    params: dict[str, object] = {"cut": part.cutoff}
    if part.start is not None:
        clauses.append(sql.SQL("t.time >= %(start)s"))
        params["start"] = part.start
    if group is not None:
        clause, extra = _devices_clause(group)
        clauses.append(clause)
        params.update(extra)
    return sql.SQL(" AND ").join(clauses), params


def _months(conn: psycopg.Connection, table: str, where: sql.Composable,
            params: dict[str, object]) -> list[tuple[str, datetime, int]]:
    """(device, UTC month start, rows) of the rows matching `where`."""
    rows = conn.execute(sql.SQL(
        "SELECT t.device, date_trunc('month', t.time, 'UTC') AS m, count(*) FROM {} t"
        " WHERE {} GROUP BY 1, 2 ORDER BY 1, 2").format(sql.Identifier(table), where),
        params).fetchall()
    return [(r[0], r[1], int(r[2])) for r in rows]


def _next_month(m: datetime) -> datetime:
    m = m.astimezone(UTC)
    return m.replace(year=m.year + 1, month=1) if m.month == 12 else m.replace(month=m.month + 1)


def _stamp(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _export_expr(col: Column) -> sql.Composable:
    """One exported column: text that a device chose (fw) is written spreadsheet-safe in the
    reversible form, so opening an archive in a spreadsheet runs no formula and a restore gets
    the stored text back exactly (docs/operations.md "Export first")."""
    ref = sql.Identifier(col.name)
    if col.dtype != "text":
        return ref
    return sql.SQL("{} AS {}").format(spreadsheet.text_expr(ref, reversible=True), ref)


def _export_group(conn: psycopg.Connection, table: str, root: Path, device: str,
                  month: datetime, lo: datetime | None, hi: datetime, part: Part,
                  group: Group | None, *, delete: bool) -> ExportFile:
    """COPY one device-month of `part` into its CSV.gz (header line first); with `delete` the
    rows are removed by the same statement (DELETE ... RETURNING), so the file holds exactly
    what was deleted."""
    end = min(_next_month(month), hi)
    start = max(month, lo) if lo is not None else month
    name = f"{_stamp(start)}-{_stamp(end)}.csv.gz"
    rel = Path(table) / f"device={quote(device, safe='')}" / f"month={month:%Y-%m}" / name
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    cols = sql.SQL(", ").join(_export_expr(c) for c in TABLES[table].columns)
    where, params = _part_where(part, group)
    where = sql.SQL("{} AND t.device = %(device)s AND t.time >= %(m0)s AND t.time < %(m1)s"
                    ).format(where)
    params.update(device=device, m0=month, m1=_next_month(month))
    if delete:
        inner = sql.SQL("DELETE FROM {} t WHERE {} RETURNING {}").format(
            sql.Identifier(table), where, cols)
    else:
        inner = sql.SQL("SELECT {} FROM {} t WHERE {} ORDER BY t.time").format(
            cols, sql.Identifier(table), where)
    stmt = sql.SQL("COPY ({}) TO STDOUT WITH (FORMAT csv, HEADER)").format(inner)
    tmp = target.with_name(target.name + ".tmp")
    digest = hashlib.sha256()
    with conn.cursor() as cur:
        with open(tmp, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
                    cur.copy(stmt, params) as copy:
                for block in copy:
                    gz.write(block)
            raw.flush()
            os.fsync(raw.fileno())
        rows = cur.rowcount
    os.replace(tmp, target)
    _fsync_dir(target.parent)
    with open(target, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return ExportFile(str(rel), device, f"{month:%Y-%m}", rows, digest.hexdigest())


def apply(conn: psycopg.Connection, settings: Settings, table: str, export_dir: Path,
          now: datetime | None = None) -> Result:
    """Export, then remove, what is past the horizons of `table`, inside the caller's
    transaction (commit it to make the removal stick). Nothing is removed when a plan is
    blocked (pending rollups) or the export fails."""
    result = Result(table)
    # The export prints times in the session's zone: UTC, whatever the server's default.
    conn.execute("SET LOCAL TimeZone = 'UTC'")
    chosen = plan(conn, settings, table, now, lock=True)
    if chosen.blocked:
        result.blocked = chosen.blocked
        return result
    if not chosen.parts:
        return result
    export_dir.mkdir(parents=True, exist_ok=True)
    by_name = {g.name: g for g in groups(conn, settings, table)}
    for part in chosen.parts:
        group = by_name.get(part.group) if part.group else None
        where, params = _part_where(part, group)
        exported = 0
        for device, month, rows in _months(conn, table, where, params):
            f = _export_group(conn, table, export_dir, device, month, part.start, part.cutoff,
                              part, group, delete=part.how == "delete")
            if part.how == "drop" and f.rows != rows:
                raise RetentionError(f"export of {table} {device} {f.month} wrote {f.rows} "
                                     f"rows, expected {rows}; nothing dropped")
            exported += f.rows
            result.files.append(f)
        if part.how == "drop":
            if exported != part.rows:
                raise RetentionError(f"export of {table} chunks wrote {exported} rows, "
                                     f"expected {part.rows}; nothing dropped")
            dropped = conn.execute("SELECT sds_drop_raw_chunks(%s, %s, %s)",
                                   (table, part.cutoff, part.chunks)).fetchall()
            result.dropped_chunks += [r[0] for r in dropped]
        else:
            result.deleted += exported
        result.rows += exported
    result.manifest = _write_manifest(export_dir, chosen, result)
    log.info("retention %s: %d rows exported and removed (%d chunks dropped, %d rows deleted)",
             table, result.rows, len(result.dropped_chunks), result.deleted)
    return result


def _text_columns(table: str) -> list[str]:
    return [c.name for c in TABLES[table].columns if c.dtype == "text"]


def _write_manifest(root: Path, chosen: Plan, result: Result) -> str:
    rel = Path(chosen.table) / f"manifest-{_stamp(chosen.now)}.json"
    body = {
        "table": chosen.table, "run_at": chosen.now.isoformat(), "rows": result.rows,
        "parts": [{"how": p.how, "before": p.cutoff.isoformat(),
                   "from": p.start.isoformat() if p.start else None, "group": p.group,
                   "chunks": p.chunks, "rows": p.rows} for p in chosen.parts],
        "files": [asdict(f) for f in result.files],
        "format": "CSV with a header line, gzip; values as PostgreSQL prints them; restore "
                  "with COPY ... FROM ... WITH (FORMAT csv, HEADER), then strip one leading ' "
                  "from the text columns " + ", ".join(_text_columns(chosen.table)) +
                  " where they start with one (written before a text that starts with = + - "
                  "@ TAB CR or ', so a spreadsheet runs no formula)",
        "text_columns": _text_columns(chosen.table),
    }
    target = root / rel
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(body, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    _fsync_dir(target.parent)
    return str(rel)


def _no_guard(conn: psycopg.Connection) -> None:
    return None


def run(conn: psycopg.Connection, settings: Settings, tables: Sequence[str] = RAW_TABLES,
        now: datetime | None = None, guard: Callable[[psycopg.Connection], None] = _no_guard,
        ) -> list[Result]:
    """One retention pass: each table in its own committed transaction. `guard` runs at the
    start and before the commit of each (the scheduler's leader check: raising rolls back).
    Without SDS_RETENTION_EXPORT_DIR nothing is removed."""
    if not settings.retention_export_dir:
        raise RetentionError("SDS_RETENTION_EXPORT_DIR is not set: retention removes rows only "
                             "after exporting them, so it removes nothing")
    out = []
    for table in tables:
        with conn.transaction():
            guard(conn)
            out.append(apply(conn, settings, table, Path(settings.retention_export_dir), now))
            guard(conn)
    return out


__all__ = ["RAW_TABLES", "ExportFile", "Group", "Part", "Plan", "Result", "RetentionError",
           "apply", "check_days", "global_days", "groups", "plan", "run"]
