"""pgBackRest, the one home of backup facts: its configuration file (rendered from the
SDS_BACKUP_* settings for any PostgreSQL data directory, port and socket), the command line every
caller runs it with, and what `pgbackrest info` and PostgreSQL's pg_stat_archiver say about the
backups and the WAL archive (docs/operations.md "Backups and restore")."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.config import Settings

STANZA = "sds"
REPO_TYPES = ("posix", "s3", "sftp")
BACKUP_TYPES = ("full", "diff", "incr")
# pgBackRest reads the data directory and PostgreSQL's socket (peer auth) as the cluster's owner.
OS_USER = "postgres"


class BackupError(RuntimeError):
    """A pgBackRest command failed, or the settings cannot make a configuration."""


@dataclass(frozen=True)
class PgNode:
    """One PostgreSQL server pgBackRest backs up from: its data directory, port and socket
    directory (pgBackRest talks to it over the socket as `user`). With several (Patroni), it
    backs up from whichever is the primary."""

    data_dir: str
    port: int
    socket_dir: str
    user: str = OS_USER


def _conf_value(value: object) -> str:
    text = str(value)
    if "\n" in text or "\r" in text:
        raise BackupError(f"a pgBackRest setting may not contain a line break: {text!r}")
    return text


def repo_options(settings: Settings, base_dir: str) -> list[tuple[str, str]]:
    """The repo1-* options of the [global] section, from the SDS_BACKUP_* settings; a missing
    or bad value is a BackupError naming the setting."""
    kind = settings.backup_repo_type
    if kind not in REPO_TYPES:
        raise BackupError(f"SDS_BACKUP_REPO_TYPE must be one of {', '.join(REPO_TYPES)}, "
                          f"not {kind!r}")
    if settings.backup_retention_full < 1 or settings.backup_retention_diff < 1:
        raise BackupError("SDS_BACKUP_RETENTION_FULL and SDS_BACKUP_RETENTION_DIFF must be >= 1")
    default_path = f"{base_dir}/repo" if kind == "posix" else "/sds"
    opts = [("repo1-type", kind), ("repo1-path", settings.backup_repo_path or default_path)]
    if settings.backup_cipher_pass:
        # Every file pgBackRest writes to the repository (backups, WAL, manifests) is encrypted.
        opts += [("repo1-cipher-type", "aes-256-cbc"),
                 ("repo1-cipher-pass", settings.backup_cipher_pass)]
    if kind == "s3":
        needed = {"SDS_BACKUP_S3_ENDPOINT": settings.backup_s3_endpoint,
                  "SDS_BACKUP_S3_BUCKET": settings.backup_s3_bucket,
                  "SDS_BACKUP_S3_KEY": settings.backup_s3_key,
                  "SDS_BACKUP_S3_SECRET": settings.backup_s3_secret}
        missing = [name for name, value in needed.items() if not value]
        if missing:
            raise BackupError(f"SDS_BACKUP_REPO_TYPE=s3 needs {', '.join(missing)}")
        if settings.backup_s3_uri_style not in ("host", "path"):
            raise BackupError("SDS_BACKUP_S3_URI_STYLE must be host or path")
        endpoint = str(settings.backup_s3_endpoint)
        host, _, port = endpoint.partition(":")
        opts += [("repo1-s3-endpoint", host), ("repo1-s3-bucket", str(settings.backup_s3_bucket)),
                 ("repo1-s3-region", settings.backup_s3_region),
                 ("repo1-s3-key", str(settings.backup_s3_key)),
                 ("repo1-s3-key-secret", str(settings.backup_s3_secret)),
                 ("repo1-s3-uri-style", settings.backup_s3_uri_style)]
        if port:
            opts.append(("repo1-storage-port", port))
        if not settings.backup_s3_verify_tls:
            opts.append(("repo1-storage-verify-tls", "n"))
    elif kind == "sftp":
        if not settings.backup_sftp_host or not settings.backup_sftp_key_file:
            raise BackupError("SDS_BACKUP_REPO_TYPE=sftp needs SDS_BACKUP_SFTP_HOST and "
                              "SDS_BACKUP_SFTP_KEY_FILE")
        host, _, port = settings.backup_sftp_host.partition(":")
        opts += [("repo1-sftp-host", host), ("repo1-sftp-host-user", settings.backup_sftp_user),
                 ("repo1-sftp-private-key-file", settings.backup_sftp_key_file),
                 ("repo1-sftp-host-key-hash-type", "sha256")]
        if port:
            opts.append(("repo1-sftp-host-port", port))
    # Count retention: the newest N full backups stay, and with them every WAL segment needed
    # to recover to any moment since the oldest of them (point in time within that window).
    opts += [("repo1-retention-full-type", "count"),
             ("repo1-retention-full", str(settings.backup_retention_full)),
             ("repo1-retention-diff", str(settings.backup_retention_diff))]
    return opts


def render_config(settings: Settings, nodes: Sequence[PgNode], *, base_dir: str) -> str:
    """The pgbackrest.conf text for `nodes` (pg1, pg2, ...) with its log, lock and spool
    directories (and the embedded posix repository) under `base_dir`."""
    if not nodes:
        raise BackupError("pgBackRest needs at least one PostgreSQL server to back up")
    lines = ["# Rendered from the SDS_BACKUP_* settings by shared/backup.py (deploy/services.sh,",
             "# `sds backup configure`): change the settings, not this file.", "[global]"]
    opts = repo_options(settings, base_dir) + [
        # A backup starts at once (checkpoint now) rather than after the next spread checkpoint.
        ("start-fast", "y"),
        ("compress-type", "lz4"),
        ("log-path", f"{base_dir}/log"),
        ("lock-path", f"{base_dir}/lock"),
        ("spool-path", f"{base_dir}/spool"),
        ("log-level-console", "warn"),
        ("log-level-file", "info"),
        # archive-push and check wait this long for PostgreSQL's WAL to reach the repository.
        ("archive-timeout", "120"),
    ]
    lines += [f"{key}={_conf_value(value)}" for key, value in opts]
    lines += ["", f"[{STANZA}]"]
    for k, node in enumerate(nodes, start=1):
        lines += [f"pg{k}-path={_conf_value(node.data_dir)}", f"pg{k}-port={int(node.port)}",
                  f"pg{k}-socket-path={_conf_value(node.socket_dir)}",
                  f"pg{k}-user={_conf_value(node.user)}"]
    return "\n".join(lines) + "\n"


def read_config(config: str) -> configparser.ConfigParser:
    """A rendered configuration file, parsed (its [global] and stanza sections)."""
    parser = configparser.ConfigParser(interpolation=None)
    if not parser.read(config):
        raise BackupError(f"cannot read the pgBackRest configuration {config}")
    return parser


def configured_data_dir(config: str) -> str:
    """The data directory of the first PostgreSQL server the configuration names (pg1)."""
    try:
        return read_config(config)[STANZA]["pg1-path"]
    except KeyError:
        raise BackupError(f"{config} names no pg1-path in [{STANZA}]") from None


# The directory the WAL stream writes into (deploy/lib/walstream.sh), named in this file beside
# the configuration by `sds backup configure` for deploy/lib/pg_walstream.sh.
WALSTREAM_FILE = "walstream.dir"


def walstream_dir(config_text: str, base_dir: str) -> str:
    """Where PostgreSQL's WAL is streamed (pg_receivewal) for a configuration: beside the
    repository when it is a plain posix directory (a second disk survives the machine with it),
    else under `base_dir` (an S3 or encrypted repository: the stream is neither uploaded nor
    encrypted, so it stays on this machine and covers a lost data directory only)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(config_text)
    glob = parser["global"] if parser.has_section("global") else {}
    if glob.get("repo1-type") == "posix" and not glob.get("repo1-cipher-type"):
        return f"{glob.get('repo1-path')}/walstream"
    return f"{base_dir}/walstream"


def restore_command(config: str, stream_dir: str | None) -> str:
    """PostgreSQL's restore_command for a restore: each WAL segment from the archive, else from
    the stream (a complete segment, else the segment being written when the server was lost:
    pg_receivewal's .partial file, full size and zero-padded, which recovery reads up to its
    last record). Without a stream directory, pgBackRest's own."""
    get = f'pgbackrest --config={config} --stanza={STANZA} archive-get %f "%p"'
    if not stream_dir:
        return get
    d = stream_dir
    return (f'{get} || {{ test -f {d}/%f && cp {d}/%f "%p"; }} '
            f'|| {{ test -f {d}/%f.partial && cp {d}/%f.partial "%p"; }}')


def configured_walstream_dir(config: str) -> str | None:
    """The stream directory `sds backup configure` named beside `config`, if it exists."""
    try:
        path = (Path(config).parent / WALSTREAM_FILE).read_text().strip()
    except OSError:
        return None
    return path if path and Path(path).is_dir() else None


def archive_settings(config: str, settings: Settings) -> dict[str, str]:
    """The postgresql.conf settings that ship every finished WAL segment to the repository."""
    return {
        "archive_mode": "on",
        "archive_command": f"pgbackrest --config={config} --stanza={STANZA} archive-push %p",
        "archive_timeout": str(max(1, settings.backup_archive_timeout)),
    }


def command(config: str, *args: str) -> list[str]:
    """The argv of one pgbackrest command against our stanza, run as the cluster's owner
    (through runuser when the caller is root)."""
    argv = ["pgbackrest", f"--config={config}", f"--stanza={STANZA}", *args]
    if os.geteuid() == 0:
        argv = ["runuser", "-u", OS_USER, "--", *argv]
    return argv


def run(config: str, *args: str, timeout: float = 3600.0) -> subprocess.CompletedProcess[str]:
    """Run one pgbackrest command; a failure is a BackupError carrying pgBackRest's words."""
    if not Path(config).is_file():
        raise BackupError(f"no pgBackRest configuration at {config} (SDS_BACKUP_CONFIG); "
                          "deploy/services.sh start renders it")
    try:
        # errors="replace": an encrypted repository read without its passphrase answers with
        # bytes that are not UTF-8 (a wrong SDS_BACKUP_CIPHER_PASS must be an error, not a crash).
        result = subprocess.run(command(config, *args), capture_output=True, text=True,
                                errors="replace", timeout=timeout, cwd="/")
    except subprocess.TimeoutExpired as exc:
        raise BackupError(f"pgbackrest {args[0]} timed out after {timeout:.0f} s") from exc
    if result.returncode != 0:
        words = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise BackupError(f"pgbackrest {' '.join(args)} failed ({result.returncode}): "
                          + " / ".join(words[-5:]))
    return result


# ---- what the repository holds -----------------------------------------------------------------

@dataclass(frozen=True)
class Backup:
    """One backup in the repository, as `pgbackrest info` lists it."""

    label: str
    type: str
    start: datetime
    stop: datetime
    error: bool  # pgBackRest found page checksum errors while taking it


@dataclass(frozen=True)
class RepoInfo:
    """The stanza's state in the repository: its backups (oldest first) and the WAL range."""

    status: str
    backups: tuple[Backup, ...]
    wal_min: str | None
    wal_max: str | None

    def newest(self, kind: str | None = None) -> Backup | None:
        """The newest backup (of `kind` when given) that pgBackRest completed without error."""
        good = [b for b in self.backups if not b.error and (kind is None or b.type == kind)]
        return good[-1] if good else None


def _ts(value: int) -> datetime:
    return datetime.fromtimestamp(int(value), UTC)


def parse_info(text: str) -> RepoInfo:
    """Our stanza's entry of `pgbackrest info --output=json`."""
    try:
        # strict=False: a repository read with the wrong passphrase puts raw bytes in a message.
        stanzas = json.loads(text, strict=False)
    except ValueError as exc:
        raise BackupError(f"pgbackrest info answered something that is not JSON: {exc}") from None
    entry = next((s for s in stanzas if s.get("name") == STANZA), None)
    if entry is None:
        return RepoInfo("no stanza", (), None, None)
    backups = tuple(
        Backup(label=b["label"], type=b["type"], start=_ts(b["timestamp"]["start"]),
               stop=_ts(b["timestamp"]["stop"]), error=bool(b.get("error", False)))
        for b in entry.get("backup", []))
    archives = entry.get("archive") or []
    wal_min = min((a["min"] for a in archives if a.get("min")), default=None)
    wal_max = max((a["max"] for a in archives if a.get("max")), default=None)
    status = entry.get("status", {}).get("message", "unknown")
    return RepoInfo(status, backups, wal_min, wal_max)


def info(config: str) -> RepoInfo:
    """What the repository holds now."""
    return parse_info(run(config, "info", "--output=json", timeout=120).stdout)


def last_success(repo: RepoInfo) -> dict[str, datetime]:
    """When the newest good backup of each type finished."""
    out: dict[str, datetime] = {}
    for b in repo.backups:
        if not b.error:
            out[b.type] = max(out.get(b.type, b.stop), b.stop)
    return out


# ---- verification --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verification:
    """`pgbackrest verify`'s verdict: the labels of backups with invalid files, and its words."""

    ok: bool
    invalid: tuple[str, ...]
    text: str


def parse_verify(text: str, labels: Sequence[str]) -> tuple[str, ...]:
    """The backups of `labels` that verify's output reports with invalid or missing files.

    2.45's text output lists each backup as `backup: <label>, status: <status>` with status
    `valid` when every file's checksum and size matched (anything else is a problem)."""
    bad = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("backup: ") and ", status: " in line:
            label, _, status = line[len("backup: "):].partition(", status: ")
            label = label.strip()
            if status.split(",")[0].strip() != "valid" and label in labels:
                bad.append(label)
    return tuple(bad)


VERIFY_FILE = "verify.json"


def record_verify(config: str, result: Verification) -> None:
    """Keep the verdict beside the configuration, for `sds backup status` and the metrics."""
    path = Path(config).parent / VERIFY_FILE
    path.write_text(json.dumps({"at": f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S}Z",
                                "ok": result.ok, "invalid": list(result.invalid)}))


def last_verify(config: str) -> dict[str, Any] | None:
    """The last verification's record (`sds backup verify`, a restore, the scheduler)."""
    try:
        return dict(json.loads((Path(config).parent / VERIFY_FILE).read_text()))
    except (OSError, ValueError):
        return None


def verify(config: str, repo: RepoInfo | None = None) -> Verification:
    """Check every file of every backup and the WAL archive against the checksums pgBackRest
    recorded (`pgbackrest verify`)."""
    repo = repo or info(config)
    result = subprocess.run(command(config, "verify", "--output=text", "--verbose"),
                            capture_output=True, text=True, timeout=3600, cwd="/")
    text = (result.stdout + result.stderr).strip()
    invalid = parse_verify(text, [b.label for b in repo.backups])
    # 2.45 exits 0 even when it found invalid files: its stanza line says "status: error".
    stanza_error = any(line.strip() == "status: error" for line in text.splitlines())
    return Verification(ok=result.returncode == 0 and not invalid and not stanza_error,
                        invalid=invalid, text=text)


# ---- the WAL archive, from PostgreSQL ------------------------------------------------------------

ARCHIVER_SQL = """
SELECT archived_count, last_archived_wal, last_archived_time, failed_count, last_failed_wal,
       last_failed_time, now(),
       CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE pg_walfile_name(pg_current_wal_lsn()) END
FROM pg_stat_archiver
"""


@dataclass(frozen=True)
class Archiver:
    """pg_stat_archiver plus the segment PostgreSQL writes now (None on a standby)."""

    archived_count: int
    last_archived_wal: str | None
    last_archived_time: datetime | None
    failed_count: int
    last_failed_wal: str | None
    last_failed_time: datetime | None
    now: datetime
    current_wal: str | None

    @property
    def failing(self) -> bool:
        """The last attempt failed: a failure newer than the last success."""
        if self.last_failed_time is None:
            return False
        return self.last_archived_time is None or self.last_failed_time > self.last_archived_time

    @property
    def lag_seconds(self) -> float:
        """How long WAL has waited to reach the archive, at most: now - last_archived_time while
        PostgreSQL has written WAL past the last archived segment, 0 when all is archived.

        pg_walfile_name of the current position names the last archived segment only while no
        WAL was written since the switch (a position on a segment boundary belongs to the segment
        before it). Segments are compared without their timeline. Never archived: the age of
        the failures, or 0 on an idle new cluster."""
        if self.last_archived_time is None:
            if self.last_failed_time is not None:
                return max(0.0, (self.now - self.last_failed_time).total_seconds())
            return 0.0
        # Only a plain segment name says that segment is complete in the archive: a .backup
        # label names the segment a backup started in, which is still being written.
        last = self.last_archived_wal or ""
        if self.current_wal and len(last) == 24 and self.current_wal[8:24] <= last[8:24]:
            return 0.0
        return max(0.0, (self.now - self.last_archived_time).total_seconds())


def archiver(conn: Any) -> Archiver:
    """The archiver's state from a connection to the cluster (any role may read it)."""
    row = conn.execute(ARCHIVER_SQL).fetchone()
    return Archiver(*row)


# ---- which backup a restore starts from ----------------------------------------------------------

def choose_backup(repo: RepoInfo, invalid: Sequence[str],
                  target: datetime | None) -> tuple[Backup, list[Backup]]:
    """The backup to restore: the newest one that finished before `target` (None: the newest),
    that pgBackRest took without error and that verification did not find invalid. Also the
    newer candidates passed over because they are bad, for the operator to hear about. No such
    backup is a BackupError: a restore never starts from a backup that failed verification."""
    fits = [b for b in repo.backups if target is None or b.stop <= target]
    if not fits:
        if not repo.backups:
            raise BackupError("the repository holds no backup")
        oldest = min(b.stop for b in repo.backups)
        raise BackupError(f"no backup finished before {target:%Y-%m-%d %H:%M:%S%z}: the oldest "
                          f"kept finished at {oldest:%Y-%m-%d %H:%M:%S%z}")
    skipped: list[Backup] = []
    for candidate in reversed(fits):
        if candidate.error or candidate.label in invalid:
            skipped.append(candidate)
            continue
        return candidate, skipped
    raise BackupError("every backup that could serve this restore failed verification or "
                      "was taken with errors: " + ", ".join(b.label for b in skipped))
