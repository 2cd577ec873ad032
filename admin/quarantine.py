"""`sds quarantine purge|stats`: quarantined MQTT input, its sizes and purging, as the database
owner (ingest/quarantine.py holds the queries)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta

import click
import psycopg

from admin.context import connection, settings_from_env
from ingest.quarantine import purge, stats, unkept_stats


def _connect() -> AbstractContextManager[psycopg.Connection]:
    # Autocommit: purge deletes in chunks, each its own transaction.
    return connection(settings_from_env(), name="sds-quarantine-cli", autocommit=True)


@click.group("quarantine")
def quarantine() -> None:
    """Quarantined MQTT input: sizes and purging."""


@quarantine.command("purge")
@click.option("--older-than-days", type=click.FloatRange(min=0), required=True,
              help="Delete rows received more than this many days ago (0: all).")
@click.option("--device", default=None, help="Only this device's rows.")
@click.option("--reason", default=None, help="Only rows with this reason code.")
@click.option("--dry-run", is_flag=True, help="Count the rows, delete nothing.")
def purge_command(older_than_days: float, device: str | None, reason: str | None,
                  dry_run: bool) -> None:
    """Delete quarantine rows by age, device and reason (in chunks of 10,000)."""
    before = datetime.now(UTC) - timedelta(days=older_than_days)
    with _connect() as conn:
        n = purge(conn, before=before, device=device, reason=reason, dry_run=dry_run)
    what = "would delete" if dry_run else "deleted"
    click.echo(f"{what} {n} quarantine rows received before {before:%Y-%m-%dT%H:%M:%SZ}"
               + (f" of device {device}" if device else "")
               + (f" with reason {reason}" if reason else ""))


@quarantine.command("stats")
def stats_command() -> None:
    """Rows and bytes in quarantine per device and reason, largest first; then what was
    counted, not kept, over a device's budget."""
    with _connect() as conn:
        rows = stats(conn)
        unkept = unkept_stats(conn)
    click.echo(f"{'device':24} {'reason':24} {'rows':>10} {'bytes':>12}  oldest .. newest")
    for device, reason, n, size, oldest, newest in rows:
        click.echo(f"{device or '-':24} {reason:24} {n:>10} {size:>12}  "
                   f"{oldest:%Y-%m-%d %H:%M} .. {newest:%Y-%m-%d %H:%M}")
    if unkept:
        click.echo("\nNot kept (over the device's quarantine budget; counted only):")
        click.echo(f"{'device':24} {'reason':24} {'rejections':>10} {'bytes':>12}  hours")
        for device, reason, n, size, first, last in unkept:
            click.echo(f"{device:24} {reason:24} {n:>10} {size:>12}  "
                       f"{first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M}")
