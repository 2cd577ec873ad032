"""`sds aggregate ...`: operator commands for the rollups (run once, backfill, status, and
re-bucketing a location after its time zone changed)."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from uuid import UUID

import click
import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from tqdm import tqdm

from admin import context
from aggregate import jobs, rollups
from aggregate.leader import LOCK_NAME
from shared import dirty, locks
from shared.config import Settings
from shared.db import ROLE_AGGREGATE, make_pool
from shared.errors import ServiceError, UnknownLocation
from shared.timeutil import format_lag, format_utc_z, parse_instant

_settings = context.settings_from_env
CLI_NAME = "sds-aggregate-cli"  # application_name of the command's sessions


def _connect(settings: Settings) -> AbstractContextManager[psycopg.Connection]:
    return context.connection(settings, name=CLI_NAME)


def _instant(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_instant(value, name=name)
    except ServiceError as exc:
        raise click.BadParameter(exc.message, param_hint=f"--{name}") from None


@click.group("aggregate")
def aggregate() -> None:
    """Rollups of 5-minute readings into hourly, local_hourly and daily."""


@aggregate.command("run")
def run() -> None:
    """Process every pending dirty mark now, once (safe beside a running scheduler)."""
    settings = _settings()
    pool = make_pool(settings, name="sds-aggregate-cli", role=ROLE_AGGREGATE)
    try:
        done = jobs.run_all(pool, settings, runner=f"cli:{jobs.runner_name()}")
    finally:
        pool.close()
    for table, n in done.items():
        click.echo(f"{table}: {n} buckets recomputed")


@aggregate.command("backfill")
@click.option("--table", "tables", multiple=True, type=click.Choice(rollups.TABLE_ORDER),
              help="Rollup table (repeatable; default: all three)")
@click.option("--device", "devices", multiple=True, help="Device name (repeatable; default: all)")
@click.option("--from", "start", required=True, help="Start, ISO date or UTC instant")
@click.option("--to", "end", default=None, help="End (exclusive), ISO date or instant; default now")
@click.option("--chunk-days", default=7, show_default=True, type=click.IntRange(1, 366),
              help="Days recomputed per transaction")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 8),
              help="Devices split between parallel workers (one database connection each)")
def backfill(tables: tuple[str, ...], devices: tuple[str, ...], start: str, end: str | None,
             chunk_days: int, workers: int) -> None:
    """Recompute every bucket with readings between --from and --to from the raw rows."""
    settings = _settings()
    lo = _instant(start, "from")
    hi = _instant(end, "to") or datetime.now(UTC)
    assert lo is not None
    if hi <= lo:
        raise click.BadParameter("must be after --from", param_hint="--to")
    chosen = tables or rollups.TABLE_ORDER
    # One step per piece and worker; tqdm's ETA follows the pieces, the postfix the readings.
    steps = workers * len(jobs.chunks(lo, hi, chunk_days))
    started = time.monotonic()
    read = {"readings": 0}
    with _connect(settings) as conn, tqdm(total=steps, unit="piece") as bar:
        def progress(p: jobs.Progress) -> None:
            read["readings"] += p.readings
            rate = read["readings"] / max(time.monotonic() - started, 1e-6)
            bar.set_description(f"to {p.upto:%Y-%m-%d}")
            bar.set_postfix_str(f"{read['readings']:,} readings, {rate:,.0f} readings/s")
            bar.update(1)

        written = jobs.backfill(conn, tables=chosen, start=lo, end=hi,
                                devices=list(devices) or None,
                                low_quality_pct=settings.low_quality_pct,
                                chunk_days=chunk_days, progress=progress, workers=workers,
                                connect=lambda: context.plain_connection(settings, name=CLI_NAME),
                                cold_path=settings.cold_path)
    click.echo(f"{written} rows written")


@aggregate.command("mark-location")
@click.argument("location")
def mark_location(location: str) -> None:
    """Mark all local buckets of LOCATION (id) dirty, e.g. after its tz_name changed."""
    settings = _settings()
    try:
        loc = UUID(location)
    except ValueError:
        raise click.BadParameter("must be a location id (uuid)", param_hint="LOCATION") from None
    with _connect(settings) as conn:
        try:
            n = dirty.mark_location(conn, loc)
        except UnknownLocation as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"{n} buckets marked; the next run recomputes them")


def status_report(conn: psycopg.Connection) -> dict[str, list[dict[str, object]]]:
    """Lag and pending marks per table, last run and error per job, and the current leader."""
    with conn.cursor(row_factory=dict_row) as cur:
        tables = []
        for table in rollups.TABLE_ORDER:
            cur.execute(
                "SELECT count(*) AS pending, min(marked_at) AS oldest_mark,"
                " min(bucket) AS oldest_bucket FROM rollup_dirty WHERE rollup = %s", (table,))
            marks = cur.fetchone() or {}
            cur.execute(sql.SQL(
                "SELECT max(time) AS newest_bucket, max(update_time) AS last_update FROM {}"
            ).format(sql.Identifier(table)))
            rows = cur.fetchone() or {}
            cur.execute("SELECT now() - %s::timestamptz AS lag", (marks.get("oldest_mark"),))
            lag = (cur.fetchone() or {}).get("lag")
            tables.append({"table": table, "pending_marks": marks.get("pending", 0),
                           "lag": lag, "oldest_pending_bucket": marks.get("oldest_bucket"),
                           "newest_bucket": rows.get("newest_bucket"),
                           "last_update": rows.get("last_update")})
        cur.execute("SELECT job, last_start, last_ok, last_error, last_error_at, buckets,"
                    " total_runs FROM aggregate_runs ORDER BY job")
        runs = cur.fetchall()
        cur.execute(
            "SELECT DISTINCT ON (job) job, runner, started, finished, ok FROM job_runs"
            " ORDER BY job, started DESC")
        last = cur.fetchall()
        cur.execute(
            "SELECT pid, client_addr::text AS client, backend_start FROM pg_stat_activity"
            " WHERE pid = ANY(%s)", (locks.holders(conn, LOCK_NAME),))
        leader = cur.fetchall()
    return {"tables": tables, "jobs": runs, "last_runs": last, "leader": leader}


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return format_utc_z(value)
    if isinstance(value, timedelta):
        return format_lag(value)
    return str(value)


@aggregate.command("status")
def status() -> None:
    """Lag per table, pending dirty marks, and the last run and error of each job."""
    settings = _settings()
    with _connect(settings) as conn:
        report = status_report(conn)
    click.echo(f"{'table':<13} {'pending':>8} {'lag':>16} {'oldest pending bucket':>22} "
               f"{'newest bucket':>22} {'last update':>22}")
    for t in report["tables"]:
        click.echo(f"{t['table']:<13} {t['pending_marks']:>8} {_fmt(t['lag']):>16} "
                   f"{_fmt(t['oldest_pending_bucket']):>22} {_fmt(t['newest_bucket']):>22} "
                   f"{_fmt(t['last_update']):>22}")
    click.echo("")
    last = {r["job"]: r for r in report["last_runs"]}
    if not report["jobs"]:
        click.echo("no job has run yet")
    for j in report["jobs"]:
        lr = last.get(j["job"], {})
        click.echo(f"job {j['job']}: last start {_fmt(j['last_start'])}, last ok "
                   f"{_fmt(j['last_ok'])}, {j['buckets']} buckets, {j['total_runs']} runs, "
                   f"by {_fmt(lr.get('runner'))}")
        if j["last_error"]:
            click.echo(f"  last error at {_fmt(j['last_error_at'])}: {j['last_error']}")
    leader = report["leader"]
    click.echo("scheduler leader: " + (
        f"backend pid {leader[0]['pid']} since {_fmt(leader[0]['backend_start'])}"
        if leader else "none (no scheduler running)"))
