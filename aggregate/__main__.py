"""`python -m aggregate`: the rollup scheduler, one active instance per database.

The process waits for the scheduler lock (aggregate.leader), then runs a BlockingScheduler in
UTC with one interval job per rollup table, the cold tier's mover (SDS_HOT_DAYS), the backup
jobs (aggregate/backups.py, with SDS_BACKUP_CONFIG) plus a watchdog that stops the scheduler
when the lock is lost; it then waits for the lock again. Jobs are defined here in code (fixed ids,
replace_existing) with APScheduler's default in-memory job store: no shared persistent store,
so restarts never duplicate jobs (reliability plan R30-R34).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from datetime import UTC, datetime
from types import FrameType

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    EVENT_SCHEDULER_STARTED,
    JobEvent,
    JobExecutionEvent,
    SchedulerEvent,
)
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger
from psycopg_pool import ConnectionPool

from aggregate import backups, jobs, rollups
from aggregate.leader import LeaderLock, LeadershipLost
from aggregate.metrics import Metrics
from shared import coldstore
from shared.config import Settings
from shared.db import ROLE_AGGREGATE, make_pool
from shared.logs import configure_logging

log = logging.getLogger("aggregate")

# A run that starts late (process paused, machine busy) still runs: the work comes from the
# dirty marks, so a late run catches up everything; coalesce folds missed runs into one.
MISFIRE_GRACE = 24 * 3600
WATCHDOG_SECONDS = 2.0
LOCK_POLL_SECONDS = 1.0
JOB_THREADS = 10  # APScheduler's default pool size, named so main can own the executor


def build_scheduler(
    pool: ConnectionPool, settings: Settings, leader: LeaderLock, runner: str,
    metrics: Metrics | None = None, executor: ThreadPoolExecutor | None = None,
) -> BlockingScheduler:
    """The scheduler with its jobs (UTC, interval triggers) and the error listener; its jobs
    run on `executor` (a new thread pool when None)."""
    scheduler = BlockingScheduler(
        timezone=UTC,
        jobstores={"default": MemoryJobStore()},  # jobs live in code, never in a shared store
        executors={"default": executor or ThreadPoolExecutor(JOB_THREADS)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": MISFIRE_GRACE},
    )
    interval = max(1, settings.aggregate_interval)
    for table in rollups.TABLE_ORDER:
        scheduler.add_job(
            jobs.run_job, IntervalTrigger(seconds=interval, timezone=UTC), id=table,
            name=f"rollup {table}", replace_existing=True, coalesce=True, max_instances=1,
            misfire_grace_time=MISFIRE_GRACE, next_run_time=datetime.now(UTC),
            kwargs={"pool": pool, "settings": settings, "table": table,
                    "guard": leader.guard, "runner": runner, "metrics": metrics})

    if settings.retention_export_dir:
        # Raw retention (aggregate.lifecycle): exports, then drops or deletes past the horizons.
        scheduler.add_job(
            jobs.run_retention, IntervalTrigger(seconds=max(60, settings.retention_interval),
                                                timezone=UTC),
            id=jobs.RETENTION_JOB, name="raw data retention", replace_existing=True,
            coalesce=True, max_instances=1, misfire_grace_time=MISFIRE_GRACE,
            next_run_time=datetime.now(UTC),
            kwargs={"pool": pool, "settings": settings, "guard": leader.guard,
                    "runner": runner, "metrics": metrics})
    elif settings.retention_calibrated_days or settings.retention_health_days:
        log.warning("retention horizons are set but SDS_RETENTION_EXPORT_DIR is not: nothing "
                    "is removed until it names the directory for the export")

    if settings.hot_days > 0:
        # The cold tier's mover (docs/operations.md "Cold tier"): relabels, moves, compaction.
        scheduler.add_job(
            jobs.run_cold, IntervalTrigger(seconds=max(60, settings.cold_interval),
                                           timezone=UTC),
            id=jobs.COLD_JOB, name="cold tier mover", replace_existing=True, coalesce=True,
            max_instances=1, misfire_grace_time=MISFIRE_GRACE, next_run_time=datetime.now(UTC),
            kwargs={"pool": pool, "settings": settings, "guard": leader.guard,
                    "runner": runner, "metrics": metrics})

    if settings.audit_retention_days > 0:
        scheduler.add_job(
            jobs.run_audit_retention, IntervalTrigger(hours=1, timezone=UTC),
            id=jobs.AUDIT_RETENTION_JOB, name="audit log retention", replace_existing=True,
            coalesce=True, max_instances=1, misfire_grace_time=MISFIRE_GRACE,
            next_run_time=datetime.now(UTC),
            kwargs={"pool": pool, "settings": settings, "guard": leader.guard,
                    "runner": runner, "metrics": metrics})

    if settings.backup_config:
        add_backup_jobs(scheduler, pool, settings, settings.backup_config,
                        metrics.backups if metrics else backups.BackupMetrics())

    def watchdog() -> None:
        if not leader.alive():
            log.warning("scheduler lock lost: stopping jobs and waiting to lead again")
            scheduler.shutdown(wait=False)

    scheduler.add_job(watchdog, IntervalTrigger(seconds=WATCHDOG_SECONDS, timezone=UTC),
                      id="leader-watchdog", replace_existing=True, coalesce=True,
                      max_instances=1, misfire_grace_time=MISFIRE_GRACE)

    def on_event(event: JobEvent) -> None:
        if isinstance(event, JobExecutionEvent) and event.exception is not None:
            if isinstance(event.exception, LeadershipLost):
                log.warning("job %s rolled back: %s", event.job_id, event.exception)
            else:
                log.error("job %s failed: %r", event.job_id, event.exception)
        elif event.code == EVENT_JOB_MAX_INSTANCES:
            log.warning("job %s still running at its next tick; skipped this one",
                        event.job_id)
            if metrics is not None:
                metrics.skipped.labels(event.job_id).inc()
        elif event.code == EVENT_JOB_MISSED:
            log.warning("job %s missed its run time", event.job_id)
            if metrics is not None:
                metrics.missed.labels(event.job_id).inc()

    scheduler.add_listener(on_event, EVENT_JOB_ERROR | EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)

    def on_started(event: SchedulerEvent) -> None:
        # The job list as the started scheduler holds it: after a restart an operator (and
        # the R34 test) can see that the jobs came from code, each id once.
        ids = sorted(job.id for job in scheduler.get_jobs())
        log.info("scheduler started with %d jobs: %s", len(ids), ", ".join(ids))

    scheduler.add_listener(on_started, EVENT_SCHEDULER_STARTED)
    return scheduler


def add_backup_jobs(scheduler: BlockingScheduler, pool: ConnectionPool, settings: Settings,
                    config: str, metrics: backups.BackupMetrics) -> None:
    """pgBackRest's jobs (aggregate/backups.py): the first full backup at once when there is
    none, full and differential backups on their cron schedules, the metrics' refresh."""
    common = {"replace_existing": True, "coalesce": True, "max_instances": 1,
              "misfire_grace_time": MISFIRE_GRACE}
    scheduler.add_job(backups.first_full, DateTrigger(datetime.now(UTC), timezone=UTC),
                      id="backup-first-full", name="first full backup",
                      args=(config, pool, metrics), **common)
    for kind, cron in (("full", settings.backup_full_cron), ("diff", settings.backup_diff_cron)):
        scheduler.add_job(backups.take, CronTrigger.from_crontab(cron, timezone=UTC),
                          id=f"backup-{kind}", name=f"{kind} backup",
                          args=(config, kind, pool, metrics), **common)
    scheduler.add_job(metrics.refresh, IntervalTrigger(seconds=backups.REFRESH_SECONDS,
                                                       timezone=UTC),
                      id="backup-metrics", name="backup metrics",
                      next_run_time=datetime.now(UTC), args=(config, pool), **common)


def scheduler_pool(settings: Settings) -> ConnectionPool:
    """The scheduler's pool. Each connection is checked before it is handed out: after a
    database switch (a restart, a restore, a promotion) the pooled connections are stale, and
    the first round of every job failed once on them (issue 32); a stale one is now replaced."""
    return make_pool(settings, name="sds-aggregate", role=ROLE_AGGREGATE,
                     check=ConnectionPool.check_connection)


def finish_running_jobs(executor: ThreadPoolExecutor) -> None:
    """Wait for the jobs still running on a stopped scheduler's `executor`.

    `shutdown(wait=False)` (from the signal handler, which must not block, or from the
    watchdog, a job itself) only stops new runs. A job still running would otherwise outlive
    the lock it guards its commits with and the pool it takes connections from: main closed
    both right after `start()` returned, and the job's next `pool.connection()` failed with
    PoolClosed, leaving its run unfinished in job_runs. Each job's work is per-batch
    transactions, so a stop that outlasts the service manager's timeout (SIGKILL) loses only
    the open batch."""
    executor.shutdown(wait=True)


def main() -> int:
    """Run the scheduler until SIGTERM/SIGINT."""
    settings = Settings.from_env(os.environ)
    configure_logging(settings)
    coldstore.configure(settings)  # the cold tier's S3 access and backup copies
    # APScheduler logs every execution at INFO: with the 2 s watchdog that is ~90k lines a day.
    # Our jobs log their own summaries; keep the scheduler's warnings and errors.
    logging.getLogger("apscheduler.executors").setLevel(
        max(logging.WARNING, logging.getLogger().getEffectiveLevel()))
    runner = jobs.runner_name()
    stop = threading.Event()
    current: list[BlockingScheduler] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %s: stopping", signum)
        stop.set()
        for s in current:
            if s.running:
                s.shutdown(wait=False)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    pool = scheduler_pool(settings)
    metrics = Metrics()
    metrics.serve(settings.aggregate_metrics_port, settings.metrics_bind)
    leader = LeaderLock(settings.database_url)
    log.info("aggregate scheduler %s: waiting for the scheduler lock", runner)
    try:
        while not stop.is_set():
            if not leader.wait(stop, poll=LOCK_POLL_SECONDS):
                break
            log.info("aggregate scheduler %s is the leader; jobs every %d s", runner,
                     settings.aggregate_interval)
            metrics.leader.set(1)
            executor = ThreadPoolExecutor(JOB_THREADS)  # one per scheduler: no restart
            scheduler = build_scheduler(pool, settings, leader, runner, metrics, executor)
            current[:] = [scheduler]
            if stop.is_set():
                break
            scheduler.start()  # blocks until the watchdog or a signal shuts it down
            current.clear()
            # Before the lock is given up and (on a signal) the pool closed: see
            # finish_running_jobs.
            log.info("scheduler stopped: waiting for running jobs to finish")
            finish_running_jobs(executor)
            log.info("running jobs finished")
            metrics.leader.set(0)
            leader.release()
    finally:
        leader.release()
        pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
