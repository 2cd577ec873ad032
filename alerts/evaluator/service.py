"""The alert evaluator (`python -m alerts.evaluator`): the process, one active per database.

The process waits for the lock `sds-alerts-evaluator` (shared.locks; a second instance is a
standby that takes over within LOCK_POLL seconds of the holder's end), then LISTENs on the
lock's own session:
- `sds_ingested` (ingest/committer.py, at each commit: the devices it wrote) -> a pass over
  those devices' new readings, health reports, quarantine counts and last contact;
- `sds_rollups` (aggregate/jobs.py, after rollup buckets were rewritten) -> a pass over the
  rewritten buckets;
- `sds_alert_rules` (the API, after a rule changed) -> the rules are read again.
Notifications arriving together are folded into one pass (BURST seconds; while behind, as
long as they keep coming, up to GATHER_MAX seconds). Every
SDS_ALERT_SWEEP_INTERVAL seconds a sweep passes over every watched device and table: it drives
the `silent` kind, catches anything a missed NOTIFY would have missed, and reloads the rules.
Each pass commits in one transaction after checking the lock is still this process's
(alerts/evaluator/passes.py); the lock, its session and the one `LeadershipLost` are
shared.locks.Leadership, as for the ingester and the rollup scheduler. Metrics
(alerts/evaluator/metrics.py) on SDS_METRICS_BIND:SDS_ALERTS_METRICS_PORT.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

import psycopg

from alerts.evaluator import repeats, store
from alerts.evaluator.metrics import Metrics
from alerts.evaluator.passes import Evaluator
from shared import db
from shared.config import Settings
from shared.locks import Leadership, LeadershipLost, SessionLock
from shared.logs import configure_logging

log = logging.getLogger("alerts.evaluator")

LOCK_NAME = "sds-alerts-evaluator"
LOCK_POLL = 2.0  # seconds between a standby's attempts at the lock
# Seconds to gather the notifications that follow the first into one pass: a backlog's
# commits (several a second) then make a few large passes instead of many small ones, each
# with its round trips and commit (bench.alerts: 23 passes for 12,000 readings at 0.05 s).
# A reading waits at most this long more for its event.
BURST = 0.25
# Behind (the last pass took BEHIND_PASS seconds or more and notifications were waiting as
# it ended: a backlog's drain), the gather goes on while each BEHIND_BURST brings more, up to
# GATHER_MAX seconds: fewer, larger passes (each device's rows read by one index scan instead
# of several; bench.alerts' drain of 12,000 readings made 10-24 passes, with commits 0.2-0.3 s
# apart on a loaded machine). A lone reading, or a steady stream of passes that stay short
# (tests/alerts/test_delivery_ledger.py: 15 readings a second), waits BURST.
BEHIND_BURST = 0.5
BEHIND_PASS = 0.1  # a pass over 1,000 devices on a loaded machine; one device's: milliseconds
GATHER_MAX = 2.0
# Seconds between writes of the cursors (alerts/evaluator/passes.py explains why a restart
# may read again, but never evaluate twice, the readings of these last seconds).
CURSOR_EVERY = 5.0
CHANNELS = ("sds_ingested", "sds_rollups", "sds_alert_rules")
PURGE_EVERY = 3600.0  # seconds between deletions of events past their retention


class Process:
    """The evaluator process: lock, listen, evaluate; until `stop` is set."""

    def __init__(self, settings: Settings, stop: threading.Event,
                 metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.stop = stop
        self.metrics = metrics or Metrics()
        self.leadership = Leadership(SessionLock(settings, LOCK_NAME,
                                                 application_name="sds-alerts-lock",
                                                 keepalive_probes=2))
        self.passes = 0
        self.last_pass = 0.0  # seconds the last pass took

    def run(self) -> None:
        """Serve as evaluator whenever holding the lock, until stopped."""
        while not self.stop.is_set():
            try:
                self._serve()
            except (psycopg.OperationalError, psycopg.InterfaceError, LeadershipLost) as exc:
                log.warning("evaluator: %s; waiting %.0f s to start again", exc, LOCK_POLL)
                self.stop.wait(LOCK_POLL)

    def _take_lock(self) -> bool:
        """Poll for the lock until taken (True) or stopped (False)."""
        while not self.stop.is_set():
            if self.leadership.try_acquire():
                return True
            self.stop.wait(LOCK_POLL)
        return False

    def _serve(self) -> None:
        if not self._take_lock():
            return
        work = None
        try:
            lock_conn = self.leadership.session
            for channel in CHANNELS:  # before the first pass: nothing committed after is missed
                lock_conn.execute(f"LISTEN {channel}")
            # synchronous_commit off: a pass commits without waiting for its WAL flush (on a
            # busy disk most of a pass's time). A database crash can lose the last passes;
            # their cursors go with them, so the readings are evaluated again and the events
            # written again with the same ids (passes.event_id_of), never twice.
            work = db.connect(self.settings, name="sds-alerts", role=db.ROLE_ALERTS,
                              keepalive_probes=3,
                              server={"statement_timeout": 60000, "synchronous_commit": "off"})
            log.info("evaluator lock taken (backend pid %s)", self.leadership.pid)
            self.metrics.leader.set(1)
            self._loop(lock_conn, work)
        finally:
            self.metrics.leader.set(0)
            db.close_quietly(work)
            self.leadership.release()  # closing the lock session frees the lock

    def _loop(self, lock_conn: psycopg.Connection, work: psycopg.Connection) -> None:
        ev = Evaluator(self.settings, cursor_every=CURSOR_EVERY)
        ev.reload(work)
        # Each pass checks, inside its transaction, that the lock is still this process's.
        guard = self.leadership.guard
        interval = max(0.5, self.settings.alert_sweep_interval)
        next_sweep = 0.0
        next_purge = time.monotonic() + 60.0
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_sweep:
                ev.reload(work)
                self.metrics.rules.set(len(ev.catalogue.rules))
                self._pass(ev, work, None, rollups=True, guard=guard)
                self._remind(work, guard)
                next_sweep = time.monotonic() + interval
            if now >= next_purge:
                self._purge(work)
                next_purge = time.monotonic() + PURGE_EVERY
            devices, rollups, rules = _gather(lock_conn, min(1.0, next_sweep - now),
                                              busy=self.last_pass >= BEHIND_PASS)
            if rules:
                ev.reload(work)
                self.metrics.rules.set(len(ev.catalogue.rules))
            if devices or rollups:
                self._pass(ev, work, devices, rollups=rollups, guard=guard)
            elif ev.unsaved and ev.cursors_due():
                ev.flush(work, guard)  # idle: the last passes' cursors
        ev.flush(work, guard)  # a clean stop: a restart starts where this one ended

    def _pass(self, ev: Evaluator, work: psycopg.Connection, devices: set[str] | None, *,
              rollups: bool, guard: Callable[[psycopg.Connection], None]) -> None:
        trigger = "sweep" if devices is None else "ingest" if devices else "rollups"
        started = time.monotonic()
        try:
            outcome = ev.run(work, devices, rollups=rollups, guard=guard)
        except BaseException:
            self.metrics.failures.inc()
            raise
        m = self.metrics
        self.last_pass = time.monotonic() - started
        m.passes.labels(trigger).observe(self.last_pass)
        for phase, seconds in outcome.seconds.items():
            m.phases.labels(phase).inc(seconds)
        m.samples.inc(outcome.samples)
        m.steps.inc(outcome.steps)
        m.last_pass.set_to_current_time()
        for event in outcome.events:
            m.events.labels(event.kind).inc()
        self.passes += 1
        if outcome.events:
            log.info("pass over %s: %d samples, %d events (%.3f s)",
                     "all devices" if devices is None else f"{len(devices)} devices",
                     outcome.samples, len(outcome.events), time.monotonic() - started)

    def _remind(self, work: psycopg.Connection,
                guard: Callable[[psycopg.Connection], None]) -> None:
        """The repeat interval's reminders of rules still firing (alerts/evaluator/repeats)."""
        with work.transaction():
            n = repeats.remind(work)
            guard(work)
        if n:
            self.metrics.events.labels("firing").inc(n)
            log.info("%d reminders of rules still firing", n)

    def _purge(self, work: psycopg.Connection) -> None:
        days = self.settings.alert_event_retention_days
        if days <= 0:
            return
        try:
            with work.transaction():
                n = store.purge_events(work, days)
            if n:
                log.info("deleted %d alert events older than %d days", n, days)
        except psycopg.errors.DatabaseError as exc:  # e.g. a delivery still refers to one
            log.warning("alert event retention: %s", exc)


def _gather(conn: psycopg.Connection, timeout: float, *, busy: bool = False
            ) -> tuple[set[str], bool, bool]:
    """Notifications within `timeout` s and the burst after the first; behind (`busy`: the
    last pass was long, and notifications are already waiting), the longer bursts that follow
    as long as each brings more, up to GATHER_MAX s. Devices written, whether rollups were
    rewritten, whether rules changed."""
    devices: set[str] = set()
    rollups = rules = False

    def take(wait: float, most: int | None) -> int:
        nonlocal rollups, rules
        got = 0
        for note in conn.notifies(timeout=wait, stop_after=most):
            got += 1
            if note.channel == "sds_ingested":
                devices.update(n for n in note.payload.split("\n") if n)
            elif note.channel == "sds_rollups":
                rollups = True
            else:
                rules = True
        return got

    waiting = take(0.0, None) > 0  # they came during the last pass
    behind = waiting and busy
    if not waiting and not take(max(0.0, timeout), 1):
        return devices, rollups, rules
    ends = time.monotonic() + GATHER_MAX
    burst = BEHIND_BURST if behind else BURST
    while take(min(burst, max(0.0, ends - time.monotonic())), None) and behind \
            and time.monotonic() < ends:
        pass
    return devices, rollups, rules


def main() -> None:
    """Entry point: settings, logging, signals, then the process until SIGTERM or SIGINT."""
    settings = Settings.from_env(os.environ)
    configure_logging(settings)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics = Metrics()
    metrics.serve(settings.alerts_metrics_port, settings.metrics_bind)
    Process(settings, stop, metrics).run()
    log.info("evaluator stopped")
