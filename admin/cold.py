"""`sds cold move|status`: the cold tier of `calibrated` readings (aggregate.coldmove;
docs/operations.md "Cold tier")."""

from __future__ import annotations

import os
import signal
from datetime import datetime

import click
import psycopg

from admin import context
from aggregate import coldmove
from shared import coldfiles, coldstore

# A failpoint for the chaos test (tests/aggregate/test_coldmove.py): the mover kills itself
# with SIGKILL right after the named step, as a crash or an OOM kill would.
FAILPOINT_ENV = "SDS_COLD_FAILPOINT"


def _checkpoint(step: str) -> None:
    if os.environ.get(FAILPOINT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


@click.group("cold")
def cold_cli() -> None:
    """The cold tier: calibrated readings older than SDS_HOT_DAYS as Parquet files."""


@cold_cli.command("move")
@click.option("--hot-days", type=click.IntRange(min=1), default=None,
              help="Override SDS_HOT_DAYS for this run.")
def move(hot_days: int | None) -> None:
    """Move whole months older than the hot window into Parquet files (finishing or undoing
    what an interrupted run left first)."""
    settings = context.settings_from_env()
    days = hot_days or settings.hot_days
    if days <= 0:
        raise click.ClickException("the cold tier is off: set SDS_HOT_DAYS (or --hot-days)")
    with context.connection(settings, name="sds-cold-mover", autocommit=True) as conn:
        moved = coldmove.move(conn, hot_days=days, cold_path=settings.cold_path,
                              checkpoint=_checkpoint)
    for m in moved:
        click.echo(f"{m.org} {m.month:%Y-%m}: {m.rows} rows, {m.bytes} bytes -> {m.path}")
    click.echo(f"{len(moved)} file(s) made live")


@cold_cli.command("status")
def status() -> None:
    """Files and bytes of the cold tier, and the oldest hot reading."""
    settings = context.settings_from_env()
    with context.connection(settings, name="sds-cold-status") as conn:
        shown = coldmove.status(conn)
    by_state = shown["by_state"]
    assert isinstance(by_state, dict)
    for state in ("live", "verified", "pending"):
        files, size, rows = by_state.get(state, (0, 0, 0))
        click.echo(f"{state}: {files} files, {size} bytes, {rows} rows")
    click.echo(f"path: {settings.cold_path}; hot days: {settings.hot_days or 'off'}")
    oldest = shown["oldest_hot"]
    click.echo(f"oldest hot reading: {oldest.date() if isinstance(oldest, datetime) else 'none'}")


def catalogue_problems(conn: psycopg.Connection, store: coldstore.ColdStore,
                       ) -> list[tuple[int, str, str, str]]:
    """(id, path, state, problem) of each readable catalogue entry whose file is not in the
    store, or not of the recorded size: readings a page would miss (after a restore that did
    not bring the files back, a lost disk, a file deleted by hand)."""
    problems = []
    for file_id, rel, state, size in conn.execute(
            "SELECT id, path, state, bytes FROM cold_files WHERE state = ANY(%s) ORDER BY id",
            (list(coldfiles.READABLE),)).fetchall():
        found = store.size(rel)
        if found is None:
            problems.append((file_id, rel, state, "missing"))
        elif size is not None and found != size:
            problems.append((file_id, rel, state, f"{found} bytes, catalogue says {size}"))
    return problems


@cold_cli.command("check")
def check() -> None:
    """Every readable file of the catalogue is in the store at its recorded size (exit status
    3 naming each that is not); run it after a restore (docs/operations.md "Cold tier")."""
    settings = context.settings_from_env()
    store = coldstore.open_store(settings.cold_path)
    with context.connection(settings, name="sds-cold-check") as conn:
        problems = catalogue_problems(conn, store)
        listed = conn.execute("SELECT count(*) FROM cold_files WHERE state = ANY(%s)",
                              (list(coldfiles.READABLE),)).fetchone()
    click.echo(f"store: {store.describe()}")
    for file_id, rel, state, problem in problems:
        click.echo(f"MISSING cold file {file_id} ({state}) {store.location(rel)}: {problem}",
                   err=True)
    total = listed[0] if listed else 0
    if problems:
        click.echo(f"{len(problems)} of {total} cold files are not readable: their readings "
                   "are missing from /data (restore them: docs/operations.md \"Cold tier\")",
                   err=True)
        raise SystemExit(3)
    click.echo(f"ok: all {total} cold files present")
