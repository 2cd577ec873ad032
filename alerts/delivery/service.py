"""The deliverer process: LISTEN for new events, fan them out, and send due deliveries.

The main thread LISTENs on `sds_alert_events` (the evaluator's and API's inserts NOTIFY it at
commit) and also sweeps every SDS_DELIVERY_SWEEP_INTERVAL seconds, so an event whose NOTIFY
was missed (the deliverer was down) is still fanned out. SDS_DELIVERY_WORKERS threads, each on
its own connection, claim one due delivery at a time (alerts.delivery.outbox) and send it, and
the service's own mail (invitation and password-reset links) from the durable outbox
(shared/mailbox.py), with the same back-off and attempt limit.
Several deliverers may run against one database: the claim's row lock keeps them apart.
Works as the alerts role sds_alerts (migrations 0101, 0106), like the evaluator.

No input of one organisation may stop another's delivery (docs/alerts.md "Retries and
disabling"): whatever an attempt raises is a failed attempt with its reason, recorded, counted
and backed off like any other; one organisation's deliveries hold at most all workers but one;
a worker never ends on one delivery. When the process cannot work (a worker thread ended, or no
worker or fan-out round completed for SDS_DELIVERY_STALL_TIMEOUT seconds: the database is gone
or everything hangs) it exits with status 1, and its supervisor starts it again. Metrics
(alerts/delivery/metrics.py) on SDS_METRICS_BIND:SDS_DELIVERY_METRICS_PORT.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from types import FrameType
from typing import Any

import psycopg

from alerts.delivery import digests, formats, mail, outbox, payload, webhook
from alerts.delivery.metrics import Metrics
from alerts.delivery.mqttpub import Publisher
from alerts.delivery.webhook import Outcome
from shared import db, mailbox, sealing, smtpsettings
from shared import mail as smtp
from shared.config import Settings
from shared.logs import configure_logging

log = logging.getLogger("alerts.delivery")

CHANNEL = "sds_alert_events"
RECONNECT_SECONDS = 1.0
CONNECT_TIMEOUT = 10  # seconds: a connect to an unreachable server fails instead of hanging
FANOUT = "fanout"  # the fan-out loop's name among the rounds the watchdog follows
EXIT_CANNOT_WORK = 1


def channel_kind(job: Mapping[str, Any]) -> str:
    """The metrics label of a claimed delivery's channel (`admins`: the administrators)."""
    return "admins" if job["channel_id"] is None else str(job["channel_kind"])


def failed_attempt(exc: BaseException) -> Outcome:
    """The failed attempt an exception raised during one is recorded as."""
    return Outcome(False, None, f"error: {type(exc).__name__}: {exc}")


def cannot_work(now: float, rounds: Mapping[str, float], alive: Mapping[str, bool],
                bound: float) -> str | None:
    """Why the deliverer cannot work, or None. `rounds`: the monotonic time each worker and the
    fan-out loop (FANOUT) last completed a round (their start before the first); `alive`: each
    worker thread's state. A worker that ended is reason enough (a process short of workers
    is restarted whole); so is no worker, or the fan-out loop, completing a round within
    `bound` seconds (an idle worker completes one every sweep)."""
    ended = sorted(name for name, up in alive.items() if not up)
    if ended:
        return f"worker thread(s) ended: {', '.join(ended)}"
    workers = [t for name, t in rounds.items() if name != FANOUT]
    if workers and now - max(workers) > bound:
        return (f"no worker completed a round in {bound:g} s (the database is unreachable or "
                "every worker hangs)")
    if FANOUT in rounds and now - rounds[FANOUT] > bound:
        return f"the fan-out loop did not complete a round in {bound:g} s"
    return None


class Deliverer:
    """The fan-out loop, the sending workers and their watchdog, of one process."""

    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.stop = threading.Event()
        self.sealer = sealing.secret_sealer(settings)
        self.publisher = Publisher(settings)
        self.metrics = metrics or Metrics()
        self.failure: str | None = None  # why the process stopped itself, when it did
        self._wakes: list[threading.Event] = []
        self._rounds: dict[str, float] = {}
        # Claims in flight per organisation: one organisation holds at most all workers but
        # one, so another's delivery always finds a worker (several deliverers: each its own).
        self._busy: Counter[Any] = Counter()
        self._busy_lock = threading.Lock()
        self._org_cap = max(1, settings.delivery_workers - 1)

    def _connect(self, name: str, **kwargs: Any) -> psycopg.Connection:
        return db.connect(self.settings, name=name, keepalive_probes=3,
                          connect_timeout=CONNECT_TIMEOUT, **kwargs)

    # ---- sending ---------------------------------------------------------------------------

    def send(self, conn: psycopg.Connection, job: dict[str, Any]) -> Outcome:
        """One attempt of one claimed delivery, over its channel's kind (and format)."""
        body = payload.encode(job)
        timeout = self.settings.webhook_timeout
        if job["channel_id"] is None or job["channel_kind"] == "email":
            # The organisation's own SMTP settings when an owner set them, read at each send.
            server = smtpsettings.for_org(conn, self.settings, job["org_id"], self.sealer)
            to = (outbox.admin_emails(conn, job["org_id"]) if job["channel_id"] is None
                  else list(job["recipients"] or []))
            return mail.send(server, job, to)
        if job["channel_kind"] == "mqtt":
            return self.publisher.publish(job["org_id"], job["kind"], body, timeout=timeout)
        cap = self.settings.webhook_max_response
        private = self.settings.webhook_allow_private
        if job["channel_format"] != "standard":
            url, doc = formats.render(job["channel_format"], job["url"],
                                      dict(job["channel_options"] or {}), job)
            return webhook.send(url, doc, {"Content-Type": "application/json"}, timeout=timeout,
                                max_response=cap, allow_private=private)
        secret = self.sealer.open(job["secret_sealed"]) if self.sealer else None
        if secret is None:
            return Outcome(False, None, "the signing secret does not open with "
                           "SDS_APIKEY_SEAL_KEYS")
        return webhook.post(job["url"], secret, str(job["id"]), body, timeout=timeout,
                            max_response=cap, allow_private=private)

    def attempt(self, conn: psycopg.Connection, job: dict[str, Any]) -> tuple[Outcome, str]:
        """`send`, and the outcome's metrics label. Whatever the attempt raises (a URL that
        does not encode, a header the email library refuses, a bug) is a failed attempt; only
        a database error goes up (it is the process's, not the delivery's)."""
        kind = channel_kind(job)
        started = time.monotonic()
        try:
            result = self.send(conn, job)
            label = "delivered" if result.ok else "failed"
        except psycopg.Error:
            raise
        except Exception as exc:
            log.warning("delivery %s of event %s to %s raised (a failed attempt)",
                        job["delivery_id"], job["id"], job["channel_name"] or "the administrators",
                        exc_info=True)
            result, label = failed_attempt(exc), "error"
        self.metrics.attempt_seconds.labels(kind).observe(time.monotonic() - started)
        self.metrics.attempts.labels(kind, label).inc()
        return result, label

    def _store(self, conn: psycopg.Connection, job: dict[str, Any], result: Outcome) -> bool:
        s = self.settings
        if result.ok:
            outbox.delivered(conn, job, result.status, result.answer)
            return False
        delay = payload.retry_delay(job["attempts"] + 1, base=s.delivery_retry_base,
                                    cap=s.delivery_retry_cap)
        return outbox.failed(conn, job, result.status, result.error or "failed",
                             answer=result.answer, retry_in=delay,
                             max_attempts=s.delivery_max_attempts,
                             max_failures=s.channel_max_failures)

    def record(self, conn: psycopg.Connection, job: dict[str, Any], result: Outcome) -> bool:
        """Store the attempt's end (inside the claim's transaction); True when it disabled the
        channel. When the database refuses the record itself, the attempt is stored as failed
        with a fixed reason: never left undone, which would make it due again at once."""
        try:
            with conn.transaction():  # a savepoint: the claim's lock outlives a refusal
                return self._store(conn, job, result)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise
        except psycopg.Error as exc:
            log.error("delivery %s: the database refused its record (%s: %s); stored as a "
                      "failed attempt", job["delivery_id"], type(exc).__name__, exc)
            fallback = Outcome(False, None, f"the attempt's outcome could not be stored "
                               f"({type(exc).__name__})")
            with conn.transaction():
                return self._store(conn, job, fallback)

    def _claim(self, conn: psycopg.Connection) -> dict[str, Any] | None:
        with self._busy_lock:
            full = [org for org, n in self._busy.items() if n >= self._org_cap]
            job = outbox.claim(conn, busy=full)
            if job is not None:
                self._busy[job["org_id"]] += 1
        return job

    def _release(self, job: dict[str, Any]) -> None:
        with self._busy_lock:
            self._busy[job["org_id"]] -= 1
            if self._busy[job["org_id"]] <= 0:
                del self._busy[job["org_id"]]

    def deliver_one(self, conn: psycopg.Connection) -> bool:
        """Claim, send and record one due delivery in one transaction; False if none is due."""
        with conn.transaction():
            job = self._claim(conn)
            if job is None:
                return False
            try:
                result, _label = self.attempt(conn, job)
                disabled = self.record(conn, job, result)
            finally:
                self._release(job)
        if not result.ok:
            log.info("delivery %s of event %s to %s failed (attempt %d): %s",
                     job["delivery_id"], job["id"], job["channel_name"] or "the administrators",
                     job["attempts"] + 1, outbox.stored_reason(result.error or "failed"))
        if disabled:
            self.metrics.disabled.inc()
            log.warning("channel %s (%s) disabled after %d failed attempts in a row; its "
                        "organisation's administrators are told", job["channel_name"],
                        job["channel_id"], self.settings.channel_max_failures)
        return True

    def deliver_mail(self, conn: psycopg.Connection) -> bool:
        """Claim, send and record one due mail of the service's durable outbox (invitation and
        password-reset links, shared/mailbox.py) in one transaction; False if none is due."""
        s = self.settings
        with conn.transaction():
            item = mailbox.claim(conn)
            if item is None:
                return False
            started = time.monotonic()
            msg = mailbox.message(s, item, self.sealer)
            problem = msg if isinstance(msg, str) else smtp.send(s, msg)
            self.metrics.attempt_seconds.labels("link").observe(time.monotonic() - started)
            self.metrics.attempts.labels("link", "failed" if problem else "delivered").inc()
            if problem is None:
                mailbox.sent(conn, item)
                return True
            delay = payload.retry_delay(item.attempts + 1, base=s.delivery_retry_base,
                                        cap=s.delivery_retry_cap)
            gave_up = mailbox.failed(conn, item, problem, retry_in=delay,
                                     max_attempts=s.delivery_max_attempts)
        log.log(logging.WARNING if gave_up else logging.INFO, "mail %s to %s failed (attempt "
                "%d%s): %s", item.id, item.recipient, item.attempts + 1,
                ", given up" if gave_up else "", outbox.stored_reason(problem))
        return True

    def _worker(self, wake: threading.Event) -> None:
        name = threading.current_thread().name
        conn: psycopg.Connection | None = None
        while not self.stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = self._connect("sds-deliverer", role=db.ROLE_ALERTS)
                wake.clear()
                # One of the service's own mails (if due) beside each alert delivery, so a
                # backlog of alerts never holds a reset link past its hour.
                mailed = self.deliver_mail(conn)
                worked = self.deliver_one(conn) or mailed
                self._rounds[name] = time.monotonic()
                if not worked:
                    wake.wait(self.settings.delivery_sweep_interval)
            except psycopg.Error as exc:
                self.metrics.errors.labels("database").inc()
                log.warning("deliverer worker: database error, reconnecting: %s", exc)
                db.close_quietly(conn)
                conn = None
                self.stop.wait(RECONNECT_SECONDS)
            except Exception:
                # Not an attempt's (those are failed attempts): a bug in the bookkeeping. The
                # worker goes on; its delivery was rolled back and is tried again.
                self.metrics.errors.labels("unexpected").inc()
                log.exception("deliverer worker: unexpected error; the worker goes on")
                db.close_quietly(conn)
                conn = None
                self.stop.wait(RECONNECT_SECONDS)
        db.close_quietly(conn)

    # ---- the watchdog ------------------------------------------------------------------------

    def _watch(self, threads: list[threading.Thread]) -> None:
        bound = self.settings.delivery_stall_timeout
        while not self.stop.wait(min(1.0, bound / 4)):
            alive = {t.name: t.is_alive() for t in threads}
            self.metrics.workers_alive.set(sum(alive.values()))
            problem = cannot_work(time.monotonic(), dict(self._rounds), alive, bound)
            if problem is not None:
                self.give_up(problem)
                return

    def give_up(self, problem: str) -> None:
        """Stop with a failure: run() returns and main() exits EXIT_CANNOT_WORK; a process that
        does not get there within the longest attempt is ended at once."""
        log.error("deliverer cannot work: %s; exiting for its supervisor to start it again",
                  problem)
        self.failure = problem
        self.stop.set()
        for wake in self._wakes:
            wake.set()
        grace = threading.Timer(self.settings.webhook_timeout + 10, _exit_now)
        grace.daemon = True
        grace.start()

    # ---- fan-out ---------------------------------------------------------------------------

    def _fanout(self, conn: psycopg.Connection) -> None:
        # Queued password-reset requests become links and mails (or are dropped): here, off
        # the request, so the request's time says nothing of the account (migration 0255).
        if mailbox.resolve_reset_requests(conn):
            for wake in self._wakes:
                wake.set()
        if self.settings.smtp_host:  # the daily digests, by email
            try:
                if digests.write_due(conn):
                    log.info("daily digests written")
            except psycopg.Error as exc:  # a digest must not stop the delivery of alerts
                if conn.broken:
                    raise
                self.metrics.errors.labels("database").inc()
                log.warning("daily digest: %s", exc)
        while True:
            events, made = outbox.fanout(conn, email=bool(self.settings.smtp_host))
            if made:
                for wake in self._wakes:
                    wake.set()
            if events < outbox.FANOUT_BATCH:
                break
        with conn.transaction():
            due, oldest = outbox.backlog(conn)
        self.metrics.due.set(due)
        self.metrics.oldest_due.set(oldest)

    def run(self) -> None:
        """Run until `stop` is set (by a signal, or by the watchdog: then `failure` says why)."""
        threads = []
        started = time.monotonic()
        workers = max(1, self.settings.delivery_workers)
        self.metrics.workers.set(workers)
        for k in range(workers):
            wake = threading.Event()
            self._wakes.append(wake)
            t = threading.Thread(target=self._worker, args=(wake,), name=f"deliver-{k}",
                                 daemon=True)
            self._rounds[t.name] = started
            threads.append(t)
        self._rounds[FANOUT] = started
        for t in threads:
            t.start()
        self.metrics.workers_alive.set(workers)
        watchdog = threading.Thread(target=self._watch, args=(threads,), name="deliver-watch",
                                    daemon=True)
        watchdog.start()
        log.info("deliverer started: %d workers, sweep every %g s", len(threads),
                 self.settings.delivery_sweep_interval)
        while not self.stop.is_set():
            try:
                with self._connect("sds-deliverer-listen", autocommit=True) as listen, \
                        self._connect("sds-deliverer-fanout", role=db.ROLE_ALERTS) as work:
                    listen.execute(f"LISTEN {CHANNEL}")
                    while not self.stop.is_set():
                        self._fanout(work)
                        self._rounds[FANOUT] = time.monotonic()
                        self.metrics.last_loop.set_to_current_time()
                        for wake in self._wakes:  # due retries
                            wake.set()
                        # Woken by the first NOTIFY, or after the sweep interval.
                        wait_for_notify(listen, self.settings.delivery_sweep_interval, self.stop)
            except psycopg.Error as exc:
                self.metrics.errors.labels("database").inc()
                log.warning("deliverer: database error, reconnecting: %s", exc)
                self.stop.wait(RECONNECT_SECONDS)
        for wake in self._wakes:
            wake.set()
        for t in threads:
            t.join(self.settings.webhook_timeout + 5)
        self.publisher.close()
        log.info("deliverer stopped%s", f" ({self.failure})" if self.failure else "")


STOP_CHECK = 0.1  # seconds: a stop ends the wait for a NOTIFY this soon


def wait_for_notify(conn: psycopg.Connection[Any], seconds: float, stop: threading.Event) -> None:
    """Return at the first NOTIFY on `conn`, after `seconds`, or within STOP_CHECK of `stop`:
    a signal does not interrupt psycopg's wait, and a stop used to wait out the whole sweep
    interval (2 s on the critical path of `run.sh stop`)."""
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        for _ in conn.notifies(timeout=min(left, STOP_CHECK), stop_after=1):
            return


def _exit_now() -> None:
    """The watchdog's last resort: a thread that would not stop keeps the process from exiting."""
    log.error("deliverer: not stopped in time; exiting now")
    logging.shutdown()
    os._exit(EXIT_CANNOT_WORK)


def main() -> None:
    """Entry point of `python -m alerts.delivery`."""
    settings = Settings.from_env(os.environ)
    configure_logging(settings)
    metrics = Metrics()
    metrics.serve(settings.delivery_metrics_port, settings.metrics_bind)
    deliverer = Deliverer(settings, metrics)

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        deliverer.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    deliverer.run()
    if deliverer.failure is not None:
        sys.exit(EXIT_CANNOT_WORK)
