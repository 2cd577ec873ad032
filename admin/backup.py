"""`sds backup configure|setup|status|now|verify` and `sds restore`: the operator's one home for
pgBackRest (docs/operations.md "Backups and restore"). The facts (configuration, commands,
parsing) live in shared/backup.py; the scheduler takes the scheduled backups with the same
commands. Every command but configure reads the rendered configuration named by
SDS_BACKUP_CONFIG (deploy/services.sh writes it and names it in .state/secrets.env)."""

from __future__ import annotations

import os
import pwd
import subprocess  # nosec B404  runs pg_ctl only
import time
from datetime import UTC, datetime
from pathlib import Path

import click
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from admin import context, undo
from shared import backup, coldstore
from shared.config import Settings


def _config(settings: Settings) -> str:
    if not settings.backup_config:
        raise click.ClickException(
            "SDS_BACKUP_CONFIG is not set: source .state/secrets.env (set -a; . "
            ".state/secrets.env; set +a), which deploy/services.sh writes")
    return settings.backup_config


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _chown_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam(backup.OS_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


@click.group("backup")
def backup_cli() -> None:
    """pgBackRest backups: status, take one now, verify (docs/operations.md "Backups and
    restore")."""


@backup_cli.command("configure")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="The pgbackrest.conf to write (mode 600, owned by postgres).")
@click.option("--base-dir", required=True, type=click.Path(file_okay=False),
              help="Directory of pgBackRest's logs, locks and the embedded repository.")
@click.option("--pg", "nodes", multiple=True, required=True, metavar="DATA:PORT:SOCKET",
              help="A PostgreSQL server to back up: data directory, port, socket directory "
                   "(repeat for each Patroni node).")
@click.option("--pg-settings", type=click.Path(dir_okay=False), default=None,
              help="Also write PostgreSQL's archive settings (archive_mode, archive_command, "
                   "archive_timeout) to this file, for an include in postgresql.conf.")
def configure(config_path: str, base_dir: str, nodes: tuple[str, ...],
              pg_settings: str | None) -> None:
    """Render pgBackRest's configuration from the SDS_BACKUP_* settings. Prints "changed"
    when a file changed (PostgreSQL must reload archive settings)."""
    settings = context.settings_from_env()
    pg_nodes = []
    for spec in nodes:
        data, _, rest = spec.partition(":")
        port, _, sock = rest.partition(":")
        if not (data and port.isdigit() and sock):
            raise click.ClickException(f"--pg wants DATA:PORT:SOCKET, not {spec!r}")
        pg_nodes.append(backup.PgNode(data, int(port), sock))
    base = Path(base_dir)
    try:
        text = backup.render_config(settings, pg_nodes, base_dir=str(base.resolve()))
    except backup.BackupError as exc:
        raise click.ClickException(str(exc)) from None
    for sub in ("", "log", "lock", "spool") + (("repo",) if "repo1-type=posix" in text else ()):
        (base / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        _chown_postgres(base / sub)
    if "repo1-type=posix" in text and settings.backup_repo_path:
        # A repository moved elsewhere (SDS_BACKUP_REPO_PATH): pgBackRest runs as postgres and
        # cannot make it under a directory root owns (the archive then fails), so it is made
        # here and given to postgres; deploy/lib/pg_backup.sh lets postgres traverse to it.
        moved = Path(settings.backup_repo_path)
        moved.mkdir(parents=True, exist_ok=True, mode=0o750)
        _chown_postgres(moved)
    # The WAL stream's directory (deploy/lib/walstream.sh), named for the deploy and restores.
    stream = Path(backup.walstream_dir(text, str(base.resolve())))
    stream.mkdir(parents=True, exist_ok=True, mode=0o700)
    _chown_postgres(stream)
    _write(base / backup.WALSTREAM_FILE, f"{stream}\n", 0o644)
    changed = _write(Path(config_path), text, 0o600)
    if pg_settings:
        lines = [f"{k} = '{v}'" for k, v in
                 backup.archive_settings(str(Path(config_path).resolve()), settings).items()]
        changed |= _write(Path(pg_settings), "# Archiving to pgBackRest (shared/backup.py)\n"
                          + "\n".join(lines) + "\n", 0o600)
    if changed:
        click.echo("changed")


def _write(path: Path, text: str, mode: int) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    _chown_postgres(tmp)
    tmp.replace(path)
    return True


@backup_cli.command("setup")
def setup() -> None:
    """Create the stanza in the repository (once; later runs check it)."""
    config = _config(context.settings_from_env())
    try:
        backup.run(config, "stanza-create", timeout=300)
    except backup.BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"stanza {backup.STANZA} ready in the repository ({config})")


def _archiver(settings: Settings) -> backup.Archiver | None:
    # The archive's state is one line of the status: an unreachable database is said there.
    try:
        with context.connection(settings, name="sds-backup-cli", connect_timeout=5) as conn:
            return backup.archiver(conn)
    except (click.ClickException, psycopg.Error):
        return None


def status_lines(settings: Settings) -> tuple[list[str], bool]:
    """What `sds backup status` says, and whether all is well (a backup exists, none newer is
    invalid, the archive is not failing)."""
    config = _config(settings)
    now = datetime.now(UTC)
    lines, ok = [], True
    try:
        repo = backup.info(config)
    except backup.BackupError as exc:
        return [f"backup: ERROR reading the repository: {exc}"], False
    newest = repo.newest()
    if newest is None:
        lines.append("backup: NONE yet (the scheduler takes the first full backup at start)")
        ok = False
    else:
        age = _age((now - newest.stop).total_seconds())
        lines.append(f"backup: last {newest.type} {newest.label} finished {age} ago "
                     f"({newest.stop:%Y-%m-%d %H:%M:%S}Z); {len(repo.backups)} kept; WAL "
                     f"{repo.wal_min or '-'} .. {repo.wal_max or '-'}")
    checked = backup.last_verify(config)
    if checked is not None:
        invalid = list(checked.get("invalid") or [])
        if checked.get("ok"):
            lines.append(f"verify: all valid at {checked.get('at')}")
        else:
            ok = False
            lines.append(f"verify: FAILED at {checked.get('at')}: invalid "
                         f"{', '.join(invalid) or '(the archive)'}; restore skips them")
    arch = _archiver(settings)
    if arch is None:
        lines.append("wal archive: unknown (PostgreSQL not reachable)")
    elif arch.failing:
        ok = False
        lines.append(f"wal archive: FAILING since {arch.last_failed_time:%H:%M:%S} "
                     f"({arch.failed_count} failures, last {arch.last_failed_wal}); see "
                     "PostgreSQL's log and pgBackRest's log directory")
    else:
        lines.append(f"wal archive: ok, last {arch.last_archived_wal or 'none yet'}, lag "
                     f"{arch.lag_seconds:.0f} s")
    return lines, ok


@backup_cli.command("status")
@click.option("--short", is_flag=True, help="One line (deploy/run.sh status).")
def status(short: bool) -> None:
    """The newest backup and its age, the last verification, the WAL archive's state. Exit
    status 3 when something needs the operator."""
    lines, ok = status_lines(context.settings_from_env())
    click.echo("; ".join(lines) if short else "\n".join(lines))
    if not ok:
        raise SystemExit(3)


@backup_cli.command("now")
@click.option("--type", "kind", type=click.Choice(["full", "diff", "incr"]), default="diff",
              show_default=True, help="diff with no full backup yet becomes a full one.")
def now(kind: str) -> None:
    """Take a backup now (expires the ones past retention afterwards)."""
    config = _config(context.settings_from_env())
    click.echo(f"taking a {kind} backup into the repository ({config}) ...")
    start = time.monotonic()
    try:
        backup.run(config, "backup", f"--type={kind}")
        newest = backup.info(config).newest()
    except backup.BackupError as exc:
        raise click.ClickException(str(exc)) from None
    label = newest.label if newest else "?"
    click.echo(f"backup {label} done in {time.monotonic() - start:.1f} s")


@backup_cli.command("verify")
def verify() -> None:
    """Check every backup's files and the WAL archive against their checksums. Exit status 3
    when any is invalid; restore never uses an invalid backup."""
    config = _config(context.settings_from_env())
    try:
        result = backup.verify(config)
    except backup.BackupError as exc:
        raise click.ClickException(str(exc)) from None
    backup.record_verify(config, result)
    click.echo(result.text)
    if result.ok:
        click.echo("verify: every backup and WAL segment is valid")
        return
    click.echo("verify: FAILED; invalid backups: " + (", ".join(result.invalid) or "none, "
               "but the WAL archive has invalid segments"), err=True)
    raise SystemExit(3)


def _running_pid(data_dir: Path) -> int | None:
    """The pid of a live postmaster in `data_dir` (postmaster.pid's first line), else None."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        return pid if b"postgres" in cmdline.read_bytes() else None
    except OSError:
        return pid


def parse_time(text: str) -> datetime:
    """--to's value: ISO 8601; without a zone it is UTC."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-03-01T02:15:00Z)") from None
    # In UTC from here on: the recovery target is written with a +00 offset.
    return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)


def recovery_target(when: datetime) -> str:
    """PostgreSQL's recovery_target_time for `when`, in UTC."""
    return f"{when.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}+00"


@click.command("restore")
@click.option("--to", "to", default=None, metavar="TIME",
              help="Recover to this moment (ISO 8601, UTC unless it says otherwise); default: "
                   "the newest backup plus every archived WAL segment.")
@click.option("--target-dir", type=click.Path(file_okay=False), default=None,
              help="Data directory to restore into (default: the configured one, pg1-path).")
@click.option("--beside", is_flag=True,
              help="Restore the moment --to into --target-dir beside the running service and "
                   "start it there, read-only, on --port (to copy back what a mistake removed: "
                   "sds copy-back).")
@click.option("--port", type=int, default=None,
              help="With --beside: the port of the copy (127.0.0.1; no unix socket).")
def restore(to: str | None, target_dir: str | None, beside: bool, port: int | None) -> None:
    """Restore the database from the repository into a stopped (or fresh) data directory.

    Verifies the repository first and starts from the newest valid backup that finished before
    --to; the restored server replays archived WAL up to --to (or the end of the archive) on
    its next start, then promotes itself and accepts writes. With --beside the live service
    keeps running: the copy at --to starts on --port, read-only, and stays paused at --to."""
    settings = context.settings_from_env()
    config = _config(settings)
    target = parse_time(to) if to else None
    if beside and (target is None or target_dir is None or port is None):
        raise click.UsageError("--beside needs --to, --target-dir and --port")
    if beside and Path(target_dir or "").resolve() == Path(
            backup.configured_data_dir(config)).resolve():
        raise click.UsageError("--beside restores into another --target-dir than the live one")
    data_dir = Path(target_dir or backup.configured_data_dir(config)).resolve()
    pid = _running_pid(data_dir)
    if pid is not None:
        raise click.ClickException(
            f"PostgreSQL is running on {data_dir} (pid {pid}): refusing to overwrite a running "
            "cluster. Stop it first (deploy/run.sh stop), or restore into another "
            "--target-dir")
    if (data_dir / "postmaster.pid").exists():
        click.echo(f"removing the stale {data_dir}/postmaster.pid (no such server is running)")
        (data_dir / "postmaster.pid").unlink()
    click.echo("1. verifying every backup in the repository (pgbackrest verify) ...")
    try:
        repo = backup.info(config)
        checked = backup.verify(config, repo)
        backup.record_verify(config, checked)
        chosen, skipped = backup.choose_backup(repo, checked.invalid, target)
    except backup.BackupError as exc:
        raise click.ClickException(str(exc)) from None
    for bad in skipped:
        why = "was taken with errors" if bad.error else "FAILED verification"
        click.echo(f"   skipping backup {bad.label}: it {why}", err=True)
    if not checked.ok and not checked.invalid:
        click.echo("   warning: the WAL archive has invalid segments; recovery stops at the "
                   "first one it cannot read (see `sds backup verify`)", err=True)
    existing = data_dir.is_dir() and any(data_dir.iterdir())
    click.echo(f"2. restoring backup {chosen.label} ({chosen.type}, finished "
               f"{chosen.stop:%Y-%m-%d %H:%M:%S}Z) into {data_dir}"
               + (" (delta: files already there are checked and replaced where they differ, "
                  "others removed)" if existing else ""))
    if not data_dir.exists():
        data_dir.mkdir(parents=True, mode=0o700)
        _chown_postgres(data_dir)
    args = ["restore", f"--set={chosen.label}", f"--pg1-path={data_dir}"]
    stream = backup.configured_walstream_dir(config)
    if stream:
        # The archive, then the WAL streamed since (deploy/lib/walstream.sh): the restore
        # reaches the last commit the stream received, not the last archived segment.
        args.append("--recovery-option=restore_command="
                    + backup.restore_command(str(Path(config).resolve()), stream))
    if existing:
        args.append("--delta")
    if target is not None:
        args += ["--type=time", f"--target={recovery_target(target)}",
                 f"--target-action={'pause' if beside else 'promote'}"]
    start = time.monotonic()
    try:
        backup.run(config, *args)
    except backup.BackupError as exc:
        raise click.ClickException(str(exc)) from None
    took = time.monotonic() - start
    if beside and target is not None and port is not None:
        _start_beside(data_dir, port, target, took)
        return
    until = (f"{target:%Y-%m-%d %H:%M:%S}Z" if target else
             "the end of the archived WAL" + (f", then the WAL streamed into {stream}"
                                               if stream else ""))
    click.echo(f"3. restored in {took:.1f} s. On its next start PostgreSQL replays archived WAL "
               f"up to {until}, then promotes itself (a new timeline) and accepts writes.")
    click.echo("   Start it: deploy/run.sh (or deploy/services.sh start)")
    _restore_cold_files(settings)


def _restore_cold_files(settings: Settings) -> None:
    """The cold tier's files that the store lacks, copied back from their backup copies (a
    local store's, beside a posix repository; docs/operations.md "Cold tier"): the restored
    catalogue may name any file written before the target."""
    store = coldstore.open_store(settings.cold_path)
    if store.backup_dir is None or not store.backup_dir.is_dir():
        return
    brought = store.restore_from_backup()
    click.echo(f"4. cold tier: {len(brought)} file(s) brought back from {store.backup_dir} "
               f"into {store.describe()}; once started, `sds cold check` confirms that "
               "every file the catalogue names is there")



# What the copy beside the live service must not share with it: the port and socket, the WAL
# archive (it never archives: it stays in recovery, and archive_mode is off anyway), a standby.
_BESIDE_CONF = """
# sds restore --beside: a read-only copy paused at the target, beside the live service.
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = ''
archive_mode = off
synchronous_standby_names = ''
hot_standby = on
"""


def _start_beside(data_dir: Path, port: int, target: datetime, took: float) -> None:
    """Start the restored copy in `data_dir` on `port`; wait until its replay is paused at
    `target` (it then answers read-only queries as of that moment)."""
    with (data_dir / "postgresql.auto.conf").open("a") as conf:
        conf.write(_BESIDE_CONF.format(port=port))
    log = data_dir.parent / "beside.log"
    log.touch()
    _chown_postgres(log)
    argv = [str(PG_CTL), "-D", str(data_dir), "-l", str(log), "-w", "-t", "3600", "start"]
    if os.geteuid() == 0:
        argv = ["runuser", "-u", backup.OS_USER, "--", *argv]
    click.echo(f"3. restored in {took:.1f} s; starting the copy on 127.0.0.1:{port} (log {log})")
    started = subprocess.run(argv, capture_output=True, text=True, check=False, cwd="/")  # nosec B603  fixed argv
    if started.returncode != 0:
        raise click.ClickException(f"the copy did not start: {started.stdout}{started.stderr}"
                                   f" (see {log})")
    settings = context.settings_from_env()
    copy = settings.replace(database_url=beside_url(settings.database_url, port))
    deadline = time.monotonic() + 3600
    while True:
        with context.connection(copy, name="sds-restore-beside") as conn:
            row = conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
        if row and row[0] == "paused":
            break
        if time.monotonic() > deadline:
            raise click.ClickException("the copy did not reach the target within an hour")
        time.sleep(0.5)
    click.echo(f"4. the copy is paused at {target:%Y-%m-%d %H:%M:%S}Z, read-only, on "
               f"127.0.0.1:{port}. Look: psql -h 127.0.0.1 -p {port} -U sds sds. Copy back: "
               f"sds copy-back --from-port {port} --table TABLE [--where CONDITION]. Then "
               f"stop it: sds restore-beside-stop --target-dir {data_dir}")


PG_CTL = Path("/usr/lib/postgresql/15/bin/pg_ctl")


def beside_url(url: str, port: int) -> str:
    """SDS_DATABASE_URL pointed at the copy beside: same user, password and database, on
    127.0.0.1:`port` (any host list and session attributes dropped)."""
    info = conninfo_to_dict(url)
    for key in ("target_session_attrs", "hostaddr"):
        info.pop(key, None)
    info.update(host="127.0.0.1", port=str(port))
    return make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


@click.command("restore-beside-stop")
@click.option("--target-dir", required=True, type=click.Path(file_okay=False, exists=True),
              help="The copy's data directory (sds restore --beside --target-dir).")
def restore_beside_stop(target_dir: str) -> None:
    """Stop the copy restored beside the live service (its directory stays: remove it)."""
    data_dir = Path(target_dir).resolve()
    if _running_pid(data_dir) is None:
        raise click.ClickException(f"no copy is running in {data_dir}")
    argv = [str(PG_CTL), "-D", str(data_dir), "-m", "fast", "-w", "stop"]
    if os.geteuid() == 0:
        argv = ["runuser", "-u", backup.OS_USER, "--", *argv]
    subprocess.run(argv, check=True, capture_output=True, cwd="/")  # nosec B603  fixed argv
    click.echo(f"stopped the copy in {data_dir}; remove it with: rm -rf {data_dir.parent}")


@click.command("copy-back")
@click.option("--from-port", required=True, type=int,
              help="Port of the copy restored beside (sds restore --beside --port).")
@click.option("--table", "tables", multiple=True, required=True,
              help="A table to copy missing rows of (repeat; parents go first).")
@click.option("--where", default=None,
              help="SQL condition on the copied rows, as in psql (e.g. \"device = 'A1' AND time "
                   "< '2026-03-01'\"); every --table must have its columns.")
@click.option("--dry-run", is_flag=True, help="Count, then roll back.")
def copy_back(from_port: int, tables: tuple[str, ...], where: str | None,
              dry_run: bool) -> None:
    """Insert into the live database the rows of --table that the copy beside has and the
    live one lacks; rows there (also those changed or added since) are not touched."""
    settings = context.settings_from_env()
    copy = settings.replace(database_url=beside_url(settings.database_url, from_port))
    with context.connection(copy, name="sds-copy-back") as source, \
            context.connection(settings, name="sds-copy-back",
                               errors=(undo.UndoError, psycopg.Error)) as live:
        results = undo.copy_back(source, live, tables, where)
        for r in results:
            click.echo(f"{r.table}: {r.found} rows in the copy, {r.inserted} missing here "
                       f"{'would be ' if dry_run else ''}copied back")
        if dry_run:
            live.rollback()
            click.echo("dry run: nothing changed")
