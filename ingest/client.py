"""The ingester process: leadership, lifecycle and the parts it wires together.

The work is split in four parts, each in its own module:

- `ingest/handler.py`: what one message becomes (`Handler.handle(topic, payload)`), pure;
- `ingest/mqtt.py`: the paho wiring (connection, session, subscriptions, acks by generation);
- `ingest/committer.py`: batching, the transaction, acknowledgement after commit;
- `ingest/faults.py`: the test-only fault hook.

This module holds what ties them: an ingester connects to the broker only while it holds the
leader lock (ingest/leader.py), a lease confirmed by a heartbeat thread, before every commit,
before acknowledging a batch whose confirmation is no longer fresh, and before every broker
(re)connect: a leader that lost the lock sends no ack and never reconnects, so it cannot take
the broker session back from the standby that replaced it. While it leads it also applies the
quarantine retention hourly (ingest/quarantine.py).
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import psycopg

from ingest.committer import DB_BACKOFF_MAX, TRANSIENT, Committer, Delivery, Stopping
from ingest.faults import FaultHook
from ingest.handler import Handler
from ingest.leader import Leader, LeadershipLost
from ingest.metrics import Metrics
from ingest.mqtt import MqttLink
from ingest.payload import Limits
from ingest.quarantine import Retention
from ingest.shards import runs_retention, shard_settings
from ingest.watchdog import Guarded, Watchdog
from shared.config import Settings

log = logging.getLogger(__name__)

LEADER_POLL = 1.0  # seconds between a standby's attempts at the leader lock
RETIRE_IDLE = 3.0  # a retiring session is drained once nothing arrived for this long


class Ingester:
    """One ingester process: `run()` blocks until `stop()` (or SIGTERM via `install_signals`)."""

    def __init__(self, settings: Settings, *, metrics: Metrics | None = None,
                 retire: bool = False) -> None:
        if settings.ingest_db_watchdog <= 0 or settings.ingest_lock_timeout <= 0:
            raise ValueError("SDS_INGEST_DB_WATCHDOG and SDS_INGEST_LOCK_TIMEOUT must be "
                             "positive (seconds)")
        settings = shard_settings(settings)  # this shard's identity (unchanged with one)
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.metrics.shard.labels(str(settings.ingest_shard), str(settings.ingest_shards),
                                  settings.mqtt_client_id).set(1)
        self.fault = FaultHook(settings, progress=self.metrics.acked._value.get)
        self.handler = Handler(settings.topic_prefix, Limits.from_settings(settings))
        self._stopping = Stopping()
        self._lost = threading.Event()  # another ingester took the leader lock
        self._finished = threading.Event()  # run() is over: the heartbeat ends
        self._drained = threading.Event()  # retiring: unsubscribed and nothing more arrives
        self.leader = Leader(settings.database_url, settings.mqtt_client_id,
                             lease=settings.ingest_lock_timeout)
        self.watchdog = Watchdog(settings.ingest_db_watchdog, on_fire=self._watchdog_fired)
        self.link = MqttLink(settings, self.metrics, on_message=self._on_message,
                             may_connect=self._may_connect, stopping=self._stopping.event,
                             retire=retire)
        self.committer = Committer(
            settings, self.metrics, ack=self.link.ack, leader=self.leader,
            watchdog=self.watchdog, fault=self.fault, stopping=self._stopping,
            step_down=self._step_down, window=self.link.receive_maximum)
        self._queue = self.committer.inbox()
        self.ready = self.link.ready  # set once subscribed (tests wait on it)

    # ---- lifecycle ---------------------------------------------------------------------------

    def install_signals(self) -> None:
        """SIGTERM and SIGINT stop the ingester gracefully (flush, commit, ack, disconnect)."""
        def handler(signum: int, _frame: object) -> None:
            log.info("signal %d: stopping after the current batch", signum)
            self.stop()
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def stop(self) -> None:
        """Ask `run()` to flush what it holds, acknowledge what committed and return."""
        self._stopping.request()

    def run(self) -> None:
        """Wait to be the leader, connect (retrying with back-off) and ingest until stopped.

        Raises LeadershipLost if another ingester took the lock over (nothing more is acked).
        """
        self.watchdog.start()  # from the first lock attempt on: a standby must not hang either
        try:
            self._run()
        finally:
            self.watchdog.stop()

    def _run(self) -> None:
        if not self._lead():
            log.info("stopped while standing by")
            return
        log.info("batches of at most %d messages", self.committer.batch_limit)
        self._finished.clear()
        heartbeat = threading.Thread(target=self._heartbeat, name="leader-heartbeat",
                                     daemon=True)
        heartbeat.start()
        retention = Retention(self.settings, stopped=self._finished,
                              on_deleted=self.metrics.quarantine_purged.inc)
        if runs_retention(self.settings) and not self.link.retire:
            retention.start()
        if self.link.retire:
            threading.Thread(target=self._retire_when_drained, name="retire", daemon=True
                             ).start()
        self._open_database()
        self.link.start()
        drained = False
        try:
            self.committer.work(self._queue)
            drained = self.link.retire and self._drained.is_set()
            if self._lost.is_set():
                raise LeadershipLost("another ingester took the leader lock")
        finally:
            self._finished.set()
            self.link.close(end_session=drained)
            if drained:
                log.info("retired: session %s drained and ended", self.settings.mqtt_client_id)
            heartbeat.join(5)
            retention.join(5)
            self.committer.drop_db()
            self.leader.release()
            log.info("ingester stopped: %d messages acknowledged, %d acks withheld",
                     self.metrics.acked._value.get(), self.metrics.ack_skipped._value.get())

    def _open_database(self) -> None:
        """Open the write session before the broker delivers (the first batch then starts
        writing at once); if it fails, the first batch retries it with back-off."""
        try:
            with self.watchdog.guard("opening the database session", self.committer.connections):
                self.committer.db()
        except psycopg.Error as exc:
            log.warning("cannot open the database session yet (the first batch retries): %s",
                        str(exc).strip() or type(exc).__name__)

    def _lead(self) -> bool:
        """Block until this process holds the leader lock (False if stopped first)."""
        waiting = False
        delay = 0.5
        stopping = self._stopping.event
        while not stopping.is_set():
            try:
                with self.watchdog.guard("leader lock attempt", self.leader.connections):
                    acquired = self.leader.try_acquire()
                if acquired:
                    log.info("holding the leader lock for client id %s",
                             self.settings.mqtt_client_id)
                    return True
                if not waiting:
                    log.info("standby: another ingester holds the lock for client id %s; "
                             "taking over when it stops", self.settings.mqtt_client_id)
                    waiting = True
                stopping.wait(LEADER_POLL)
            except psycopg.OperationalError as exc:
                log.warning("cannot reach the database for the leader lock, retrying in %.1f s:"
                            " %s", delay, str(exc).strip())
                stopping.wait(delay)
                delay = min(delay * 2, DB_BACKOFF_MAX)
        return False

    def _retire_when_drained(self) -> None:
        """Retiring: once unsubscribed, stop when nothing has arrived for RETIRE_IDLE seconds
        and every batch is committed (the stop then acks it and ends the session)."""
        while not self.link.unsubscribed.wait(0.5):
            if self._finished.is_set():
                return
        seen, quiet_since = -1.0, time.monotonic()
        while not self._finished.wait(0.2):
            received = self.metrics.received._value.get()
            busy = not self._queue.empty() or self.metrics.held._value.get()
            if received != seen or busy:
                seen, quiet_since = received, time.monotonic()
            elif time.monotonic() - quiet_since >= RETIRE_IDLE:
                self._drained.set()
                self.stop()
                return

    # ---- called from paho's network thread ---------------------------------------------------

    def _on_message(self, generation: int, mid: int, qos: int, topic: str, payload: bytes,
                    dup: bool) -> None:
        # Decoding here (pure, see payload.py) overlaps with the worker's wait for the database.
        item = self.inbound(generation, mid, qos, topic, payload)
        item.dup = item.message.dup = dup
        self._queue.put(item)

    def inbound(self, generation: int, mid: int, qos: int, topic: str,
                payload: bytes) -> Delivery:
        """A received message, decoded and validated, ready for a batch."""
        message = self.handler.handle(topic, payload)
        if message.decoded.unknown_fields:
            self.metrics.unknown_fields.inc(message.decoded.unknown_fields)
        return Delivery(generation, mid, qos, message, time.monotonic())

    def _may_connect(self) -> None:
        # Every (re)connect takes the broker session over from whoever holds it, so only the
        # lock holder may connect: a leader that was frozen and replaced must not take the
        # session back from its standby. An OSError makes paho skip this attempt and retry.
        if self._lost.is_set():
            raise ConnectionRefusedError("not connecting: another ingester holds the lock")
        if self.leader.fresh():
            return
        try:
            with self.watchdog.guard("leader check before connecting", self.leader.connections):
                self.leader.confirm()
        except LeadershipLost as exc:
            self._step_down(exc)
            raise ConnectionRefusedError("not connecting: another ingester holds the lock"
                                         ) from None
        except psycopg.OperationalError as exc:
            raise ConnectionRefusedError(
                f"not connecting: cannot confirm the leader lock ({str(exc).strip()})") from None

    # ---- leadership --------------------------------------------------------------------------

    def _heartbeat(self) -> None:
        """Confirm the leader lock several times per lease, so PostgreSQL keeps its session
        (idle_session_timeout) while this process is alive and responsive; step down at once
        when another ingester took the lock."""
        every = max(0.1, self.settings.ingest_lock_timeout / 4)
        while not self._finished.wait(every):
            try:
                with self.watchdog.guard("leader heartbeat", self.leader.connections):
                    self.leader.confirm()
            except LeadershipLost as exc:
                self._step_down(exc)
                return
            except TRANSIENT as exc:
                log.warning("leader heartbeat failed (retrying): %s",
                            str(exc).strip() or type(exc).__name__)

    def _step_down(self, exc: Exception) -> None:
        if not self._lost.is_set():
            self._lost.set()
            log.error("leadership lost (%s): no more acks, no reconnects; stopping", exc)
        self.stop()

    def _watchdog_fired(self, entry: Guarded, stuck: float) -> None:
        self.metrics.db_watchdog.inc()
