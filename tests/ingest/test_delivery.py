"""Delivery under faults (reliability plan R2, R3, R6, R7, R8, R11, R14, R19): the ledger check.

A publisher sends N single-reading QoS 1 messages and records the PUBACKed set. Faults hit the
ingester subprocess (SIGKILL at the fault points), the broker (SIGTERM restart) or PostgreSQL
(restart, crash). After the run every PUBACKed reading must be stored exactly once (the primary
key forbids a second copy; nothing unpublished may appear), and nothing may be missing.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from ingest.client import Ingester
from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from testbed.postgres import PostgresServer
from tests.support.databases import as_role, own_postgres
from tests.support.figures import Figures
from tests.support.ingesting import (
    IngesterProcess,
    Ledger,
    Run,
    drop_session,
    ledger_check,
    make_site,
    record_ledger,
    stored_times,
    wait_for,
)

pytestmark = pytest.mark.chaos


@pytest.fixture
def proc_settings(mqtt_settings: Settings, tmp_path: Path) -> Settings:
    return mqtt_settings.replace(ingest_batch_size=40, ingest_flush_interval=0.1)


def supervise(proc: IngesterProcess, run: Run, url: str, *, faulty_starts: int,
              **fault: object) -> int:
    """Restart the ingester whenever it died (with the fault for the first `faulty_starts`
    restarts, then without) until publishing ended and every PUBACKed reading is stored;
    returns how many times it was killed."""
    kills = 0
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline:
        if not proc.alive():
            kills += 1
            proc.start(**(fault if kills < faulty_starts else {}))
        if run.done() and run.acked <= set(stored_times(url)):
            break
        time.sleep(0.1)
    return kills


REDELIVERED = re.compile(r"with (\d+) redelivered \(DUP\) messages: (\d+) readings were already")

# R2/R3 at the plan's scale: 20 kills per fault point in a 5,000-message run. A kill comes at
# every Nth pass of the point (per message for after_receive, per batch for the others), so N
# is chosen for 20 kills well inside the run.
SIGKILL_MESSAGES = 5000
SIGKILLS = 20


def redeliveries(log: str) -> tuple[int, int]:
    """(DUP redeliveries committed, readings already stored among them) summed over the
    ingester's log (every process of a run appends to the same file)."""
    pairs = [(int(a), int(b)) for a, b in REDELIVERED.findall(log)]
    return sum(a for a, _ in pairs), sum(b for _, b in pairs)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point,every", [
    ("after_receive", 150),
    ("after_insert_before_commit", 3),
    ("after_commit_before_ack", 3),
])
def test_ingester_sigkill_ledger(
    conn: psycopg.Connection, database_url: str, proc_settings: Settings, tmp_path: Path,
    point: str, every: int, figures: Figures,
) -> None:
    """R2/R3: SIGKILL at each fault point 20 times in a 5,000-message run, restart: ledger
    check passes, every restart resumes the session, and the broker's DUP redeliveries reach
    the ingester (after a kill after the commit, as readings already stored: suppressed)."""
    make_site(conn)
    # Forked warm: each of the 20 restarts then takes milliseconds, not a second of imports.
    proc = IngesterProcess(proc_settings, tmp_path / "ingest.log", warm=True)
    fault = {"fault_at": point, "fault_every": every}
    proc.start(**fault)
    proc.wait_subscribed(1)
    ledger = Ledger(proc_settings.mqtt_host, proc_settings.mqtt_port)
    try:
        run = Run(ledger, f"{proc_settings.topic_prefix}/A1/readings", SIGKILL_MESSAGES,
                  500).start()
        kills = supervise(proc, run, database_url, faulty_starts=SIGKILLS + 1, **fault)
        ledger_check(database_url, run)
        log = proc.log()
        assert kills >= SIGKILLS, log[-3000:]
        assert log.count("fault injection: SIGKILL at " + point) >= SIGKILLS
        # Each restart resumed the persistent session (R11): nothing queued was thrown away.
        assert log.count("broker resumed the session") >= SIGKILLS
        assert "had no session" not in log
        dups, suppressed = redeliveries(log)
        assert dups > 0  # unacked messages came back flagged DUP (R2)
        if point == "after_commit_before_ack":
            assert suppressed > 0  # stored before the kill, absorbed by the key (R3)
        record_ledger(figures, f"sigkill.{point}",
                      f"Ingester SIGKILL x{SIGKILLS} at {point.replace('_', ' ')}, restarted, "
                      f"{SIGKILL_MESSAGES} msgs (R2/R3)", database_url, run, kills=kills)
        figures.record(f"delivery.redelivery.sigkill.{point}",
                       {"DUP redeliveries": dups, "duplicates suppressed": suppressed},
                       section="delivery",
                       title=f"DUP redeliveries observed / duplicates suppressed, ingester "
                             f"SIGKILL x{SIGKILLS} at {point.replace('_', ' ')} (R2/R3)",
                       target="> 0 under faults (the path is exercised)",
                       source="tests/ingest/test_delivery.py")
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


def broker_connects(broker: MosquittoBroker, client_id: str) -> int:
    """CONNECTs the broker accepted from `client_id` so far (its log, information level)."""
    return len(re.findall(rf"New client connected from \S+ as {re.escape(client_id)} ",
                          broker.log_text()))


def test_standby_takes_over_when_the_leader_dies(
    conn: psycopg.Connection, database_url: str, proc_settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures,
) -> None:
    """R14: a second ingester with the same client id stands by without touching the broker
    (one CONNECT in the broker's log while it waits: no takeover flapping) and takes over,
    draining what was queued, when the leader is SIGKILLed."""
    make_site(conn)
    s = proc_settings.replace(mqtt_port=own_broker.port)
    leader = IngesterProcess(s, tmp_path / "leader.log").start()
    leader.wait_subscribed(1)
    standby = IngesterProcess(s.replace(metrics_port=0), tmp_path / "standby.log")
    standby.start()
    wait_for(lambda: "standby: another ingester holds the lock" in standby.log(),
             what="standby waiting")
    waiting_since = time.monotonic()
    ledger = Ledger(s.mqtt_host, s.mqtt_port)
    try:
        run = Run(ledger, f"{s.topic_prefix}/A1/readings", 600, 100).start()
        # Both processes run side by side for a while under traffic: with a lock check every
        # second, a flapping standby would have connected several times by now.
        time.sleep(4.0)
        waited = time.monotonic() - waiting_since
        connects_while_waiting = broker_connects(own_broker, s.mqtt_client_id)
        assert connects_while_waiting == 1, own_broker.log_text()[-3000:]
        assert "connected;" not in standby.log()  # only the lock holder talks to the broker
        leader.kill()
        killed = time.monotonic()
        standby.wait_subscribed(1)
        takeover = time.monotonic() - killed
        wait_for(run.done, 30, what="publishing")
        ledger_check(database_url, run)
        assert leader.log().count("connected;") == 1  # no takeover flapping
        assert "broker resumed the session" in standby.log()
        assert broker_connects(own_broker, s.mqtt_client_id) == 2  # leader, then standby
        record_ledger(figures, "standby_takeover",
                      "Leader ingester SIGKILLed, standby takes over (R14)", database_url, run,
                      **{"takeover s": round(takeover, 1)})
        figures.record("delivery.ha.connects_while_standby_waits",
                       {"CONNECTs": connects_while_waiting, "standby waiting s": round(waited, 1)},
                       section="delivery",
                       title="CONNECTs of the ingester client id in the broker log while a "
                             "standby waits (R14)",
                       target="1 (< 3 per minute: no takeover flapping)",
                       source="tests/ingest/test_delivery.py")
    finally:
        ledger.close()
        leader.kill()
        standby.kill()
        drop_session(s)


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process (T: stopped by a signal)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


@pytest.mark.timeout(180)
def test_frozen_leader_is_replaced_and_never_acks_after_resuming(
    conn: psycopg.Connection, database_url: str, proc_settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures,
) -> None:
    """R14: the leader freezes (SIGSTOP, by its own fault hook) right after committing a batch
    and before acking it, for 2 x keepalive. PostgreSQL ends its lock session after the lease,
    the standby takes the lock, takes the broker session over and drains. On SIGCONT the old
    leader finds the lock gone before acking anything: it sends no ack (its acked count is the
    same as when it froze), never reconnects (the broker sees exactly two CONNECTs) and exits 3;
    the committed batch comes back to the standby as DUP redeliveries, already stored."""
    make_site(conn)
    # The lease is short so the test is quick, and still 4 heartbeats long: a loaded machine
    # must not make the healthy leader lose it before the freeze.
    keepalive = 4
    s = proc_settings.replace(mqtt_port=own_broker.port, mqtt_keepalive=keepalive,
                              ingest_lock_timeout=3.0)
    leader = IngesterProcess(s, tmp_path / "leader.log").start(
        fault_at="after_commit_before_ack", fault_every=5, fault_signal="STOP")
    leader.wait_subscribed(1)
    standby = IngesterProcess(s.replace(metrics_port=0), tmp_path / "standby.log").start()
    wait_for(lambda: "standby: another ingester holds the lock" in standby.log(),
             what="standby waiting")
    ledger = Ledger(s.mqtt_host, s.mqtt_port)
    assert leader.proc is not None
    pid = leader.proc.pid
    resumed = False
    try:
        run = Run(ledger, f"{s.topic_prefix}/A1/readings", 800, 100).start()
        wait_for(lambda: process_state(pid) == "T", 30, every=0.02, what="the leader frozen")
        frozen = time.monotonic()
        stored_at_freeze = len(stored_times(database_url))
        standby.wait_subscribed(1, timeout=2 * keepalive + 10)
        takeover = time.monotonic() - frozen
        # Frozen for (at least) 2 x keepalive in all, past the broker's 1.5 x keepalive.
        time.sleep(max(0.0, frozen + 2 * keepalive - time.monotonic()))
        assert process_state(pid) == "T"
        wait_for(lambda: len(stored_times(database_url)) > stored_at_freeze, 10,
                 what="the standby storing while the leader is frozen")
        os.kill(pid, signal.SIGCONT)
        resumed = True
        assert leader.wait_exit(30) == 3  # stepped down
        wait_for(run.done, 60, what="publishing")
        ledger_check(database_url, run)
        assert standby.alive()
        old = leader.log()
        froze = re.search(r"fault injection: SIGSTOP at after_commit_before_ack "
                          r"\((\d+) messages acknowledged so far\)", old)
        stopped = re.search(r"ingester stopped: (\d+) messages acknowledged", old)
        assert froze and stopped, old[-3000:]
        assert stopped.group(1) == froze.group(1), old[-3000:]  # not one ack after resuming
        assert "leadership lost after a commit" in old
        assert broker_connects(own_broker, s.mqtt_client_id) == 2  # no reconnect, no flapping
        dups, suppressed = redeliveries(standby.log())
        assert dups > 0 and suppressed > 0  # the unacked, committed batch came back
        record_ledger(figures, "frozen_leader",
                      f"Leader SIGSTOPped after a commit for 2 x keepalive ({keepalive} s), "
                      "standby takes over, old leader resumed (R14)", database_url, run,
                      **{"takeover s": round(takeover, 1),
                         "acks by the old leader after resuming":
                             int(stopped.group(1)) - int(froze.group(1)),
                         "CONNECTs": 2, "DUP redeliveries": dups})
    finally:
        if not resumed and leader.proc is not None and leader.proc.poll() is None:
            os.kill(pid, signal.SIGCONT)
        ledger.close()
        leader.kill()
        standby.kill()
        drop_session(s)


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
def own_broker(tmp_path: Path, processes: None) -> Iterator[MosquittoBroker]:
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=True)
    try:
        yield broker
    finally:
        broker.cleanup()


def test_broker_sigterm_restarts_ledger(
    conn: psycopg.Connection, database_url: str, proc_settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures,
) -> None:
    """R8: broker SIGTERM + restart ten times during the run: ledger check passes."""
    make_site(conn)
    s = proc_settings.replace(mqtt_port=own_broker.port)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    proc.wait_subscribed(1)
    ledger = Ledger(s.mqtt_host, s.mqtt_port)
    restarts = 10
    try:
        run = Run(ledger, f"{s.topic_prefix}/A1/readings", 2400, 120).start()
        for restart in range(restarts):
            time.sleep(0.5)
            own_broker.restart()
            proc.wait_subscribed(restart + 2, timeout=40)
        wait_for(run.done, 120, what="publishing")
        ledger_check(database_url, run)
        assert proc.alive()
        assert proc.log().count("broker resumed the session") >= restarts
        record_ledger(figures, "broker_sigterm", f"Broker SIGTERM + restart x{restarts} (R8)",
                      database_url, run, restarts=restarts)
    finally:
        ledger.close()
        proc.kill()
        drop_session(s)


@pytest.fixture
def own_pg(tmp_path: Path, processes: None) -> Iterator[tuple[PostgresServer, str]]:
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
    # The server default is the operator's (the superuser's ALTER SYSTEM); the ingester
    # connects as the deployment's login role.
    with psycopg.connect(as_role(url, "postgres"), autocommit=True) as c:
        c.execute("ALTER SYSTEM SET synchronous_commit = off")
        c.execute("SELECT pg_reload_conf()")

        def server_default() -> str:
            with psycopg.connect(url) as fresh:
                return fresh.execute("SHOW synchronous_commit").fetchone()[0]

        wait_for(lambda: server_default() == "off", what="server default off")
        assert c.execute("SHOW fsync").fetchone()[0] == "on"
    ingester = Ingester(proc_settings.replace(database_url=url))
    try:
        db = ingester.committer.db()
        assert db.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        assert db.execute("SHOW application_name").fetchone()[0] == "sds-ingest"
    finally:
        ingester.committer.drop_db()
