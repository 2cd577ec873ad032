"""`sds cold move|status`: the cold tier of `calibrated` readings (aggregate.coldmove;
docs/operations.md "Cold tier")."""

from __future__ import annotations

import os
import signal
import sys
from datetime import datetime

import click
import psycopg

from admin import context
from aggregate import coldmove, coldrelabel, coldstatus, storage
from shared import coldfiles, coldstore
from shared.coldstore import open_store

# A failpoint for the chaos test (tests/aggregate/test_coldmove.py): the mover kills itself
# with SIGKILL right after the named step, as a crash or an OOM kill would.
FAILPOINT_ENV = "SDS_COLD_FAILPOINT"


def checkpoint(step: str) -> None:
    """The failpoint: SIGKILL this process right after `step` when SDS_COLD_FAILPOINT names it
    (the mover's, a rewrite's and retention's steps: aggregate.coldmove/coldrewrite)."""
    if os.environ.get(FAILPOINT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


@click.group("cold")
def cold_cli() -> None:
    """The cold tier: calibrated readings older than SDS_HOT_DAYS as Parquet files."""


@cold_cli.command("move")
@click.option("--hot-days", type=click.IntRange(min=1), default=None,
              help="Override SDS_HOT_DAYS for this run.")
def move(hot_days: int | None) -> None:
    """What the scheduler's cold job does, now: queued relabels of cold readings, then move
    whole months older than the hot window into Parquet files and compact months with late
    readings or several files (finishing or undoing what an interrupted run left first)."""
    settings = context.settings_from_env()
    days = hot_days or settings.hot_days
    if days <= 0:
        raise click.ClickException("the cold tier is off: set SDS_HOT_DAYS (or --hot-days)")
    with context.connection(settings, name="sds-cold-mover", autocommit=True) as conn:
        relabelled = coldrelabel.run(conn, cold_path=settings.cold_path, checkpoint=checkpoint)
        moved = coldmove.move(conn, hot_days=days, cold_path=settings.cold_path,
                              checkpoint=checkpoint)
    if relabelled:
        click.echo(f"{relabelled} month file(s) rewritten for queued relabels")
    for m in moved:
        how = "compacted" if m.compacted else "moved"
        click.echo(f"{m.org} {m.month:%Y-%m}: {how}, {m.rows} rows, {m.bytes} bytes -> {m.path}")
    click.echo(f"{len(moved)} file(s) made live")


def _day(t: datetime | None) -> str:
    return f"{t:%Y-%m-%d}" if t is not None else "none"


def _when(t: datetime | None) -> str:
    return f"{t:%Y-%m-%d %H:%M} UTC" if t is not None else "never"


@cold_cli.command("status")
def status() -> None:
    """Files, bytes and rows of the cold tier, the oldest hot day, where the files are, the
    scheduler's last mover run; exit status 3 when something needs an operator."""
    settings = context.settings_from_env()
    with context.connection(settings, name="sds-cold-status") as conn:
        shown = coldstatus.status(conn, hot_days=settings.hot_days)
    for state in ("live", "verified", "staged", "pending", "retired"):
        files, size, rows = shown.by_state.get(state, (0, 0, 0))
        if state == "live" or files:
            click.echo(f"{state}: {files} files, {size} bytes ({storage.human(size)}), "
                       f"{rows} rows")
    click.echo(f"store: {open_store(settings.cold_path).describe()}")
    days = settings.hot_days
    click.echo(f"hot days: {days or 'off'}"
               + (f" (months before {coldmove.cutoff(days):%Y-%m-%d} go cold)" if days else ""))
    click.echo(f"oldest hot reading: {_day(shown.oldest_hot)}")
    click.echo(f"cold readings: {_day(shown.oldest_cold)} to {_day(shown.newest_cold)}")
    outcome = ("failed: " + (shown.last_error or "") if coldstatus.failing(shown)
               else "ok" if shown.last_ok else "none yet")
    click.echo(f"last mover run: {_when(shown.last_start)} ({outcome}); "
               f"last success: {_when(shown.last_ok)}")
    click.echo(f"queued relabels: {shown.relabels}")
    for problem in shown.problems:
        click.echo(f"PROBLEM: {problem}")
    if shown.problems:
        sys.exit(3)


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
