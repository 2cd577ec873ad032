"""`sds storage ...`: how big the database is, and the raw data retention (sizes, policy,
retention with --dry-run). The scheduler runs the same retention every
SDS_RETENTION_INTERVAL seconds; this command runs it now."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

import click
import psycopg
from psycopg import sql

from admin import cold, context
from aggregate import coldretention, lifecycle, storage
from people import accounts
from shared.config import Settings

_settings = context.settings_from_env


def _connect(settings: Settings) -> AbstractContextManager[psycopg.Connection]:
    return context.connection(settings, name="sds-storage-cli",
                               errors=(lifecycle.RetentionError,))


@click.group("storage")
def storage_cli() -> None:
    """Database sizes and raw data retention (docs/operations.md "Data lifecycle")."""


@storage_cli.command("sizes")
@click.option("--per-org", is_flag=True,
              help="Also each organisation's rows in the data tables (scans them: slow on "
                   "large tables) and the bytes that share stands for.")
@click.option("--exact", is_flag=True, help="Count rows instead of the planner's estimate.")
def sizes(per_org: bool, exact: bool) -> None:
    """Bytes per table: heap, indexes, TOAST and total, largest first."""
    settings = _settings()
    with _connect(settings) as conn:
        found = storage.table_sizes(conn, exact_rows=exact)
        shares = storage.org_shares(conn) if per_org else []
    h = storage.human
    click.echo(f"{'table':<22} {'rows':>12} {'heap':>10} {'indexes':>10} {'toast':>9} "
               f"{'total':>10}  chunks")
    for t in found:
        click.echo(f"{t.name:<22} {t.rows:>12} {h(t.table_bytes):>10} {h(t.index_bytes):>10} "
                   f"{h(t.toast_bytes):>9} {h(t.total_bytes):>10}  "
                   f"{t.chunks if t.hypertable else '-'}")
    click.echo(f"{'all tables':<22} {'':>12} {'':>10} {'':>10} {'':>9} "
               f"{h(sum(t.total_bytes for t in found)):>10}")
    if shares:
        click.echo("\nper organisation (bytes: the table's total in proportion to rows)")
        click.echo(f"{'table':<14} {'organisation':<30} {'rows':>12} {'~bytes':>10}")
        for s in shares:
            click.echo(f"{s.table:<14} {s.org[:30]:<30} {s.rows:>12} {h(s.bytes_estimate):>10}")


@storage_cli.command("policy")
@click.option("--org", "org_name", default=None, help="Organisation name or id to change.")
@click.option("--calibrated-days", type=int, default=None,
              help="Raw readings kept this many days for the organisation.")
@click.option("--health-days", type=int, default=None,
              help="Health reports kept this many days for the organisation.")
@click.option("--clear", is_flag=True, help="Back to the global settings for the organisation.")
def policy(org_name: str | None, calibrated_days: int | None, health_days: int | None,
           clear: bool) -> None:
    """Show every organisation's retention, or change one organisation's."""
    settings = _settings()
    with _connect(settings) as conn:
        if org_name is not None:
            oid = accounts.org_id(conn, org_name)
            if clear:
                conn.execute("UPDATE organisations SET calibrated_retention_days = NULL,"
                             " health_retention_days = NULL WHERE id = %s", (oid,))
            for table, days in (("calibrated", calibrated_days), ("health", health_days)):
                if days is None:
                    continue
                lifecycle.check_days(settings, table, days, f"--{table}-days")
                conn.execute(sql.SQL("UPDATE organisations SET {} = %s WHERE id = %s").format(
                    sql.Identifier(f"{table}_retention_days")), (days or None, oid))
        elif clear or calibrated_days is not None or health_days is not None:
            raise click.UsageError("--org is required to change a policy")
        rows = conn.execute("SELECT name, calibrated_retention_days, health_retention_days"
                            " FROM organisations ORDER BY name").fetchall()

    def shown(days: int | None, table: str) -> str:
        if days is None:
            base = lifecycle.global_days(settings, table)
            return f"{base or 'forever'} (global)"
        return str(days)

    click.echo(f"global: calibrated {settings.retention_calibrated_days or 'forever'}, "
               f"health {settings.retention_health_days or 'forever'} (days); export to "
               f"{settings.retention_export_dir or '(unset: retention removes nothing)'}")
    click.echo(f"{'organisation':<30} {'calibrated days':>18} {'health days':>18}")
    for name, cal, hea in rows:
        click.echo(f"{name[:30]:<30} {shown(cal, 'calibrated'):>18} {shown(hea, 'health'):>18}")


@storage_cli.command("retention")
@click.option("--dry-run", is_flag=True, help="Show what would be exported and removed.")
@click.option("--table", "tables", multiple=True, type=click.Choice(lifecycle.RAW_TABLES),
              help="Only this table (repeatable; default both).")
@click.option("--export-dir", type=click.Path(path_type=Path), default=None,
              help="Export here instead of SDS_RETENTION_EXPORT_DIR.")
def retention(dry_run: bool, tables: tuple[str, ...], export_dir: Path | None) -> None:
    """Export, then remove, raw rows past their retention horizon (rollups are kept)."""
    settings = _settings()
    if export_dir is not None:
        settings = settings.replace(retention_export_dir=str(export_dir))
    chosen = tables or lifecycle.RAW_TABLES
    with _connect(settings) as conn:
        if dry_run:
            for table in chosen:
                p = lifecycle.plan(conn, settings, table)
                click.echo(f"{table}: {p.rows} rows would be exported and removed"
                           + (f" (held back: {p.blocked})" if p.blocked else ""))
                for part in p.parts:
                    what = (f"drop {len(part.chunks)} chunks" if part.how == "drop"
                            else f"delete rows of {part.group}")
                    since = f" from {part.start.isoformat()}" if part.start else ""
                    click.echo(f"  {what}: {part.rows} rows before "
                               f"{part.cutoff.isoformat()}{since}")
            conn.rollback()
            return
        results = lifecycle.run(conn, settings, chosen)
        if "calibrated" in chosen:  # and readings in the cold tier (aggregate/coldretention.py)
            results.append(coldretention.run(conn, settings, checkpoint=cold.checkpoint))
    for r in results:
        if r.blocked:
            click.echo(f"{r.table}: nothing removed, held back: {r.blocked}")
            continue
        click.echo(f"{r.table}: {r.rows} rows exported and removed "
                   f"({len(r.dropped_chunks)} chunks dropped, {r.deleted} rows deleted, "
                   f"{len(r.files)} files)"
                   + (f"; manifest {Path(settings.retention_export_dir or '') / r.manifest}"
                      if r.manifest else ""))
