"""Prometheus counters of the ingester, served on SDS_METRICS_BIND:SDS_METRICS_PORT.

Each `Metrics` owns its registry, so several ingesters in one test process do not collide.
"""

from __future__ import annotations

import logging
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from shared import metrics

log = logging.getLogger(__name__)


class Metrics:
    """The ingester's metrics (names prefixed `sds_ingest_`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.received = Counter("sds_ingest_messages_received", "MQTT messages received",
                                registry=r)
        self.acked = Counter("sds_ingest_messages_acked",
                             "Messages acknowledged to the broker after their commit", registry=r)
        self.ack_skipped = Counter(
            "sds_ingest_acks_skipped",
            "Acks not sent because the connection that delivered the message is gone "
            "(the broker redelivers it)", registry=r)
        self.stored = Counter("sds_ingest_readings_stored", "Rows inserted", ["table"], registry=r)
        self.duplicates = Counter(
            "sds_ingest_duplicates",
            "Readings whose (device, time) was already stored or repeated in the batch "
            "(first write wins)", registry=r)
        self.quarantined = Counter(
            "sds_ingest_quarantined",
            "Rejected messages and readings, by reason (those summarised past the per-message "
            "row cap included)", ["reason"], registry=r)
        # Label: the device name for registered devices only (their number is bounded by the
        # registry); anything else shares the one label "(unregistered)".
        self.quarantine_rows = Counter(
            "sds_ingest_quarantine_rows", "Quarantine rows written, by device", ["device"],
            registry=r)
        self.quarantine_bytes = Counter(
            "sds_ingest_quarantine_bytes",
            "Bytes of payload and detail written to quarantine, by device", ["device"],
            registry=r)
        # Same labels; no reason label (x 22 reasons), the database keeps that split
        # (quarantine_unkept, `sds quarantine stats`). The alarm SdsQuarantineBudgetExceeded.
        self.quarantine_unkept = Counter(
            "sds_ingest_quarantine_unkept",
            "Rejections not kept because their device was over its quarantine budget "
            "(counted by reason in the table quarantine_unkept), by device", ["device"],
            registry=r)
        self.quarantine_purged = Counter(
            "sds_ingest_quarantine_purged",
            "Quarantine rows deleted by the retention (SDS_QUARANTINE_RETENTION_DAYS)",
            registry=r)
        self.unknown_fields = Counter("sds_ingest_unknown_fields",
                                      "Unknown payload fields ignored", registry=r)
        self.batch_seconds = Histogram(
            "sds_ingest_batch_seconds", "Time from a batch's first message to its commit",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0), registry=r)
        self.batch_messages = Histogram(
            "sds_ingest_batch_messages", "Messages per committed batch",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000), registry=r)
        self.held = Gauge("sds_ingest_messages_held",
                          "Messages received and not yet committed (at most the window)",
                          registry=r)
        self.redelivered = Counter(
            "sds_ingest_messages_redelivered",
            "Messages the broker sent again with the DUP flag (after a crash or a lost "
            "connection) and that were committed", registry=r)
        self.db_watchdog = Counter(
            "sds_ingest_db_watchdog_fired",
            "Database calls that hung past SDS_INGEST_DB_WATCHDOG and had their connection "
            "broken (the batch was retried, nothing acked meanwhile)", registry=r)
        self.db_errors = Counter("sds_ingest_db_errors",
                                 "Failed batch transactions (retried, nothing acked)", registry=r)
        self.shard = Gauge(
            "sds_ingest_shard", "1, labelled with this process's shard, the shard count and its "
            "client id (each shard serves its own metrics port)",
            ["shard", "shards", "client_id"], registry=r)
        self.connects = Counter("sds_ingest_connects", "Successful broker connections", registry=r)
        # 0 on a standby too (it connects only once it leads): alert on the max over ingesters.
        self.broker_connected = Gauge(
            "sds_ingest_broker_connected", "1 while this ingester is connected to the broker",
            registry=r)
        self.session_present = Gauge(
            "sds_ingest_session_present",
            "1 when the broker resumed the ingester's persistent session on the last connect",
            registry=r)
        self.session_lost = Counter(
            "sds_ingest_session_unexpectedly_absent",
            "Reconnects on which the broker had no session for the ingester: messages queued "
            "for it may be lost (alarm)", registry=r)
        # ingest/groupwatch.py, from the broker's $SYS/broker/shared_subscriptions/count
        self.shared_subscriptions = Gauge(
            "sds_ingest_broker_shared_subscriptions",
            "Shared subscriptions the broker holds (all clients; mosquitto's $SYS count)",
            registry=r)
        self.foreign_shared = Gauge(
            "sds_ingest_foreign_shared_subscriptions",
            "Shared subscriptions on the broker beyond the shards' own: a client joined a shared "
            "group (or a removed shard's session was not retired); alarm when > 0", registry=r)

    def serve(self, port: int, addr: str) -> WSGIServer | None:
        """Start the HTTP endpoint in a daemon thread (port 0: disabled)."""
        return metrics.serve(self.registry, port, addr)
