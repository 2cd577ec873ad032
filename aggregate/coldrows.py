"""Cold readings for rollup recomputes: a recompute over months already in the cold tier (a late
reading's bucket, a relabel's, `sds aggregate backfill`) must read the cold rows with the hot
ones, or it would replace the kept rollup rows by ones made from the hot rows alone.

`stage` copies the readable files' rows of the recompute's range and devices into the session
temp table `_sds_cold` (shaped like `calibrated`), less those that also exist hot (the hot copy
wins, as in serve.coldread), and the rollup statements then read `calibrated UNION ALL
_sds_cold` (aggregate.statements, `cold=True`). When no file overlaps, nothing is staged and
the statements are the hot-only ones. Functions take `conn` first, inside the caller's
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from shared import coldfiles
from shared.coldstore import open_store

TEMP = "_sds_cold"
_TS = pa.timestamp("us", tz="UTC")
_CREATE = sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE calibrated) ON COMMIT DELETE ROWS"
                  ).format(sql.Identifier(TEMP))
_COPY = sql.SQL("COPY {} ({}) FROM STDIN").format(
    sql.Identifier(TEMP), sql.SQL(", ").join(sql.Identifier(n) for n in coldfiles.NAMES))
_HOT_WINS = sql.SQL("DELETE FROM {} c USING calibrated h WHERE h.device = c.device"
                    " AND h.time = c.time").format(sql.Identifier(TEMP))


def readings(cold: bool) -> sql.Composable:
    """The readings a recompute reads: `calibrated`, and with `cold` the cold rows staged in
    `_sds_cold` (hot copies already removed from it)."""
    if not cold:
        return sql.SQL("calibrated")
    return sql.SQL("(SELECT * FROM calibrated UNION ALL SELECT * FROM {})").format(
        sql.Identifier(TEMP))


def files(conn: psycopg.Connection, lo: datetime, hi: datetime,
          devices: Sequence[str] | None) -> list[str]:
    """Paths of the readable files with readings in [lo, hi) (of the devices' organisations,
    when devices are named)."""
    rows = conn.execute(
        "SELECT path FROM cold_files WHERE state = ANY(%s) AND first_time < %s"
        " AND last_time >= %s AND (%s::text[] IS NULL OR org_id IN"
        " (SELECT org_id FROM devices WHERE name = ANY(%s::text[]))) ORDER BY id",
        (list(coldfiles.READABLE), hi, lo, list(devices) if devices else None,
         list(devices) if devices else None)).fetchall()
    return [r[0] for r in rows]


def stage(conn: psycopg.Connection, cold_path: str | None, lo: datetime, hi: datetime,
          devices: Sequence[str] | None = None) -> bool:
    """Load the cold readings in [lo, hi) (of `devices`, None: all) into `_sds_cold`; whether
    any file overlaps (the statements must then read the union)."""
    if cold_path is None:
        return False
    found = files(conn, lo, hi, devices)
    if not found:
        return False
    conn.execute(_CREATE)
    conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(TEMP)))
    expr = (pc.field("time") >= pa.scalar(lo, _TS)) & (pc.field("time") < pa.scalar(hi, _TS))
    if devices:
        expr &= pc.field("device").isin(list(devices))
    table = open_store(cold_path).dataset(found).to_table(filter=expr)
    if table.num_rows:
        with conn.cursor() as cur, cur.copy(_COPY) as copy:
            columns = [table.column(n).to_pylist() for n in coldfiles.NAMES]
            for row in zip(*columns, strict=True):
                copy.write_row(row)
        conn.execute(_HOT_WINS)
    return True
