"""Retention over the cold tier: readings past an organisation's calibrated horizon that are in
cold files are exported exactly as hot ones are (CSV.gz by device and month, the same columns
and text forms, listed with rows and SHA-256 in a manifest; aggregate.lifecycle) and then
removed by rewriting each file without them (aggregate.coldrewrite: a month wholly past the
horizon leaves no file). The export is fsynced and in its manifest before the rewrite's swap
commits; a kill in between leaves the files, which the next run writes again, and the rows,
which it removes then (docs/operations.md "Data lifecycle" and "Cold tier").

Held back, like the hot part, while rollup buckets before the horizon are pending. Functions
take `conn` (autocommit) first.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from aggregate import coldmove, lifecycle
from aggregate.coldrewrite import Checkpoint, live_files, read_checked, rewrite
from shared import coldfiles
from shared.coldstore import ColdStore, open_store
from shared.columns import TABLES
from shared.config import Settings

log = logging.getLogger(__name__)

_TEMP = "_sds_cold_export"
_TS = pa.timestamp("us", tz="UTC")


def _past(table: pa.Table, cutoff: datetime) -> pa.Array:
    return pc.less(table.column("time"), pa.scalar(cutoff, _TS))


def _export(conn: psycopg.Connection, root: Path, rows: pa.Table, file_id: int,
            ) -> list[lifecycle.ExportFile]:
    """The rows as CSV.gz files by device and month, printed by PostgreSQL as the hot export
    prints them (they pass through a session temp table shaped like `calibrated`)."""
    ident = sql.Identifier(_TEMP)
    conn.execute(sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE calibrated)").format(ident))
    conn.execute(sql.SQL("DELETE FROM {}").format(ident))
    names = sql.SQL(", ").join(sql.Identifier(n) for n in coldfiles.NAMES)
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(
            ident, names)) as copy:
        for row in zip(*(rows.column(n).to_pylist() for n in coldfiles.NAMES), strict=True):
            copy.write_row(row)
    cols = sql.SQL(", ").join(lifecycle._export_expr(c) for c in TABLES["calibrated"].columns)
    groups = conn.execute(sql.SQL(
        "SELECT device, date_trunc('month', time, 'UTC'), min(time), max(time) FROM {}"
        " GROUP BY 1, 2 ORDER BY 1, 2").format(ident)).fetchall()
    out = []
    for device, month, first, last in groups:
        name = f"{lifecycle._stamp(first)}-{lifecycle._stamp(last)}-cold{file_id}.csv.gz"
        rel = (Path("calibrated") / f"device={quote(device, safe='')}"
               / f"month={month:%Y-%m}" / name)
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        stmt = sql.SQL("COPY (SELECT {} FROM {} t WHERE t.device = %s AND t.time >= %s"
                       " AND t.time < %s ORDER BY t.time) TO STDOUT WITH (FORMAT csv, HEADER)"
                       ).format(cols, ident)
        tmp = target.with_name(target.name + ".tmp")
        with conn.cursor() as cur:
            with open(tmp, "wb") as raw:
                with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, cur.copy(
                        stmt, (device, month, lifecycle._next_month(month))) as copy:
                    for block in copy:
                        gz.write(block)
                raw.flush()
                os.fsync(raw.fileno())
            count = cur.rowcount
        os.replace(tmp, target)
        lifecycle._fsync_dir(target.parent)
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        out.append(lifecycle.ExportFile(str(rel), device, f"{month:%Y-%m}", count, digest))
    conn.execute(sql.SQL("DELETE FROM {}").format(ident))
    return out


def _manifest(root: Path, now: datetime, org: object, cutoff: datetime, file_rel: str,
              files: list[lifecycle.ExportFile]) -> str:
    rel = Path("calibrated") / f"manifest-cold-{lifecycle._stamp(now)}-{len(files)}-" \
        f"{hashlib.sha256(file_rel.encode()).hexdigest()[:12]}.json"
    body = {"table": "calibrated", "tier": "cold", "run_at": now.isoformat(),
            "organisation": str(org), "before": cutoff.isoformat(), "cold_file": file_rel,
            "rows": sum(f.rows for f in files), "files": [asdict(f) for f in files],
            "format": "as the hot export's manifests (CSV with a header line, gzip)",
            "text_columns": [c.name for c in TABLES["calibrated"].columns
                             if c.dtype == "text"]}
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(body, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    lifecycle._fsync_dir(target.parent)
    return str(rel)


def apply(conn: psycopg.Connection, settings: Settings, export_dir: Path,
          now: datetime | None = None, checkpoint: Checkpoint = lambda _s: None,
          ) -> lifecycle.Result:
    """Export, then remove, the cold readings past each organisation's calibrated horizon."""
    now = now or datetime.now(UTC)
    result = lifecycle.Result("calibrated (cold)")
    store = open_store(settings.cold_path)
    zone = conn.execute("SHOW TimeZone").fetchone()
    # The export prints times in the session's zone: UTC, as the hot export's (SET LOCAL there).
    conn.execute("SET TimeZone = 'UTC'")
    try:
        _apply(conn, settings, store, export_dir, now, checkpoint, result)
    finally:
        conn.execute(sql.SQL("SET TimeZone = {}").format(sql.Literal(zone[0] if zone else "UTC")))
    return result


def _apply(conn: psycopg.Connection, settings: Settings, store: ColdStore, export_dir: Path,
           now: datetime, checkpoint: Checkpoint, result: lifecycle.Result) -> None:
    with coldmove.holding_lock(conn):
        coldmove.recover(conn, store, checkpoint)
        for group in lifecycle.groups(conn, settings, "calibrated"):
            if group.org is None or not group.days:
                continue
            cutoff = now - timedelta(days=group.days)
            pending = conn.execute("SELECT count(*) FROM rollup_dirty WHERE bucket < %s",
                                   (cutoff,)).fetchone()
            if pending and pending[0]:
                result.blocked = (f"{pending[0]} rollup buckets before {cutoff.isoformat()} "
                                  "are still pending")
                return
            months = conn.execute(
                "SELECT DISTINCT month FROM cold_files WHERE org_id = %s AND state = 'live'"
                " AND first_time < %s ORDER BY 1", (group.org, cutoff)).fetchall()
            for (month,) in months:
                _one_month(conn, store, export_dir, group.org, month, cutoff, now, result,
                           checkpoint)


def _one_month(conn: psycopg.Connection, store: ColdStore, export_dir: Path, org: object,
               month: object, cutoff: datetime, now: datetime, result: lifecycle.Result,
               checkpoint: Checkpoint) -> None:
    files = live_files(conn, org, month)  # type: ignore[arg-type]
    for file_id, rel, checksum, rows in files:
        table = read_checked(store, rel, checksum, rows)
        gone = table.filter(_past(table, cutoff))
        if gone.num_rows:
            exported = _export(conn, export_dir, gone, file_id)
            result.files += exported
            result.manifest = _manifest(export_dir, now, org, cutoff, rel, exported)
    done = rewrite(conn, store, org, month, merge_hot=False,  # type: ignore[arg-type]
                   change=lambda t: t.filter(pc.invert(_past(t, cutoff))),
                   checkpoint=checkpoint)
    if done is None:
        raise lifecycle.RetentionError(f"cold files of {month} changed during retention; "
                                       "the next run does it again")
    removed = sum(f[3] for f in files) - done.rows
    result.rows += removed
    result.deleted += removed


def run(conn: psycopg.Connection, settings: Settings, now: datetime | None = None,
        guard: Callable[[psycopg.Connection], None] = lambda _c: None,
        checkpoint: Checkpoint = lambda _s: None) -> lifecycle.Result:
    """The cold part of a retention pass (after aggregate.lifecycle.run's hot part), on `conn`
    switched to autocommit for its length: each rewrite step commits on its own."""
    if not settings.retention_export_dir:
        raise lifecycle.RetentionError("SDS_RETENTION_EXPORT_DIR is not set")
    conn.commit()
    was = conn.autocommit
    conn.autocommit = True
    try:
        guard(conn)
        return apply(conn, settings, Path(settings.retention_export_dir), now, checkpoint)
    finally:
        conn.autocommit = was
