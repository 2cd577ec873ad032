"""The committer: batch received messages, write each batch in one transaction, then ack.

- A message is acknowledged only after the transaction holding its rows (or its quarantine
  row) committed, in receive order. A database error acknowledges nothing; the batch is retried
  on a new connection until it commits. A message is therefore stored and acked, quarantined and
  acked, or left unacked for the broker to redeliver.
- A batch flushes when it reaches its size limit (never above the MQTT window, Receive
  Maximum), or BATCH_BYTES of payload, or when its oldest message has waited
  SDS_INGEST_FLUSH_INTERVAL (or nothing arrived for QUIET_FRACTION of it), whichever comes
  first; a batch that waited for more than the window would stall forever. Paho's thread hands
  messages over through an `Inbox`, which wakes the committer when a batch falls due, not per
  message.
- A database write that hangs (a blackholed network path: no error, no reply) is broken by the
  watchdog after SDS_INGEST_DB_WATCHDOG seconds (ingest/watchdog.py) and retried on a new
  connection; nothing is acknowledged while it is stuck.
- Leadership (ingest/leader.py) is confirmed before every commit, and again before acking a
  batch whose confirmation is no longer fresh (the process may have been frozen between its
  commit and its acks); a lost lock stops all acks.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from ingest import quarantine, writer
from ingest.faults import FaultHook
from ingest.handler import Message
from ingest.leader import Leader, LeadershipLost
from ingest.metrics import Metrics
from ingest.watchdog import Watchdog
from shared import db
from shared.config import Settings

log = logging.getLogger(__name__)

# A batch is due once this much payload waits. Catch-up messages (a day of readings, ~110 KB
# each) then make batches of about 20 messages, so the committer starts writing at once and
# keeps pace with decoding: with 16 MiB, two shards drained a backlog of them in 4.1-4.6 s, with
# 2 MiB in 3.0-3.1 s (docs/benchmarks.md). Small messages reach the batch size first.
BATCH_BYTES = 2 * 1024 * 1024
# A batch is also due once nothing has arrived for this fraction of the flush interval.
QUIET_FRACTION = 0.1
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


# NOTIFY payloads must stay under 8000 bytes; device names are at most 64 ASCII characters
# (0001_accounts.sql); a topic naming anything else is no registered device and not sent.
NOTIFY_BYTES = 7000
_DEVICE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _notify_ingested(conn: psycopg.Connection, messages: list[Message]) -> None:
    """Tell the alert evaluator (docs/alerts.md) which devices this batch wrote, newline-
    separated on channel `sds_ingested`; PostgreSQL delivers it at commit, so the evaluator
    never looks before the rows are visible, and never hears of a batch that rolled back."""
    names = sorted({m.device for m in messages
                    if m.device is not None and _DEVICE_NAME.fullmatch(m.device)})
    chunks: list[str] = []
    for name in names:
        if chunks and len(chunks[-1]) + len(name) < NOTIFY_BYTES:
            chunks[-1] += "\n" + name
        else:
            chunks.append(name)
    if chunks:
        conn.execute("SELECT pg_notify('sds_ingested', c) FROM unnest(%s::text[]) AS c",
                     (chunks,))


def retry_later(exc: psycopg.Error) -> bool:
    """True when the same batch may succeed later (lost connection, or a fault of the database's
    setup); False when the database refused the data itself."""
    return isinstance(exc, TRANSIENT) or (exc.sqlstate or "")[:2] in SETUP_FAULT_CLASSES


@dataclass(slots=True)
class Delivery:
    """A received message, decoded, waiting for its batch; `generation` names the connection
    that delivered it (its ack is valid only there)."""

    generation: int
    mid: int
    qos: int
    message: Message
    arrived: float  # time.monotonic()
    dup: bool = False  # the broker flagged it as a redelivery


class Stopping:
    """A stop request shared by the parts of one ingester, with the time it was made."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.at = 0.0

    def request(self) -> None:
        """Ask everything to stop (the first request's time is kept)."""
        if not self.event.is_set():
            self.at = time.monotonic()
            self.event.set()


Ack = Callable[[int, int, int], bool]  # (generation, mid, qos) -> sent


class Inbox:
    """Received messages on their way from paho's thread to the committer's.

    The committer is woken when a batch is due, not once per message: when the first message
    of a batch arrives (its flush deadline starts), and when a whole batch (messages or bytes)
    is waiting. A plain queue woke the committer for every message of a backlog, which then
    took the GIL from paho's thread message by message.
    """

    def __init__(self, limit: int, max_bytes: int = BATCH_BYTES) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self._items: deque[Delivery] = deque()
        self._bytes = 0
        self._ready = threading.Condition(threading.Lock())

    def __len__(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        """True when nothing is waiting."""
        return not self._items

    def put(self, item: Delivery) -> None:
        """Add a received message (from paho's thread)."""
        with self._ready:
            self._items.append(item)
            before = self._bytes
            self._bytes += len(item.message.payload)
            # Only on the changes a waiting committer acts on (take() looks at the state itself
            # before it waits, so a committer that was busy misses nothing).
            if len(self._items) in (1, self.limit) or before < self.max_bytes <= self._bytes:
                self._ready.notify()

    def take(self, interval: float, wait: float) -> list[Delivery]:
        """The next batch once it is due, waiting at most `wait` seconds; [] when none is due.

        Due: a whole batch is waiting, or its oldest message has waited `interval` seconds, or
        nothing has arrived for a tenth of that (the stream paused: waiting longer would only
        delay what is there, as at the end of a backlog or between sparse messages)."""
        end = time.monotonic() + wait
        quiet = interval * QUIET_FRACTION
        with self._ready:
            while True:
                now = time.monotonic()
                if self._items:
                    due = min(self._items[0].arrived + interval, self._items[-1].arrived + quiet)
                    if self._full() or now >= due:
                        return self._pop(self.limit, self.max_bytes)
                if now >= end:
                    return []
                self._ready.wait((min(end, due) if self._items else end) - now)

    def drain(self) -> list[Delivery]:
        """Everything waiting, now, whatever its size (stopping: the caller splits it)."""
        with self._ready:
            return self._pop(len(self._items), self._bytes)

    def _full(self) -> bool:
        return len(self._items) >= self.limit or self._bytes >= self.max_bytes

    def _pop(self, most: int, max_bytes: int) -> list[Delivery]:
        batch: list[Delivery] = []
        size = 0
        while self._items and len(batch) < most and size < max_bytes:
            item = self._items.popleft()
            batch.append(item)
            size += len(item.message.payload)
        self._bytes -= size
        return batch


class Committer:
    """Batches, commits and acknowledges, in the thread that calls `work` (or `flush`)."""

    def __init__(self, settings: Settings, metrics: Metrics, *, ack: Ack, leader: Leader,
                 watchdog: Watchdog, fault: FaultHook, stopping: Stopping,
                 step_down: Callable[[Exception], None], window: int) -> None:
        self.settings = settings
        self.metrics = metrics
        self.batch_limit = max(1, min(settings.ingest_batch_size, window))
        self._ack = ack
        self._leader = leader
        self._watchdog = watchdog
        self._fault = fault
        self._stopping = stopping
        self._step_down = step_down
        self._conn: psycopg.Connection | None = None
        self._budget = quarantine.Budget.from_settings(settings)

    def connections(self) -> list[psycopg.Connection | None]:
        """Every session a write may be blocked on (for the watchdog to break)."""
        return [self._conn, *self._leader.connections()]

    def inbox(self) -> Inbox:
        """An inbox whose batches fit this committer's batch limit."""
        return Inbox(self.batch_limit)

    def work(self, inbox: Inbox) -> None:
        """Commit and ack the batches of `inbox` as they fall due, until stopping; then commit
        and ack what was already received."""
        interval = self.settings.ingest_flush_interval
        inbox.limit = self.batch_limit  # as it is now (tests change it after construction)
        while not self._stopping.event.is_set():
            # Bounded wait, so a stop request is seen within 0.2 s whatever the interval.
            batch = inbox.take(interval, 0.2)
            self.metrics.held.set(len(inbox) + len(batch))
            if batch:
                for _ in batch:
                    self._fault("after_receive")
                self.flush(batch)
                self.metrics.held.set(len(inbox))
        # Stopping: what was already received is committed and acked; anything later is left
        # for the broker to redeliver to the next run.
        batch = inbox.drain()
        for start in range(0, len(batch), self.batch_limit):
            self.flush(batch[start:start + self.batch_limit])

    def flush(self, batch: list[Delivery]) -> None:
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
                     "stored (duplicates suppressed), %d quarantine rows were already there",
                     len(batch), redelivered, result.duplicates, result.requarantine_skipped)
        self._fault("after_commit_before_ack")
        if not self._may_ack(len(batch)):
            return
        acked = skipped = 0
        for item in batch:
            if self._ack(item.generation, item.mid, item.qos):
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
        for device, n in result.quarantine_unkept.items():
            m.quarantine_unkept.labels(device).inc(n)
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
        while not self._leader.fresh():
            try:
                with self._watchdog.guard("leader check before acking", self._leader.connections):
                    self._leader.confirm()
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


    def _commit(self, messages: list[Message]) -> writer.BatchResult | None:
        delay = 0.5
        while True:
            try:
                with self._watchdog.guard(f"batch write of {len(messages)}", self.connections):
                    conn = self.db()
                    with conn.transaction():
                        result = writer.write_batch(conn, messages, self._budget)
                        _notify_ingested(conn, messages)
                        self._fault("after_insert_before_commit")
                        # As late as possible before the commit that allows the acks.
                        self._leader.confirm()
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

    def _quarantine_refused(self, messages: list[Message],
                            exc: psycopg.Error) -> writer.BatchResult | None:
        detail = f"database refused the message: {type(exc).__name__}: {exc}".strip()[:2000]
        delay = 0.5
        while True:
            try:
                with self._watchdog.guard("quarantine write", self.connections):
                    conn = self.db()
                    with conn.transaction():
                        result = writer.BatchResult.of_quarantine(quarantine.quarantine_messages(
                            conn, messages, code=writer.DB_REJECTED, detail=detail,
                            budget=self._budget))
                        self._leader.confirm()
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
        self.drop_db()
        if not self._stopping.event.is_set():
            self._stopping.event.wait(delay)  # a stop request ends the wait early
            return True
        if time.monotonic() - self._stopping.at > STOP_GRACE:
            return False
        time.sleep(min(delay, 1.0))
        return True

    # ---- database connection -----------------------------------------------------------------

    def db(self) -> psycopg.Connection:
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

    def drop_db(self) -> None:
        db.close_quietly(self._conn)
        self._conn = None
