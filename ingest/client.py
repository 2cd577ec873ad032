"""paho-mqtt wiring, batching and acknowledgement: the ingester's delivery guarantees.

- paho 2.x, `CallbackAPIVersion.VERSION2`, MQTT 5, a fixed client id, `clean_start=False` and a
  SessionExpiryInterval: the broker keeps the session and queues QoS 1 messages while the
  ingester is away (paho's default Clean Start would discard them on every restart).
- Subscriptions are made in `on_connect`, so every reconnect renews them. They cover all of
  `{prefix}/#` (a device's message on a topic the ingester does not accept is quarantined as
  `bad_topic`, not left without a subscriber) with Retain Handling 2: the broker never sends
  a stored retained message on (re)subscribing. A retained publish still reaches the ingester
  once, as it is published (or queued in the session while the ingester is away), so a
  reconnect can neither re-ingest nor re-quarantine it.
- `manual_ack=True`: a message is acknowledged only after the transaction holding its rows (or
  its quarantine row) committed, in receive order. A database error acknowledges nothing; the
  batch is retried on a new connection until it commits. A message is therefore stored and
  acked, quarantined and acked, or left unacked for the broker to redeliver.
- Acks carry the connection generation that delivered the message; an ack from an earlier
  connection is never sent on a later one (its message ids mean nothing there).
- The broker sends at most Receive Maximum unacknowledged messages (mosquitto honours the
  client's CONNECT property over max_inflight_messages), so a batch flushes when it reaches
  its size limit or when its oldest message has waited SDS_INGEST_FLUSH_INTERVAL, whichever
  comes first; a batch that waited for more than the window would stall forever.
- A database write that hangs (a blackholed network path: no error, no reply) is broken by the
  watchdog after SDS_INGEST_DB_WATCHDOG seconds (ingest/watchdog.py) and retried on a new
  connection; nothing is acknowledged while it is stuck.
- While it leads, the ingester also applies the quarantine retention hourly
  (ingest/quarantine.py).
- Leadership (ingest/leader.py) is a lease confirmed before every commit, by a heartbeat
  thread, before acknowledging a batch whose confirmation is no longer fresh (the process may
  have been frozen between its commit and its acks), and before every broker (re)connect: a
  leader that lost the lock sends no ack and never reconnects, so it cannot take the broker
  session back from the standby that replaced it.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import paho.mqtt.client as mqtt
import psycopg
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from ingest import topics, writer
from ingest.leader import Leader, LeadershipLost
from ingest.metrics import Metrics
from ingest.payload import INTERNAL_ERROR, Decoded, Limits, Rejection, decode_payload
from ingest.quarantine import Retention
from ingest.watchdog import Guarded, Watchdog
from shared import db
from shared.config import Settings
from shared.errors import InvalidReading

log = logging.getLogger(__name__)

FAULT_POINTS = ("after_receive", "after_insert_before_commit", "after_commit_before_ack")
FAULT_SIGNALS = {"KILL": signal.SIGKILL, "STOP": signal.SIGSTOP}
BATCH_BYTES = 16 * 1024 * 1024  # flush early when a batch holds this much payload
LEADER_POLL = 1.0  # seconds between a standby's attempts at the leader lock
STOP_GRACE = 10.0  # seconds a stopping ingester keeps retrying its last commit
DB_BACKOFF_MAX = 30.0
# Errors after which the same batch may succeed on a new connection: the server went away, was
# restarted, cancelled the statement, or chose this transaction as a deadlock victim.
TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError)
# SQLSTATE classes that blame the database's setup, not the rows: privileges and missing objects
# (28, 3D, 3F, 42), resources (53), object state (55), operator intervention (57), system and
# configuration errors (58, F0, XX). Quarantining on these would misfile good readings, so the
# batch waits (unacknowledged) and is retried until an operator fixes the cause.
SETUP_FAULT_CLASSES = frozenset({"28", "3D", "3F", "42", "53", "55", "57", "58", "F0", "XX"})


def retry_later(exc: psycopg.Error) -> bool:
    """True when the same batch may succeed later (lost connection, or a fault of the database's
    setup); False when the database refused the data itself."""
    return isinstance(exc, TRANSIENT) or (exc.sqlstate or "")[:2] in SETUP_FAULT_CLASSES


@dataclass(slots=True)
class _Inbound:
    """A received message, decoded, waiting for its batch; `generation` names the connection
    that delivered it (its ack is valid only there)."""

    generation: int
    mid: int
    qos: int
    message: writer.Message
    arrived: float  # time.monotonic()
    dup: bool = False  # the broker flagged it as a redelivery


class Ingester:
    """One ingester process: `run()` blocks until `stop()` (or SIGTERM via `install_signals`)."""

    def __init__(self, settings: Settings, *, metrics: Metrics | None = None) -> None:
        if settings.fault_at and settings.fault_at not in FAULT_POINTS:
            raise ValueError(f"SDS_FAULT_AT: {settings.fault_at!r} is not one of "
                             + ", ".join(FAULT_POINTS))
        if settings.ingest_db_watchdog <= 0 or settings.ingest_lock_timeout <= 0:
            raise ValueError("SDS_INGEST_DB_WATCHDOG and SDS_INGEST_LOCK_TIMEOUT must be "
                             "positive (seconds)")
        if settings.fault_signal not in FAULT_SIGNALS:
            raise ValueError(f"SDS_FAULT_SIGNAL: {settings.fault_signal!r} is not one of "
                             + ", ".join(FAULT_SIGNALS))
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.limits = Limits.from_settings(settings)
        self.receive_maximum = max(1, min(65535, settings.ingest_receive_maximum))
        self.batch_limit = max(1, min(settings.ingest_batch_size, self.receive_maximum))
        self._queue: queue.SimpleQueue[_Inbound] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._stop_at = 0.0
        self._lock = threading.Lock()  # guards _generation/_connected against ack()
        self._generation = 0
        self._connected = False
        self._connects = 0
        self._faults = 0
        self._conn: psycopg.Connection | None = None
        self.ready = threading.Event()  # set once subscribed (tests wait on it)
        self._lost = threading.Event()  # another ingester took the leader lock
        self._finished = threading.Event()  # run() is over: the heartbeat ends
        self.leader = Leader(settings.database_url, settings.mqtt_client_id,
                             lease=settings.ingest_lock_timeout)
        self.watchdog = Watchdog(settings.ingest_db_watchdog, on_fire=self._watchdog_fired)
        self._client = self._make_client()

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
        if not self._stopping.is_set():
            self._stop_at = time.monotonic()
            self._stopping.set()

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
        s = self.settings
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = s.mqtt_session_expiry
        props.ReceiveMaximum = self.receive_maximum
        log.info("connecting to mqtt %s:%d as %s (client id %s, receive maximum %d, batch %d)",
                 s.mqtt_host, s.mqtt_port, s.mqtt_username or "(anonymous)", s.mqtt_client_id,
                 self.receive_maximum, self.batch_limit)
        self._client.connect_async(s.mqtt_host, s.mqtt_port, keepalive=s.mqtt_keepalive,
                                   clean_start=False, properties=props)
        paho_log = logging.getLogger("paho")
        paho_log.addFilter(self._quiet_when_stopping)
        self._finished.clear()
        heartbeat = threading.Thread(target=self._heartbeat, name="leader-heartbeat",
                                     daemon=True)
        heartbeat.start()
        retention = Retention(s, stopped=self._finished,
                              on_deleted=self.metrics.quarantine_purged.inc)
        retention.start()
        self._client.loop_start()
        try:
            self._work()
            if self._lost.is_set():
                raise LeadershipLost("another ingester took the leader lock")
        finally:
            with self._lock:
                self._connected = False
                self._generation += 1
            self._finished.set()
            self._client.disconnect()
            self._client.loop_stop()
            paho_log.removeFilter(self._quiet_when_stopping)
            heartbeat.join(5)
            retention.join(5)
            if self._conn is not None:
                self._conn.close()
            self.leader.release()
            log.info("ingester stopped: %d messages acknowledged, %d acks withheld",
                     self.metrics.acked._value.get(), self.metrics.ack_skipped._value.get())

    def _lead(self) -> bool:
        """Block until this process holds the leader lock (False if stopped first)."""
        waiting = False
        delay = 0.5
        while not self._stopping.is_set():
            try:
                with self.watchdog.guard("leader lock attempt", self._lock_conns):
                    acquired = self.leader.try_acquire()
                if acquired:
                    log.info("holding the leader lock for client id %s",
                             self.settings.mqtt_client_id)
                    return True
                if not waiting:
                    log.info("standby: another ingester holds the lock for client id %s; "
                             "taking over when it stops", self.settings.mqtt_client_id)
                    waiting = True
                self._stopping.wait(LEADER_POLL)
            except psycopg.OperationalError as exc:
                log.warning("cannot reach the database for the leader lock, retrying in %.1f s:"
                            " %s", delay, str(exc).strip())
                self._stopping.wait(delay)
                delay = min(delay * 2, DB_BACKOFF_MAX)
        return False

    # ---- paho callbacks (paho's network thread) ----------------------------------------------

    def _make_client(self) -> mqtt.Client:
        s = self.settings
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=s.mqtt_client_id,
                             protocol=mqtt.MQTTv5, manual_ack=True)
        client.enable_logger(logging.getLogger("paho"))
        if s.mqtt_username:
            client.username_pw_set(s.mqtt_username, s.mqtt_password)
        if s.mqtt_tls_ca:
            client.tls_set(ca_certs=s.mqtt_tls_ca)
        client.reconnect_delay_set(min_delay=1, max_delay=30)
        client.on_pre_connect = self._on_pre_connect
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe
        return client

    def _quiet_when_stopping(self, record: logging.LogRecord) -> bool:
        # paho 2.2 logs "Client is not connected" at ERROR when its loop ends after our own
        # disconnect; that is the expected end of a graceful stop, not an error.
        return not (self._stopping.is_set() and "not connected" in str(record.msg))

    def _on_pre_connect(self, _client: mqtt.Client, _userdata: object) -> None:
        # Every (re)connect takes the broker session over from whoever holds it, so only the
        # lock holder may connect: a leader that was frozen and replaced must not take the
        # session back from its standby. An OSError makes paho skip this attempt and retry.
        if self._lost.is_set():
            raise ConnectionRefusedError("not connecting: another ingester holds the lock")
        if self.leader.fresh():
            return
        try:
            with self.watchdog.guard("leader check before connecting", self._lock_conns):
                self.leader.confirm()
        except LeadershipLost as exc:
            self._step_down(exc)
            raise ConnectionRefusedError("not connecting: another ingester holds the lock"
                                         ) from None
        except psycopg.OperationalError as exc:
            raise ConnectionRefusedError(
                f"not connecting: cannot confirm the leader lock ({str(exc).strip()})") from None

    def _on_connect(self, client: mqtt.Client, _userdata: object, flags: mqtt.ConnectFlags,
                    reason_code: ReasonCode, _props: Properties | None) -> None:
        if reason_code.is_failure:
            log.error("broker refused the connection: %s", reason_code)
            return
        with self._lock:
            self._generation += 1
            self._connected = True
        self._connects += 1
        self.metrics.connects.inc()
        self.metrics.session_present.set(1 if flags.session_present else 0)
        if flags.session_present:
            log.info("connected; broker resumed the session")
        elif self._connects > 1:
            self.metrics.session_lost.inc()
            log.error("connected, but the broker had no session for %s: messages queued for the "
                      "ingester while it was away may be lost", self.settings.mqtt_client_id)
        else:
            log.info("connected; new session (first start, or the broker lost the old one)")
        opts = SubscribeOptions(qos=1, retainHandling=SubscribeOptions.RETAIN_DO_NOT_SEND)
        client.subscribe([(t, opts) for t in topics.subscriptions(self.settings.topic_prefix)])

    def _on_subscribe(self, _client: mqtt.Client, _userdata: object, _mid: int,
                      reason_codes: list[ReasonCode], _props: Properties | None) -> None:
        failed = [rc for rc in reason_codes if rc.is_failure]
        if failed:
            log.error("subscription refused: %s", ", ".join(str(rc) for rc in failed))
        else:
            self.ready.set()

    def _on_disconnect(self, _client: mqtt.Client, _userdata: object,
                       _flags: mqtt.DisconnectFlags, reason_code: ReasonCode,
                       _props: Properties | None) -> None:
        with self._lock:
            self._generation += 1
            self._connected = False
        if not self._stopping.is_set():
            log.warning("disconnected from the broker (%s); reconnecting", reason_code)

    def _on_message(self, _client: mqtt.Client, _userdata: object,
                    msg: mqtt.MQTTMessage) -> None:
        try:
            topic = msg.topic
        except UnicodeDecodeError:
            topic = repr(msg._topic)  # mosquitto refuses such topics; kept for the record
        # Decoding here (pure, see payload.py) overlaps with the worker's wait for the database.
        item = self.inbound(self._generation, msg.mid, msg.qos, topic, msg.payload)
        item.dup = bool(msg.dup)
        self._queue.put(item)

    def inbound(self, generation: int, mid: int, qos: int, topic: str,
                payload: bytes) -> _Inbound:
        """A received message, decoded and validated, ready for a batch."""
        received = datetime.now(UTC)
        try:
            message = self._decode(topic, payload, received)
        except Exception as exc:  # a decoder bug must not kill paho's network thread
            log.exception("decoding a message on %s failed", topic)
            message = writer.Message(topic, payload, received, None, None, Decoded(
                rejections=[Rejection(None, INTERNAL_ERROR, f"decoder failed: {exc!r}")]))
        return _Inbound(generation, mid, qos, message, time.monotonic())

    def _decode(self, topic: str, payload: bytes, received: datetime) -> writer.Message:
        try:
            where = topics.parse_topic(topic, self.settings.topic_prefix)
        except InvalidReading as exc:
            return writer.Message(topic, payload, received,
                                  topics.topic_device(topic, self.settings.topic_prefix), None,
                                  Decoded(rejections=[Rejection(None, exc.code, exc.detail)]))
        decoded = decode_payload(payload, kind=where.kind, device=where.device,
                                 now=received, limits=self.limits)
        if decoded.unknown_fields:
            self.metrics.unknown_fields.inc(decoded.unknown_fields)
        return writer.Message(topic, payload, received, where.device, where.kind, decoded)

    # ---- worker (the thread that called run) -------------------------------------------------

    def _work(self) -> None:
        interval = self.settings.ingest_flush_interval
        batch: list[_Inbound] = []
        size = 0
        deadline = 0.0
        while not self._stopping.is_set():
            # Bounded wait, so a stop request is seen within 0.2 s whatever the interval.
            timeout = min(0.2, max(0.0, deadline - time.monotonic())) if batch else 0.2
            try:
                item: _Inbound | None = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            while item is not None:
                self._fault("after_receive")
                if not batch:
                    deadline = item.arrived + interval
                batch.append(item)
                size += len(item.message.payload)
                if len(batch) >= self.batch_limit or size >= BATCH_BYTES:
                    break
                # Take what is already waiting before deciding to flush: when the worker falls
                # behind, every queued message is past its deadline, and flushing one at a
                # time would make it fall further behind.
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
            self.metrics.held.set(len(batch))
            if batch and (len(batch) >= self.batch_limit or size >= BATCH_BYTES
                          or time.monotonic() >= deadline):
                self._flush(batch)
                batch, size = [], 0
                self.metrics.held.set(0)
        # Stopping: what was already received is committed and acked; anything later is left
        # for the broker to redeliver to the next run.
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for start in range(0, len(batch), self.batch_limit):
            self._flush(batch[start:start + self.batch_limit])

    def _flush(self, batch: list[_Inbound]) -> None:
        """Commit one batch (retrying transient database errors), then ack it in order."""
        self.metrics.received.inc(len(batch))
        messages = [item.message for item in batch]
        result = self._commit(messages)
        if result is None:
            # Only when stopping with the database unreachable: nothing is acked, the broker
            # redelivers these messages to the next run.
            log.warning("stopping with %d messages not committed (the broker keeps them)",
                        len(batch))
            return
        redelivered = sum(1 for item in batch if item.dup)
        if redelivered:
            self.metrics.redelivered.inc(redelivered)
            # INFO only here: redeliveries follow a crash or a lost connection, they are rare.
            log.info("batch of %d with %d redelivered (DUP) messages: %d readings were already "
                     "stored (duplicates suppressed)", len(batch), redelivered,
                     result.duplicates)
        self._fault("after_commit_before_ack")
        if not self._may_ack(len(batch)):
            return
        acked = skipped = 0
        for item in batch:
            with self._lock:
                if item.generation == self._generation and self._connected:
                    self._client.ack(item.mid, item.qos)
                    acked += 1
                else:
                    skipped += 1
        m = self.metrics
        m.acked.inc(acked)
        if skipped:
            m.ack_skipped.inc(skipped)
            log.info("%d acks not sent: their connection is gone (the broker redelivers)",
                     skipped)
        m.stored.labels("calibrated").inc(result.stored)
        m.stored.labels("health").inc(result.health_stored)
        m.duplicates.inc(result.duplicates)
        for reason, n in result.quarantined.items():
            m.quarantined.labels(reason).inc(n)
        for device, n in result.quarantine_rows.items():
            m.quarantine_rows.labels(device).inc(n)
        for device, n in result.quarantine_bytes.items():
            m.quarantine_bytes.labels(device).inc(n)
        m.batch_messages.observe(len(batch))
        m.batch_seconds.observe(time.monotonic() - batch[0].arrived)
        log.debug("batch of %d messages: %d stored, %d duplicates, %d health, %s quarantined",
                  len(batch), result.stored, result.duplicates, result.health_stored,
                  dict(result.quarantined) or 0)

    def _may_ack(self, count: int) -> bool:
        """Confirm leadership before acknowledging when the last confirmation is stale (a long
        commit, or the process was frozen after its commit). False: do not ack (stopping with
        the database unreachable; the broker redelivers). Raises LeadershipLost."""
        delay = 0.5
        while not self.leader.fresh():
            try:
                with self.watchdog.guard("leader check before acking", self._lock_conns):
                    self.leader.confirm()
            except LeadershipLost as exc:
                self.metrics.ack_skipped.inc(count)
                log.error("leadership lost after a commit: %d acks not sent (the new leader "
                          "gets these messages again; their rows are stored)", count)
                self._step_down(exc)
                raise
            except TRANSIENT as exc:
                log.warning("cannot confirm the leader lock before acking, retrying in %.1f s:"
                            " %s", delay, str(exc).strip() or type(exc).__name__)
                if not self._back_off(delay):
                    return False
                delay = min(delay * 2, DB_BACKOFF_MAX)
        return True

    def _heartbeat(self) -> None:
        """Confirm the leader lock several times per lease, so PostgreSQL keeps its session
        (idle_session_timeout) while this process is alive and responsive; step down at once
        when another ingester took the lock."""
        every = max(0.1, self.settings.ingest_lock_timeout / 4)
        while not self._finished.wait(every):
            try:
                with self.watchdog.guard("leader heartbeat", self._lock_conns):
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

    def _lock_conns(self) -> list[psycopg.Connection | None]:
        return self.leader.connections()

    def _db_conns(self) -> list[psycopg.Connection | None]:
        return [self._conn, *self.leader.connections()]

    def _watchdog_fired(self, entry: Guarded, stuck: float) -> None:
        self.metrics.db_watchdog.inc()

    def _commit(self, messages: list[writer.Message]) -> writer.BatchResult | None:
        delay = 0.5
        while True:
            try:
                with self.watchdog.guard(f"batch write of {len(messages)}", self._db_conns):
                    conn = self._db()
                    with conn.transaction():
                        result = writer.write_batch(conn, messages)
                        self._fault("after_insert_before_commit")
                        # As late as possible before the commit that allows the acks.
                        self.leader.confirm()
                return result
            except psycopg.Error as exc:
                self.metrics.db_errors.inc()
                if retry_later(exc):
                    log.log(logging.WARNING if isinstance(exc, TRANSIENT) else logging.ERROR,
                            "database error (%s), batch of %d not committed, retrying in "
                            "%.1f s: %s", exc.sqlstate or type(exc).__name__, len(messages),
                            delay, str(exc).strip() or type(exc).__name__)
                    if not self._back_off(delay):
                        return None
                    delay = min(delay * 2, DB_BACKOFF_MAX)
                    continue
                # The database refused the data itself; retrying the same rows would stall the
                # ingester forever. Split the batch to find the message, keep it in quarantine.
                if len(messages) > 1:
                    log.warning("database refused a batch of %d (%s); retrying one by one",
                                len(messages), type(exc).__name__)
                    total = writer.BatchResult()
                    for msg in messages:
                        one = self._commit([msg])
                        if one is None:
                            return None
                        total.add(one)
                    return total
                log.exception("database refused message on %s; quarantined", messages[0].topic)
                return self._quarantine_refused(messages, exc)

    def _quarantine_refused(self, messages: list[writer.Message],
                            exc: psycopg.Error) -> writer.BatchResult | None:
        detail = f"database refused the message: {type(exc).__name__}: {exc}".strip()[:2000]
        delay = 0.5
        while True:
            try:
                with self.watchdog.guard("quarantine write", self._db_conns):
                    conn = self._db()
                    with conn.transaction():
                        result = writer.quarantine_messages(conn, messages,
                                                            code=writer.DB_REJECTED,
                                                            detail=detail)
                        self.leader.confirm()
                return result
            except psycopg.Error as exc:
                # Whatever the cause, never ack what is not stored: wait and retry.
                self.metrics.db_errors.inc()
                log.log(logging.WARNING if isinstance(exc, TRANSIENT) else logging.ERROR,
                        "database error while quarantining, retrying in %.1f s: %s", delay,
                        str(exc).strip() or type(exc).__name__)
                if not self._back_off(delay):
                    return None
                delay = min(delay * 2, DB_BACKOFF_MAX)

    def _back_off(self, delay: float) -> bool:
        """Drop the connection and wait before a retry; False when a stop's grace ran out."""
        self._drop_db()
        if not self._stopping.is_set():
            self._stopping.wait(delay)  # a stop request ends the wait early
            return True
        if time.monotonic() - self._stop_at > STOP_GRACE:
            return False
        time.sleep(min(delay, 1.0))
        return True

    # ---- database connection -----------------------------------------------------------------

    def _db(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            lease_ms = max(1, int(self.settings.ingest_lock_timeout * 1000))
            # synchronous_commit=on for this session whatever the server default: an ack
            # promises the row survives a server crash. TCP keepalives and tcp_user_timeout
            # turn a silently vanished server into an error instead of a hang.
            conn = db.connect(
                self.settings, name="sds-ingest", autocommit=True, connect_timeout=10,
                keepalive_probes=3, tcp_user_timeout=30000,
                server={"synchronous_commit": "on", "statement_timeout": 60000,
                        # A leader frozen mid-transaction must not keep its row locks (and its
                        # standby's writes waiting) for longer than the lock's lease.
                        "idle_in_transaction_session_timeout": lease_ms})
            try:
                # Least privilege (docs/security.md "Database roles"): insert, never rewrite.
                role = db.role_for(self.settings, db.ROLE_INGEST)
                if role:
                    db.set_role(conn, role)
                writer.prepare(conn)
            except psycopg.Error as exc:
                conn.close()
                # A session that cannot be set up (role missing, privileges revoked) says
                # nothing about the rows: retry later rather than quarantine them.
                raise psycopg.OperationalError(f"database session setup failed: {exc}") from exc
            self._conn = conn
            log.info("connected to the database")
        return self._conn

    def _drop_db(self) -> None:
        db.close_quietly(self._conn)
        self._conn = None

    def _fault(self, point: str) -> None:
        """Test hook: SIGKILL this process at the configured point (never set in production)."""
        if self.settings.fault_at != point:
            return
        self._faults += 1
        if self._faults % max(1, self.settings.fault_every) == 0:
            name = self.settings.fault_signal
            log.warning("fault injection: SIG%s at %s (%d messages acknowledged so far)", name,
                        point, self.metrics.acked._value.get())
            if name == "KILL":
                logging.shutdown()
            else:
                for handler in logging.getLogger().handlers:
                    handler.flush()
            os.kill(os.getpid(), FAULT_SIGNALS[name])
