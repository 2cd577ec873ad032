"""Prometheus metrics of the rollup scheduler, served on SDS_METRICS_BIND:
SDS_AGGREGATE_METRICS_PORT (0 disables), with the backup and WAL archive metrics
(aggregate/backups.py). Each `Metrics` owns its registry."""

from __future__ import annotations

import logging
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge

from aggregate.backups import BackupMetrics
from shared import metrics

log = logging.getLogger(__name__)


class Metrics:
    """The scheduler's metrics (names prefixed `sds_aggregate_`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.runs = Counter("sds_aggregate_runs", "Job runs by outcome (ok, error, lost_lock)",
                            ["job", "outcome"], registry=r)
        self.buckets = Counter("sds_aggregate_buckets_recomputed",
                               "Buckets recomputed from dirty marks", ["table"], registry=r)
        self.skipped = Counter("sds_aggregate_ticks_skipped",
                               "Ticks skipped because the previous run was still going",
                               ["job"], registry=r)
        self.missed = Counter("sds_aggregate_ticks_missed", "Ticks missed (past the grace time)",
                              ["job"], registry=r)
        self.leader = Gauge("sds_aggregate_leader", "1 while this process holds the scheduler "
                            "lock", registry=r)
        self.pending = Gauge("sds_aggregate_pending_marks", "Dirty marks waiting, after the "
                             "last run", ["table"], registry=r)
        # The backup and WAL archive metrics (aggregate/backups.py), refreshed by its job.
        self.backups = BackupMetrics(r)

    def serve(self, port: int, addr: str) -> WSGIServer | None:
        """Start the HTTP endpoint in a daemon thread (port 0: disabled)."""
        return metrics.serve(self.registry, port, addr)
