"""Delivery under faults (reliability plan R2, R3, R6, R8, R11, R19): the ledger check.

A publisher sends N single-reading QoS 1 messages and records the PUBACKed set. Faults hit the
ingester subprocess (SIGKILL at the fault points), the broker (SIGTERM restart) or PostgreSQL
(restart, crash). After the run every PUBACKed reading must be stored exactly once (the primary
key forbids a second copy; nothing unpublished may appear), and nothing may be missing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from ingest.client import Ingester
from shared.config import Settings
from tests.ingest.conftest import (
    IngesterProcess,
    Ledger,
    drop_session,
    iso,
    make_site,
    now_slot,
    wait_for,
)
from tests.support.databases import own_postgres
from tests.support.figures import Figures
from tests.support.services import MosquittoBroker, PostgresServer

pytestmark = pytest.mark.chaos


class Run:
    """Publishes `n` readings of device A1 at `rate` per second from a background thread."""

    def __init__(self, ledger: Ledger, topic: str, n: int, rate: float) -> None:
        self.ledger, self.topic, self.n, self.rate = ledger, topic, n, rate
        t0 = now_slot(10)
        self.times = [t0 - timedelta(minutes=5 * i) for i in range(n)]
        self.acked: set[datetime] = set()
        self.thread = threading.Thread(target=self._publish, daemon=True)

    def _publish(self) -> None:
        start = time.monotonic()
        for i, t in enumerate(self.times):
            body = json.dumps({"time": iso(t), "tair": 10.0 + i % 7, "device": "A1"}).encode()
            # Keep trying each message until the broker acknowledges it (a restarting broker
            # refuses for a moment); the ledger holds only what was PUBACKed.
            give_up = time.monotonic() + 60
            while time.monotonic() < give_up:
                if self.ledger.publish(self.topic, body, timeout=2.0):
                    self.acked.add(t)
                    break
                time.sleep(0.1)  # not connected: paho fails at once; wait for its reconnect
            pause = start + (i + 1) / self.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    def start(self) -> Run:
        self.thread.start()
        return self

    def done(self) -> bool:
        return not self.thread.is_alive()


def stored_times(url: str) -> list[datetime]:
    with psycopg.connect(url) as c:
        return [r[0] for r in c.execute("SELECT time FROM calibrated WHERE device = 'A1'")]


def ledger_check(url: str, run: Run, timeout: float = 60.0) -> None:
    """Every PUBACKed reading stored, once; nothing stored that was not published."""
    try:
        wait_for(lambda: run.acked <= set(stored_times(url)), timeout, every=0.2,
                 what="every PUBACKed reading stored")
    except AssertionError:
        missing = sorted(run.acked - set(stored_times(url)))
        raise AssertionError(
            f"{len(missing)} PUBACKed readings missing, e.g. {missing[:5]}") from None
    rows = stored_times(url)
    assert len(rows) == len(set(rows))  # exactly once
    assert set(rows) <= set(run.times)  # nothing invented
    assert len(run.acked) == run.n  # the publisher got every message acknowledged


def record_ledger(figures: Figures, key: str, title: str, url: str, run: Run,
                  **extra: object) -> None:
    """Record a scenario's ledger figure (reliability plan section 6): PUBACKed vs stored."""
    rows = stored_times(url)
    figures.record(f"delivery.ledger.{key}",
                   {"acked": len(run.acked), "missing": len(run.acked - set(rows)),
                    "extra": len(rows) - len(set(rows) & run.acked), **extra},
                   section="delivery", title=title, target="missing 0, extra 0",
                   source="tests/ingest/test_delivery.py")


@pytest.fixture
def proc_settings(mqtt_settings: Settings, tmp_path: Path) -> Settings:
    return mqtt_settings.replace(ingest_batch_size=40, ingest_flush_interval=0.1)


def supervise(proc: IngesterProcess, run: Run, url: str, *, faulty_starts: int,
              **fault: object) -> int:
    """Restart the ingester whenever it died (with the fault for the first `faulty_starts`
    restarts, then without) until publishing ended and every PUBACKed reading is stored;
    returns how many times it was killed."""
    kills = 0
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        if not proc.alive():
            kills += 1
            proc.start(**(fault if kills < faulty_starts else {}))
        if run.done() and run.acked <= set(stored_times(url)):
            break
        time.sleep(0.1)
    return kills


@pytest.mark.parametrize("point,every", [
    ("after_receive", 60),
    ("after_insert_before_commit", 4),
    ("after_commit_before_ack", 4),
])
def test_ingester_sigkill_ledger(
    conn: psycopg.Connection, database_url: str, proc_settings: Settings, tmp_path: Path,
    point: str, every: int, figures: Figures,
) -> None:
    """R2/R3: SIGKILL at each fault point, several times, restart: ledger check passes."""
    make_site(conn)
    proc = IngesterProcess(proc_settings, tmp_path / "ingest.log")
    fault = {"fault_at": point, "fault_every": every}
    proc.start(**fault)
    proc.wait_subscribed(1)
    ledger = Ledger(proc_settings.mqtt_host, proc_settings.mqtt_port)
    try:
        run = Run(ledger, f"{proc_settings.topic_prefix}/A1/readings", 900, 300).start()
        kills = supervise(proc, run, database_url, faulty_starts=6, **fault)
        ledger_check(database_url, run)
        log = proc.log()
        assert kills >= 3, log[-3000:]
        assert log.count("fault injection: SIGKILL at " + point) >= 3
        # Each restart resumed the persistent session (R11): nothing queued was thrown away.
        assert log.count("broker resumed the session") >= 3
        assert "had no session" not in log
        record_ledger(figures, f"sigkill.{point}",
                      f"Ingester SIGKILL at {point.replace('_', ' ')}, restarted (R2/R3)",
                      database_url, run, kills=kills)
    finally:
        ledger.close()
        proc.kill()


def test_graceful_stop_acks_what_committed_and_new_process_gets_the_backlog(
    conn: psycopg.Connection, database_url: str, proc_settings: Settings, tmp_path: Path,
    figures: Figures,
) -> None:
    """R11: messages published while the ingester is down reach the next process; SIGTERM
    exits 0 after flushing."""
    make_site(conn)
    proc = IngesterProcess(proc_settings, tmp_path / "ingest.log").start()
    proc.wait_subscribed(1)
    assert proc.terminate() == 0
    ledger = Ledger(proc_settings.mqtt_host, proc_settings.mqtt_port)
    try:
        run = Run(ledger, f"{proc_settings.topic_prefix}/A1/readings", 100, 10_000).start()
        wait_for(run.done, 30, what="publishing")
        assert stored_times(database_url) == []
        proc.start()
        ledger_check(database_url, run)
        assert "broker resumed the session" in proc.log()
        assert proc.terminate() == 0
        assert "ingester stopped" in proc.log()
        record_ledger(figures, "graceful_stop_backlog",
                      "Messages published while the ingester was stopped (R11)",
                      database_url, run)
    finally:
        ledger.close()
        proc.kill()


def test_ingester_db_session_terminated_ledger(
    conn: psycopg.Connection, database_url: str, proc_settings: Settings, tmp_path: Path,
    figures: Figures,
) -> None:
    """R7: the ingester's database session is killed (pg_terminate_backend) several times
    mid-run: the open batch rolls back, is retried on a new connection, nothing is lost."""
    make_site(conn)
    proc = IngesterProcess(proc_settings, tmp_path / "ingest.log").start()
    proc.wait_subscribed(1)
    ledger = Ledger(proc_settings.mqtt_host, proc_settings.mqtt_port)
    terminated = 0
    try:
        run = Run(ledger, f"{proc_settings.topic_prefix}/A1/readings", 800, 200).start()
        with psycopg.connect(database_url, autocommit=True) as admin:
            while not run.done():
                terminated += admin.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                    " FROM pg_stat_activity WHERE application_name = 'sds-ingest'"
                ).fetchone()[0]
                time.sleep(0.4)
        ledger_check(database_url, run)
        assert terminated >= 2 and proc.alive()
        assert "database error" in proc.log()
        record_ledger(figures, "db_session_terminated",
                      "Ingester's database session terminated mid-batch (R7)", database_url,
                      run, terminations=terminated)
    finally:
        ledger.close()
        proc.kill()


def test_standby_takes_over_when_the_leader_dies(
    conn: psycopg.Connection, database_url: str, proc_settings: Settings, tmp_path: Path,
    figures: Figures,
) -> None:
    """R14: a second ingester with the same client id stands by (no session takeover flapping)
    and takes over, draining what was queued, when the leader is SIGKILLed."""
    make_site(conn)
    leader = IngesterProcess(proc_settings, tmp_path / "leader.log").start()
    leader.wait_subscribed(1)
    standby = IngesterProcess(proc_settings.replace(metrics_port=0), tmp_path / "standby.log")
    standby.start()
    wait_for(lambda: "standby: another ingester holds the lock" in standby.log(),
             what="standby waiting")
    ledger = Ledger(proc_settings.mqtt_host, proc_settings.mqtt_port)
    try:
        run = Run(ledger, f"{proc_settings.topic_prefix}/A1/readings", 400, 200).start()
        time.sleep(0.8)
        assert "connected;" not in standby.log()  # only the lock holder talks to the broker
        leader.kill()
        standby.wait_subscribed(1)
        wait_for(run.done, 30, what="publishing")
        ledger_check(database_url, run)
        assert leader.log().count("connected;") == 1  # no takeover flapping
        assert "broker resumed the session" in standby.log()
        record_ledger(figures, "standby_takeover",
                      "Leader ingester SIGKILLed, standby takes over (R14)", database_url, run)
    finally:
        ledger.close()
        leader.kill()
        standby.kill()


def test_leader_steps_down_when_another_took_the_lock(database_url: str) -> None:
    """A leader whose lock session died while a standby took the lock must not ack: confirm()
    raises LeadershipLost; while the lock is free it is re-taken silently."""
    from ingest.leader import Leader, LeadershipLost

    first, second = Leader(database_url, "c1"), Leader(database_url, "c1")
    try:
        assert first.try_acquire() and not second.try_acquire()
        first.confirm()  # alive: nothing to do
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE application_name = 'sds-ingest-lock'")
        first.confirm()  # its session died, nobody else holds it: re-taken
        assert not second.try_acquire()
        first.release()
        assert second.try_acquire()
        with pytest.raises(LeadershipLost):
            first.confirm()
    finally:
        first.release()
        second.release()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[MosquittoBroker]:
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=True)
    try:
        yield broker
    finally:
        broker.cleanup()


def test_broker_sigterm_restarts_ledger(
    conn: psycopg.Connection, database_url: str, proc_settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures,
) -> None:
    """R8: broker SIGTERM + restart three times during the run: ledger check passes."""
    make_site(conn)
    s = proc_settings.replace(mqtt_port=own_broker.port)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    proc.wait_subscribed(1)
    ledger = Ledger(s.mqtt_host, s.mqtt_port)
    try:
        run = Run(ledger, f"{s.topic_prefix}/A1/readings", 900, 200).start()
        for restart in range(3):
            time.sleep(1.0)
            own_broker.restart()
            proc.wait_subscribed(restart + 2, timeout=40)
        wait_for(run.done, 90, what="publishing")
        ledger_check(database_url, run)
        assert proc.alive()
        assert proc.log().count("broker resumed the session") >= 3
        record_ledger(figures, "broker_sigterm", "Broker SIGTERM + restart x3 (R8)",
                      database_url, run, restarts=3)
    finally:
        ledger.close()
        proc.kill()
        drop_session(s)


@pytest.fixture
def own_pg(tmp_path: Path) -> Iterator[tuple[PostgresServer, str]]:
    """A durable PostgreSQL of this test's own (defaults for fsync and synchronous_commit)."""
    with own_postgres(tmp_path / "pg", durable=True) as pg:
        yield pg


def _restart(server: PostgresServer) -> None:
    server.restart()


def _crash(server: PostgresServer) -> None:
    server.crash()
    time.sleep(1.0)  # an outage, not just a blip
    server.restart()


@pytest.mark.parametrize("fault", [_restart, _crash], ids=["restart", "crash"])
def test_postgres_restart_ledger(
    own_pg: tuple[PostgresServer, str], proc_settings: Settings, tmp_path: Path,
    fault: Callable[[PostgresServer], None], figures: Figures,
) -> None:
    """R6/R19: PostgreSQL restarted (fast) or crashed (immediate) twice mid-run: nothing acked
    during the outage is lost, committed rows survive the crash, the ingester recovers."""
    server, url = own_pg
    with psycopg.connect(url) as c:
        make_site(c)
        assert c.execute("SHOW fsync").fetchone()[0] == "on"
    s = proc_settings.replace(database_url=url)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    proc.wait_subscribed(1)
    ledger = Ledger(s.mqtt_host, s.mqtt_port)
    try:
        run = Run(ledger, f"{s.topic_prefix}/A1/readings", 600, 150).start()
        for _ in range(2):
            time.sleep(1.2)
            fault(server)
        wait_for(run.done, 60, what="publishing")
        ledger_check(url, run)
        assert proc.alive()
        log = proc.log()
        assert "database error" in log and "retrying" in log
        record_ledger(figures, f"postgres_{fault.__name__.strip('_')}",
                      f"PostgreSQL {fault.__name__.strip('_')} x2 mid-run (R6/R19)", url, run)
    finally:
        ledger.close()
        proc.kill()


def test_ingester_session_is_durable_synchronous(
    own_pg: tuple[PostgresServer, str], proc_settings: Settings,
) -> None:
    """R19: the ingester's own session commits synchronously even when the server default is
    off, so a batch it acked survives a server crash (the crash itself: the test above)."""
    _server, url = own_pg
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("ALTER SYSTEM SET synchronous_commit = off")
        c.execute("SELECT pg_reload_conf()")

        def server_default() -> str:
            with psycopg.connect(url) as fresh:
                return fresh.execute("SHOW synchronous_commit").fetchone()[0]

        wait_for(lambda: server_default() == "off", what="server default off")
        assert c.execute("SHOW fsync").fetchone()[0] == "on"
    ingester = Ingester(proc_settings.replace(database_url=url))
    try:
        db = ingester._db()
        assert db.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        assert db.execute("SHOW application_name").fetchone()[0] == "sds-ingest"
    finally:
        ingester._drop_db()
