"""The deliverer process: LISTEN for new events, fan them out, and send due deliveries.

The main thread LISTENs on `sds_alert_events` (the evaluator's and API's inserts NOTIFY it at
commit) and also sweeps every SDS_DELIVERY_SWEEP_INTERVAL seconds, so an event whose NOTIFY
was missed (the deliverer was down) is still fanned out. SDS_DELIVERY_WORKERS threads, each on
its own connection, claim one due delivery at a time (alerts.delivery.outbox) and send it.
Several deliverers may run against one database: the claim's row lock keeps them apart.
Works as the alerts role sds_alerts (migrations 0101, 0106), like the evaluator.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

import psycopg

from alerts.delivery import mail, outbox, payload, webhook
from alerts.delivery.mqttpub import Publisher
from alerts.delivery.webhook import Outcome
from shared import db, sealing
from shared.config import Settings
from shared.logs import configure_logging

log = logging.getLogger("alerts.delivery")

CHANNEL = "sds_alert_events"
RECONNECT_SECONDS = 1.0


class Deliverer:
    """The fan-out loop and the sending workers of one process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.stop = threading.Event()
        self.sealer = sealing.secret_sealer(settings)
        self.publisher = Publisher(settings)
        self._wakes: list[threading.Event] = []

    # ---- sending ---------------------------------------------------------------------------

    def send(self, conn: psycopg.Connection, job: dict[str, Any]) -> Outcome:
        """One attempt of one claimed delivery, over its channel's kind."""
        body = payload.encode(job)
        timeout = self.settings.webhook_timeout
        if job["channel_id"] is None:
            return mail.send(self.settings, job, outbox.admin_emails(conn, job["org_id"]))
        if job["channel_kind"] == "email":
            return mail.send(self.settings, job, list(job["recipients"] or []))
        if job["channel_kind"] == "mqtt":
            return self.publisher.publish(job["org_id"], job["kind"], body, timeout=timeout)
        secret = self.sealer.open(job["secret_sealed"]) if self.sealer else None
        if secret is None:
            return Outcome(False, None, "the signing secret does not open with "
                           "SDS_APIKEY_SEAL_KEYS")
        return webhook.post(job["url"], secret, str(job["id"]), body, timeout=timeout,
                            max_response=self.settings.webhook_max_response,
                            allow_private=self.settings.webhook_allow_private)

    def deliver_one(self, conn: psycopg.Connection) -> bool:
        """Claim, send and record one due delivery in one transaction; False if none is due."""
        s = self.settings
        with conn.transaction():
            job = outbox.claim(conn)
            if job is None:
                return False
            result = self.send(conn, job)
            if result.ok:
                outbox.delivered(conn, job, result.status)
                return True
            delay = payload.retry_delay(job["attempts"] + 1, base=s.delivery_retry_base,
                                        cap=s.delivery_retry_cap)
            disabled = outbox.failed(conn, job, result.status, result.error or "failed",
                                     retry_in=delay, max_attempts=s.delivery_max_attempts,
                                     max_failures=s.channel_max_failures)
        log.info("delivery %s of event %s to %s failed (attempt %d): %s",
                 job["delivery_id"], job["id"], job["channel_name"] or "the administrators",
                 job["attempts"] + 1, result.error)
        if disabled:
            log.warning("channel %s (%s) disabled after %d failed attempts in a row; its "
                        "organisation's administrators are told", job["channel_name"],
                        job["channel_id"], s.channel_max_failures)
        return True

    def _worker(self, wake: threading.Event) -> None:
        conn: psycopg.Connection | None = None
        while not self.stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = db.connect(self.settings, name="sds-deliverer", role=db.ROLE_ALERTS,
                                      keepalive_probes=3)
                wake.clear()
                if not self.deliver_one(conn):
                    wake.wait(self.settings.delivery_sweep_interval)
            except psycopg.Error as exc:
                log.warning("deliverer worker: database error, reconnecting: %s", exc)
                if conn is not None:
                    conn.close()
                conn = None
                self.stop.wait(RECONNECT_SECONDS)
        if conn is not None:
            conn.close()

    # ---- fan-out ---------------------------------------------------------------------------

    def _fanout(self, conn: psycopg.Connection) -> None:
        while True:
            events, made = outbox.fanout(conn, email=bool(self.settings.smtp_host))
            if made:
                for wake in self._wakes:
                    wake.set()
            if events < outbox.FANOUT_BATCH:
                return

    def run(self) -> None:
        """Run until `stop` is set."""
        threads = []
        for k in range(max(1, self.settings.delivery_workers)):
            wake = threading.Event()
            self._wakes.append(wake)
            t = threading.Thread(target=self._worker, args=(wake,), name=f"deliver-{k}",
                                 daemon=True)
            t.start()
            threads.append(t)
        log.info("deliverer started: %d workers, sweep every %g s", len(threads),
                 self.settings.delivery_sweep_interval)
        while not self.stop.is_set():
            try:
                with db.connect(self.settings, name="sds-deliverer-listen", autocommit=True,
                                keepalive_probes=3) as listen, \
                        db.connect(self.settings, name="sds-deliverer-fanout",
                                   role=db.ROLE_ALERTS) as work:
                    listen.execute(f"LISTEN {CHANNEL}")
                    while not self.stop.is_set():
                        self._fanout(work)
                        for wake in self._wakes:  # due retries
                            wake.set()
                        # Woken by the first NOTIFY, or after the sweep interval.
                        for _ in listen.notifies(
                                timeout=self.settings.delivery_sweep_interval, stop_after=1):
                            pass
            except psycopg.Error as exc:
                log.warning("deliverer: database error, reconnecting: %s", exc)
                self.stop.wait(RECONNECT_SECONDS)
        for wake in self._wakes:
            wake.set()
        for t in threads:
            t.join(self.settings.webhook_timeout + 5)
        self.publisher.close()
        log.info("deliverer stopped")


def main() -> None:
    """Entry point of `python -m alerts.delivery`."""
    settings = Settings.from_env(os.environ)
    configure_logging(settings)
    deliverer = Deliverer(settings)

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        deliverer.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    deliverer.run()
