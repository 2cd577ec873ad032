"""Prometheus metrics of the deliverer, served on SDS_METRICS_BIND:SDS_DELIVERY_METRICS_PORT
(0 disables). Each `Metrics` owns its registry."""

from __future__ import annotations

from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from shared import metrics

# Outcomes of an attempt: the receiver took it; it failed (a non-2xx, a timeout, a refused
# address, an SMTP error, no PUBACK); or it raised (hostile input or a bug), counted apart.
OUTCOMES = ("delivered", "failed", "error")


class Metrics:
    """The deliverer's metrics (names prefixed `sds_delivery_`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.attempts = Counter(
            "sds_delivery_attempts", "Delivery attempts by channel kind (webhook, email, mqtt, "
            "admins: the administrators' email, link: the service's own invitation and reset mail) "
            "and outcome (delivered, failed, error: the "
            "attempt raised)", ["kind", "outcome"], registry=r)
        self.attempt_seconds = Histogram(
            "sds_delivery_attempt_seconds", "Duration of delivery attempts by channel kind",
            ["kind"], registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.disabled = Counter("sds_delivery_channels_disabled",
                                "Channels disabled after too many failures in a row", registry=r)
        self.errors = Counter(
            "sds_delivery_worker_errors", "Rounds of a worker or the fan-out loop that ended in "
            "an error (database: reconnected; unexpected: a bug, logged with its traceback)",
            ["kind"], registry=r)
        self.due = Gauge("sds_delivery_due", "Deliveries due now that a worker may claim "
                         "(disabled channels' waiting deliveries not counted)", registry=r)
        self.oldest_due = Gauge("sds_delivery_oldest_due_seconds",
                                "Seconds the oldest claimable delivery has been due (0: none)",
                                registry=r)
        self.workers = Gauge("sds_delivery_workers", "Worker threads configured "
                             "(SDS_DELIVERY_WORKERS)", registry=r)
        self.workers_alive = Gauge("sds_delivery_workers_alive", "Worker threads running",
                                   registry=r)
        self.last_loop = Gauge(
            "sds_delivery_last_loop_timestamp_seconds", "Unix time the fan-out loop last "
            "completed a round (it runs at least every SDS_DELIVERY_SWEEP_INTERVAL)", registry=r)
        for kind in ("webhook", "email", "mqtt", "admins", "link"):
            for outcome in OUTCOMES:
                self.attempts.labels(kind, outcome)  # present at 0: rate() sees the first one
        for kind in ("database", "unexpected"):
            self.errors.labels(kind)

    def serve(self, port: int, addr: str) -> WSGIServer | None:
        """Start the HTTP endpoint in a daemon thread (port 0: disabled)."""
        return metrics.serve(self.registry, port, addr)
