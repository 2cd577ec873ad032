"""Prometheus metrics of the alert evaluator, served on SDS_METRICS_BIND:
SDS_ALERTS_METRICS_PORT (0 disables). Each `Metrics` owns its registry."""

from __future__ import annotations

from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from shared import metrics


class Metrics:
    """The evaluator's metrics (names prefixed `sds_alerts_`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.passes = Histogram(
            "sds_alerts_pass_seconds", "Evaluation passes and their duration (read, step, "
            "commit), by trigger (ingest, rollups, sweep)", ["trigger"], registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.phases = Counter("sds_alerts_pass_phase_seconds", "Seconds of passes by phase: "
                              "read_step (read and step the machines), write (events, "
                              "states, cursors, lock check), commit", ["phase"], registry=r)
        self.samples = Counter("sds_alerts_samples", "Readings, buckets and current values "
                               "read by passes", registry=r)
        self.steps = Counter("sds_alerts_steps", "State machine steps (one sample applied to "
                             "one rule and device)", registry=r)
        self.events = Counter("sds_alerts_events", "Events written, by kind", ["kind"],
                              registry=r)
        self.failures = Counter("sds_alerts_pass_failures", "Passes rolled back (database "
                                "error, lost lock)", registry=r)
        self.leader = Gauge("sds_alerts_leader", "1 while this process holds the evaluator "
                            "lock", registry=r)
        self.rules = Gauge("sds_alerts_rules", "Active rules loaded", registry=r)
        # The evaluator is behind when this stops moving: a leader sweeps every
        # SDS_ALERT_SWEEP_INTERVAL and passes on every ingest commit.
        self.last_pass = Gauge("sds_alerts_last_pass_timestamp_seconds", "Unix time the last "
                               "pass committed (0: none yet by this process)", registry=r)

    def serve(self, port: int, addr: str) -> WSGIServer | None:
        """Start the HTTP endpoint in a daemon thread (port 0: disabled)."""
        return metrics.serve(self.registry, port, addr)
