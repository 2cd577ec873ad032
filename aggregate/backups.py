"""The scheduler's backup jobs and backup metrics (docs/operations.md "Backups and restore").

With SDS_BACKUP_CONFIG set, the leading scheduler takes a full backup at once when the
repository has none (the first start of deploy/run.sh, without making it wait), full and
differential backups on SDS_BACKUP_FULL_CRON / SDS_BACKUP_DIFF_CRON (pgBackRest expires the
ones past retention after each), verifies the repository after each backup, and every
REFRESH_SECONDS reads `pgbackrest info` and pg_stat_archiver into the metrics below, served on
the scheduler's endpoint (SDS_AGGREGATE_METRICS_PORT). A failing WAL archive is an error line in
the log (at its start, then every FAILING_LOG_EVERY seconds while it lasts)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from psycopg_pool import ConnectionPool

from shared import backup

log = logging.getLogger(__name__)

REFRESH_SECONDS = 30
FAILING_LOG_EVERY = 600.0


@dataclass
class Snapshot:
    """What the last refresh read (None: that part could not be read)."""

    at: datetime
    last_success: dict[str, datetime] | None
    archiver: backup.Archiver | None
    invalid_backups: int | None


class BackupMetrics:
    """A Prometheus collector over the newest Snapshot. Names (the alert rules use them):
    sds_backup_last_success_timestamp_seconds{type}, sds_backup_age_seconds,
    sds_wal_archive_last_success_timestamp_seconds, sds_wal_archive_failing,
    sds_wal_archive_failed_total, sds_wal_archive_lag_seconds, and
    sds_backup_verify_invalid_backups."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.snapshot: Snapshot | None = None
        self._failing_logged = 0.0
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def collect(self) -> Iterator[Metric]:
        """The metrics of the newest snapshot (none before the first refresh)."""
        with self._lock:
            snap = self.snapshot
        if snap is None:
            return
        if snap.last_success is not None:
            last = GaugeMetricFamily(
                "sds_backup_last_success_timestamp_seconds",
                "When the newest good backup of each type finished (0: none kept)",
                labels=["type"])
            for kind in backup.BACKUP_TYPES:
                when = snap.last_success.get(kind)
                last.add_metric([kind], when.timestamp() if when else 0.0)
            yield last
            newest = max(snap.last_success.values(), default=None)
            age = (snap.at - newest).total_seconds() if newest else math.inf
            yield GaugeMetricFamily(
                "sds_backup_age_seconds",
                "Age of the newest good backup of any type, at the last refresh (+Inf: none)",
                value=max(0.0, age))
        if snap.invalid_backups is not None:
            yield GaugeMetricFamily(
                "sds_backup_verify_invalid_backups",
                "Backups the last `pgbackrest verify` found invalid", value=snap.invalid_backups)
        arch = snap.archiver
        if arch is not None:
            yield GaugeMetricFamily(
                "sds_wal_archive_last_success_timestamp_seconds",
                "When PostgreSQL last archived a WAL file (pg_stat_archiver; 0: never)",
                value=arch.last_archived_time.timestamp() if arch.last_archived_time else 0.0)
            yield GaugeMetricFamily(
                "sds_wal_archive_failing",
                "1 while the archiver's last failure is newer than its last success",
                value=1.0 if arch.failing else 0.0)
            failed = CounterMetricFamily(
                "sds_wal_archive_failed",
                "Failed archive attempts (pg_stat_archiver.failed_count)")
            failed.add_metric([], float(arch.failed_count))
            yield failed
            yield GaugeMetricFamily(
                "sds_wal_archive_lag_seconds",
                "Longest WAL has waited for the archive, at most: now - last archived time "
                "while WAL was written past the last archived segment, else 0",
                value=arch.lag_seconds)

    def refresh(self, config: str, pool: ConnectionPool) -> Snapshot:
        """Read the repository and the archiver now; log a failing archive loudly."""
        last: dict[str, datetime] | None
        try:
            last = backup.last_success(backup.info(config))
        except backup.BackupError as exc:
            log.error("cannot read the backup repository: %s", exc)
            last = None
        arch: backup.Archiver | None
        try:
            with pool.connection() as conn:
                arch = backup.archiver(conn)
        except Exception as exc:  # the database may be away; the repository facts still count
            log.warning("cannot read pg_stat_archiver: %s", exc)
            arch = None
        checked = backup.last_verify(config)
        invalid = len(checked.get("invalid") or []) if checked else None
        snap = Snapshot(datetime.now(UTC), last, arch, invalid)
        with self._lock:
            self.snapshot = snap
        if arch is not None and arch.failing:
            now = time.monotonic()
            if now - self._failing_logged >= FAILING_LOG_EVERY or not self._failing_logged:
                self._failing_logged = now
                log.error("WAL ARCHIVING IS FAILING: last failure %s on %s (%d failures), last "
                          "success %s; WAL piles up in pg_wal and a lost disk would lose "
                          "everything since. See the PostgreSQL log and pgBackRest's log",
                          arch.last_failed_time, arch.last_failed_wal, arch.failed_count,
                          arch.last_archived_time)
        elif self._failing_logged:
            self._failing_logged = 0.0
            log.info("WAL archiving works again (last archived %s)",
                     arch.last_archived_wal if arch else "?")
        return snap


def take(config: str, kind: str, pool: ConnectionPool, metrics: BackupMetrics) -> None:
    """One scheduled backup of `kind`, then a verification of the repository and a refresh."""
    start = time.monotonic()
    try:
        backup.run(config, "backup", f"--type={kind}")
    except backup.BackupError as exc:
        log.error("scheduled %s backup failed: %s", kind, exc)
        metrics.refresh(config, pool)
        return
    log.info("%s backup done in %.1f s", kind, time.monotonic() - start)
    try:
        result = backup.verify(config)
        backup.record_verify(config, result)
        if not result.ok:
            log.error("backup verification FAILED: invalid backups %s; restore skips them",
                      ", ".join(result.invalid) or "(none; the WAL archive is invalid)")
    except backup.BackupError as exc:
        log.error("backup verification could not run: %s", exc)
    metrics.refresh(config, pool)


def first_full(config: str, pool: ConnectionPool, metrics: BackupMetrics) -> None:
    """A full backup now when the repository holds none (a new installation)."""
    try:
        have = backup.info(config).newest("full")
    except backup.BackupError as exc:
        log.error("cannot read the backup repository: %s", exc)
        return
    if have is None:
        log.info("the repository holds no full backup: taking the first one now")
        take(config, "full", pool, metrics)
