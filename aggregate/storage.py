"""Storage figures of the database: bytes per table (heap, indexes, TOAST) and, on request, each
organisation's share of the data tables. Read-only; used by `sds storage sizes` and by
bench.storage. Functions take `conn` first and never commit."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

DATA_TABLES = ("calibrated", "health", "hourly", "local_hourly", "daily")


@dataclass(frozen=True, slots=True)
class TableSize:
    """Bytes of one table (a hypertable's summed over its chunks) and its estimated rows."""

    name: str
    rows: int
    table_bytes: int  # heap
    index_bytes: int
    toast_bytes: int
    total_bytes: int
    hypertable: bool
    chunks: int = 0


@dataclass(frozen=True, slots=True)
class OrgShare:
    """One organisation's rows in a data table and its estimated bytes with indexes (the
    table's total in proportion to rows: chunks and indexes are shared, not per organisation)."""

    table: str
    org: str
    rows: int
    bytes_estimate: int


def _hypertables(conn: psycopg.Connection) -> set[str]:
    if not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'").fetchone():
        return set()
    rows = conn.execute("SELECT hypertable_name FROM timescaledb_information.hypertables"
                        " WHERE hypertable_schema = 'public'")
    return {r[0] for r in rows}


def table_sizes(conn: psycopg.Connection, *, exact_rows: bool = False) -> list[TableSize]:
    """Every table of the public schema, largest first. Rows are the planner's estimate
    (TimescaleDB's approximate_row_count for hypertables; ANALYZE keeps them current) unless
    `exact_rows` (a count(*) per table)."""
    hyper = _hypertables(conn)
    names = [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY c.relname")]
    out = []
    for name in names:
        ident = sql.Identifier(name)
        if name in hyper:
            row = conn.execute(
                "SELECT table_bytes, index_bytes, toast_bytes, total_bytes,"
                " (SELECT count(*) FROM timescaledb_information.chunks"
                "   WHERE hypertable_schema = 'public' AND hypertable_name = %s)"
                " FROM hypertable_detailed_size(%s::regclass)", (name, name)).fetchone()
            assert row is not None
            sizes = [int(v or 0) for v in row[:4]]
            chunks = int(row[4])
            est = conn.execute("SELECT approximate_row_count(%s::regclass)", (name,)).fetchone()
        else:
            row = conn.execute(
                "SELECT pg_relation_size(c.oid), pg_indexes_size(c.oid),"
                " coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),"
                " pg_total_relation_size(c.oid) FROM pg_class c WHERE c.oid = %s::regclass",
                (name,)).fetchone()
            assert row is not None
            sizes = [int(v or 0) for v in row]
            chunks = 0
            est = conn.execute("SELECT greatest(reltuples, 0)::bigint FROM pg_class"
                               " WHERE oid = %s::regclass", (name,)).fetchone()
        rows = int(est[0]) if est and est[0] is not None else 0
        if exact_rows:
            counted = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident)).fetchone()
            rows = int(counted[0]) if counted else 0
        table_bytes, index_bytes, toast_bytes, total_bytes = sizes
        out.append(TableSize(name, rows, table_bytes, index_bytes, toast_bytes, total_bytes,
                             hypertable=name in hyper, chunks=chunks))
    return sorted(out, key=lambda t: t.total_bytes, reverse=True)


def org_shares(conn: psycopg.Connection, tables: tuple[str, ...] = DATA_TABLES
               ) -> list[OrgShare]:
    """Rows per organisation in each data table (a full scan of each) and the bytes that
    share of rows stands for. Devices of no organisation show as '(none)'."""
    totals = {t.name: t for t in table_sizes(conn)}
    out = []
    for table in tables:
        rows = conn.execute(sql.SQL(
            "SELECT coalesce(o.name, '(none)'), count(*) FROM {} t"
            " LEFT JOIN devices d ON d.name = t.device LEFT JOIN organisations o"
            " ON o.id = d.org_id GROUP BY 1 ORDER BY 2 DESC").format(sql.Identifier(table)))
        counted = [(r[0], int(r[1])) for r in rows]
        all_rows = sum(n for _, n in counted) or 1
        total = totals[table].total_bytes if table in totals else 0
        out += [OrgShare(table, name, n, round(total * n / all_rows)) for name, n in counted]
    return out


def human(n: float) -> str:
    """Bytes as B, kB, MB, GB, TB (powers of 1024, one decimal)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


__all__ = ["DATA_TABLES", "OrgShare", "TableSize", "human", "org_shares", "table_sizes"]
