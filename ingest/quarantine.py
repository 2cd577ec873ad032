"""Quarantine housekeeping: the ingester's hourly retention and the operator's
`sds quarantine purge|stats` commands.

Retention (SDS_QUARANTINE_RETENTION_DAYS) runs in the leading ingester through the database
function `sds_quarantine_purge` (migration 0063): the ingester's role may only insert into
quarantine, and the function deletes by age alone, never rows younger than a day, in short
transactions. Operators purge as the database owner, with filters and without those limits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import click
import psycopg

from shared import clitools, db
from shared.config import Settings

log = logging.getLogger(__name__)

RETENTION_EVERY = 3600.0  # seconds between retention passes of the ingester
RETENTION_FIRST = 60.0  # first pass this long after the ingester starts leading
CHUNK = 10_000  # rows per delete transaction


def retention_pass(conn: psycopg.Connection, keep_days: int) -> int:
    """Delete quarantine rows older than `keep_days` (>= 1) in chunks; the number deleted.
    `conn` is in autocommit mode, so each chunk is its own short transaction."""
    total = 0
    while True:
        row = conn.execute("SELECT sds_quarantine_purge(%s, %s)", (keep_days, CHUNK)).fetchone()
        n = int(row[0]) if row else 0
        total += n
        if n < CHUNK:
            return total


def purge(conn: psycopg.Connection, *, before: datetime, device: str | None = None,
          reason: str | None = None, dry_run: bool = False) -> int:
    """Delete (or with `dry_run` count) quarantine rows received before `before`, optionally of
    one device and/or reason; committed chunk by chunk (`conn` in autocommit mode)."""
    where = "received_at < %(before)s"
    if device is not None:
        where += " AND device = %(device)s"
    if reason is not None:
        where += " AND reason = %(reason)s"
    params = {"before": before, "device": device, "reason": reason, "chunk": CHUNK}
    if dry_run:
        row = conn.execute(f"SELECT count(*) FROM quarantine WHERE {where}",  # nosec B608  fixed fragments
                           params).fetchone()
        return int(row[0]) if row else 0
    total = 0
    while True:
        cur = conn.execute(
            f"DELETE FROM quarantine WHERE id IN (SELECT id FROM quarantine WHERE {where}"  # nosec B608  fixed fragments
            " ORDER BY received_at LIMIT %(chunk)s)", params)
        total += cur.rowcount
        if cur.rowcount < CHUNK:
            return total


def stats(conn: psycopg.Connection) -> list[tuple[str | None, str, int, int, datetime,
                                                   datetime]]:
    """(device, reason, rows, payload+detail bytes, oldest, newest), largest first."""
    return conn.execute(
        "SELECT device, reason, count(*), sum(octet_length(payload) + octet_length(detail)),"
        " min(received_at), max(received_at) FROM quarantine GROUP BY device, reason"
        " ORDER BY 4 DESC, 3 DESC").fetchall()


class Retention:
    """The ingester's hourly retention pass, in a daemon thread, while it leads."""

    def __init__(self, settings: Settings, *, stopped: threading.Event | None = None,
                 on_deleted: Callable[[int], None] | None = None) -> None:
        self.settings = settings
        self._stopped = stopped or threading.Event()
        self._on_deleted = on_deleted
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (nothing when retention is off)."""
        if self.settings.quarantine_retention_days <= 0:
            return
        self._thread = threading.Thread(target=self._loop, name="quarantine-retention",
                                        daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the thread after `stopped` was set."""
        if self._thread is not None:
            self._thread.join(timeout)

    def run_once(self) -> int:
        """One pass on a connection of its own; the number of rows deleted."""
        conn = db.connect(self.settings, name="sds-ingest-retention", autocommit=True,
                          role=db.ROLE_INGEST, connect_timeout=10,
                          server={"statement_timeout": 60000})
        try:
            return retention_pass(conn, self.settings.quarantine_retention_days)
        finally:
            db.close_quietly(conn)

    def _loop(self) -> None:
        wait = RETENTION_FIRST
        while not self._stopped.wait(wait):
            wait = RETENTION_EVERY
            try:
                deleted = self.run_once()
            except psycopg.Error as exc:  # the next pass tries again; ingest goes on
                log.warning("quarantine retention failed (retrying in an hour): %s",
                            str(exc).strip() or type(exc).__name__)
                continue
            if deleted:
                log.info("quarantine retention: deleted %d rows older than %d days", deleted,
                         self.settings.quarantine_retention_days)
            if self._on_deleted is not None:
                self._on_deleted(deleted)


# ---- operator commands (`sds quarantine ...`) ----------------------------------------------------

def _connect() -> psycopg.Connection:
    settings = clitools.settings_from_env()
    try:
        return db.connect(settings, autocommit=True)
    except psycopg.OperationalError as exc:
        raise click.ClickException(
            f"cannot connect to the database (SDS_DATABASE_URL): {exc}".strip()) from None


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
    """Rows and bytes in quarantine per device and reason, largest first."""
    with _connect() as conn:
        rows = stats(conn)
    click.echo(f"{'device':24} {'reason':24} {'rows':>10} {'bytes':>12}  oldest .. newest")
    for device, reason, n, size, oldest, newest in rows:
        click.echo(f"{device or '-':24} {reason:24} {n:>10} {size:>12}  "
                   f"{oldest:%Y-%m-%d %H:%M} .. {newest:%Y-%m-%d %H:%M}")
