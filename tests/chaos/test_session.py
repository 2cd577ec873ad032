"""The stale-ack gate across reconnects (reliability plan R13, design rule 3.4).

An MQTT packet id (mid) means something only on the connection that carried it: after a
reconnect without the session the broker numbers its messages from 1 again, so an ack held over
from the old connection would acknowledge a message the new connection never delivered (or a
different one). The ingester tags each message with its connection generation and drops acks of
an older generation (ingest/client.py). These tests force an ack to straddle a reconnect:

- the ingester's INSERT is held by a SHARE lock on `calibrated` (taken by the test), so a
  message it received stays uncommitted and unacknowledged, deterministically;
- the connection is severed (proxy `reset` toxic, or SIGKILL of a broker without persistence);
- the lock is released after the reconnect, so the commit lands on the new connection.

The broker logs every packet (`log_type all`); `stale_pubacks` replays that log per connection
and lists each PUBACK for a mid the broker had not sent on that connection. A deliberately naive
client (paho `manual_ack`, acking the old mid after the reconnect) is the negative control.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import paho.mqtt.client as mqtt
import psycopg
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from tests.support.chaos import chaos_settings, reading_body, scrape, slots, stored_keys
from tests.support.figures import Figures
from tests.support.ingesting import IngesterProcess, Ledger, make_site, wait_for
from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.chaos

PACKET_LOG = "log_type all\n"  # every packet with its mid, for the stale-ack check


def stale_pubacks(log: str, client_id: str) -> tuple[list[tuple[int, int]], int]:
    """Replay a mosquitto `log_type all` log for one client: returns ([(connection number,
    mid)] of each PUBACK it sent for a mid the broker had not sent it on that connection, or
    had already been acknowledged), and how many PUBACKs were checked."""
    who = re.escape(client_id)
    connected = re.compile(rf"New client connected from \S+ as {who} \(")
    sent = re.compile(rf"Sending PUBLISH to {who} \(d\d, q[12], r\d, m(\d+),")
    acked = re.compile(rf"Received PUBACK from {who} \(Mid: (\d+),")
    connection, outstanding, stale, checked = 0, set[int](), [], 0
    for line in log.splitlines():
        if connected.search(line):
            connection += 1
            outstanding = set()  # a new connection: nothing of the old one is valid here
        elif re.search(r"mosquitto version \S+ starting", line):
            outstanding = set()  # the broker restarted: every connection is gone
        elif m := sent.search(line):
            outstanding.add(int(m[1]))
        elif m := acked.search(line):
            checked += 1
            mid = int(m[1])
            if mid in outstanding:
                outstanding.discard(mid)
            else:
                stale.append((connection, mid))
    return stale, checked


def connacks(log: str, client_id: str) -> list[int]:
    """The session-present flag of every CONNACK the broker sent this client, in order."""
    return [int(m[1]) for m in re.finditer(
        rf"Sending CONNACK to {re.escape(client_id)} \((\d), \d+\)", log)]


class HeldInsert:
    """A SHARE lock on `calibrated`: reads go on, the ingester's INSERT waits (bounded by its
    60 s statement_timeout) until `release()`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = psycopg.connect(url)
        self.conn.execute("LOCK TABLE calibrated IN SHARE MODE")

    def ingester_waiting(self) -> bool:
        with psycopg.connect(self.url) as c:
            row = c.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                            "'sds-ingest' AND wait_event_type = 'Lock'").fetchone()
        return bool(row and row[0])

    def release(self) -> None:
        if not self.conn.closed:
            self.conn.rollback()
            self.conn.close()


@pytest.fixture
def held(database_url: str) -> Iterator[list[HeldInsert]]:
    locks: list[HeldInsert] = []
    yield locks
    for lock in locks:
        lock.release()


def _deliver_and_hold(broker: MosquittoBroker, s: Settings, url: str, key: tuple[str, datetime],
                      held: list[HeldInsert]) -> None:
    """Publish one reading, and wait until the ingester received it and its INSERT waits."""
    lock = HeldInsert(url)
    held.append(lock)
    pub = Ledger("127.0.0.1", broker.port)
    try:
        assert pub.publish(f"{s.topic_prefix}/{key[0]}/readings",
                           reading_body(key[0], key[1], 0))
    finally:
        pub.close()
    wait_for(lambda: re.search(rf"Sending PUBLISH to {re.escape(s.mqtt_client_id)} \(d0, q1, "
                               r"r\d, m\d+,", broker.log_text()), 10,
             what="the broker delivering the reading")
    wait_for(lock.ingester_waiting, 15, what="the ingester's INSERT waiting on the lock")


def _metric(port: int, name: str) -> float:
    return scrape(port).get(name, 0.0)


def _acks_decided(port: int) -> float:
    """Acks the ingester sent plus acks it withheld (its decision for each committed one)."""
    metrics = scrape(port)
    return (metrics.get("sds_ingest_messages_acked_total", 0.0)
            + metrics.get("sds_ingest_acks_skipped_total", 0.0))


def test_session_present_redelivers_and_acks_on_the_new_connection(
    conn: psycopg.Connection, database_url: str, settings: Settings, tmp_path: Path,
    held: list[HeldInsert], figures: Figures,
) -> None:
    """R13(a): a message delivered, then the connection reset before its ack; the session
    survives. The broker resends it with DUP on the new connection; the first copy commits
    but its ack is withheld (old generation); the resent copy is a duplicate (no second row)
    and is acknowledged on the new connection, for a mid sent there."""
    make_site(conn)
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=True, extra_conf=PACKET_LOG)
    proxy = TcpProxy(broker.port).start()
    s = chaos_settings(settings, broker).replace(mqtt_port=proxy.port)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    key = ("A1", slots(1)[0])
    try:
        proc.wait_subscribed(1)
        _deliver_and_hold(broker, s, database_url, key, held)
        assert proxy.reset() >= 1
        proc.wait_subscribed(2)
        who = re.escape(s.mqtt_client_id)
        wait_for(lambda: re.search(rf"Sending PUBLISH to {who} \(d1, q1, r\d, m\d+,",
                                   broker.log_text()), 10, what="the DUP resend")
        held[0].release()
        wait_for(lambda: _metric(s.metrics_port, "sds_ingest_duplicates_total") >= 1, 30,
                 what="the resent copy processed as a duplicate")
        wait_for(lambda: stale_pubacks(broker.log_text(), s.mqtt_client_id)[1] >= 1, 10,
                 what="a PUBACK on the new connection")
        log = broker.log_text()
        stale, checked = stale_pubacks(log, s.mqtt_client_id)
        metrics = scrape(s.metrics_port)
        assert stale == [], log[-3000:]
        assert connacks(log, s.mqtt_client_id)[-1] == 1  # the session was resumed
        assert metrics.get("sds_ingest_acks_skipped_total", 0) >= 1  # the old ack withheld
        assert metrics.get("sds_ingest_session_unexpectedly_absent_total", 0) == 0
        assert stored_keys(database_url) == {key}  # one row
        assert proc.terminate() == 0
    finally:
        proc.kill()
        proxy.stop()
        broker.cleanup()
    figures.record("delivery.stale_ack.session_present",
                   {"resent with DUP": "yes", "old-connection acks withheld":
                    int(metrics.get("sds_ingest_acks_skipped_total", 0)),
                    "duplicates suppressed": int(metrics.get("sds_ingest_duplicates_total", 0)),
                    "PUBACKs checked": checked, "stale PUBACKs": len(stale), "rows": 1},
                   section="delivery",
                   title="Connection reset between delivery and ack, session kept (R13a)",
                   target="resent, stored once, acked on the new connection; 0 stale",
                   source="tests/chaos/test_session.py")


def test_session_absent_never_acks_a_mid_of_the_old_connection(
    conn: psycopg.Connection, database_url: str, settings: Settings, tmp_path: Path,
    held: list[HeldInsert], figures: Figures,
) -> None:
    """R13(b): a message delivered, then the broker (without persistence) is SIGKILLed before
    the ack and comes back without the session. The ingester raises the session-absent alarm,
    commits what it holds, and sends no PUBACK for a mid the new connection never delivered;
    a message published afterwards is delivered and acknowledged normally."""
    make_site(conn)
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=False, extra_conf=PACKET_LOG)
    s = chaos_settings(settings, broker)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    first, second = (("A1", t) for t in slots(2))
    try:
        proc.wait_subscribed(1)
        _deliver_and_hold(broker, s, database_url, first, held)
        broker.kill()
        broker.restart()  # no persistence: the session and its queue are gone
        wait_for(lambda: "had no session" in proc.log(), 20, what="the ingester reconnecting")
        wait_for(lambda: _metric(s.metrics_port,
                                 "sds_ingest_session_unexpectedly_absent_total") >= 1, 10,
                 what="the session-absent alarm")
        held[0].release()
        # The held message commits; its ack belongs to the dead connection. Wait until the
        # ingester decided about that ack (sent or withheld), whichever it was.
        wait_for(lambda: first in stored_keys(database_url), 30, what="the held reading")
        wait_for(lambda: _acks_decided(s.metrics_port) >= 1, 10, what="the ack decision")
        # Only now does the new connection get a message (mid 1 again, in the new session): a
        # stale ack for the old mid 1, had it been sent, precedes this delivery in the log.
        pub = Ledger("127.0.0.1", broker.port)
        try:
            assert pub.publish(f"{s.topic_prefix}/A1/readings", reading_body(*second, 1))
        finally:
            pub.close()
        wait_for(lambda: second in stored_keys(database_url), 15, what="the new reading")
        wait_for(lambda: stale_pubacks(broker.log_text(), s.mqtt_client_id)[1] >= 1, 10,
                 what="the new reading's PUBACK")
        log = broker.log_text()
        stale, checked = stale_pubacks(log, s.mqtt_client_id)
        metrics = scrape(s.metrics_port)
        assert stale == [], log[-3000:]
        assert connacks(log, s.mqtt_client_id)[-1] == 0  # the broker really had no session
        assert metrics.get("sds_ingest_session_present", -1) == 0
        assert metrics.get("sds_ingest_acks_skipped_total", 0) >= 1
        assert proc.terminate() == 0
    finally:
        proc.kill()
        broker.cleanup()
    figures.record("delivery.stale_ack.session_absent",
                   {"session-absent alarms": int(metrics.get(
                       "sds_ingest_session_unexpectedly_absent_total", 0)),
                    "stale acks withheld": int(metrics.get("sds_ingest_acks_skipped_total", 0)),
                    "PUBACKs checked": checked, "stale PUBACKs": len(stale)},
                   section="delivery",
                   title="Broker without persistence SIGKILLed between delivery and ack, back "
                         "without the session (R13b, R11)",
                   target="alarm raised; 0 PUBACKs for mids the new connection never sent",
                   source="tests/chaos/test_session.py")


def test_naive_client_stale_ack_is_caught(tmp_path: Path, figures: Figures) -> None:
    """R13(b) negative control: a paho client with manual_ack that acks the mid it got before
    the broker lost its session sends a PUBACK the broker never asked for on the new
    connection; `stale_pubacks` must report it."""
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=False, extra_conf=PACKET_LOG)
    got: list[int] = []
    connects: list[bool] = []
    subscribed = threading.Event()
    naive = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="naive-ingester",
                        protocol=mqtt.MQTTv5, manual_ack=True)
    naive.on_message = lambda _c, _u, msg: got.append(msg.mid)
    naive.on_connect = lambda _c, _u, flags, *_: connects.append(flags.session_present)
    naive.on_subscribe = lambda *_: subscribed.set()
    naive.reconnect_delay_set(0.1, 1)
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 600
    naive.connect("127.0.0.1", broker.port, clean_start=False, properties=props)
    naive.loop_start()
    try:
        wait_for(lambda: connects, 10, what="naive connect")
        naive.subscribe("n/+/readings", qos=1)
        assert subscribed.wait(10)
        pub = Ledger("127.0.0.1", broker.port)
        try:
            assert pub.publish("n/A1/readings", b"{}")
        finally:
            pub.close()
        wait_for(lambda: got, 10, what="delivery to the naive client")
        broker.kill()
        broker.restart()
        wait_for(lambda: len(connects) >= 2 and naive.is_connected(), 15,
                 what="naive reconnect")
        assert connects[-1] is False  # the session is gone
        naive.ack(got[0], 1)  # the bug under test: an ack carried over the reconnect
        wait_for(lambda: stale_pubacks(broker.log_text(), "naive-ingester")[1] >= 1, 10,
                 what="the naive PUBACK in the broker log")
        stale, _checked = stale_pubacks(broker.log_text(), "naive-ingester")
    finally:
        naive.disconnect()
        naive.loop_stop()
        broker.cleanup()
    assert stale == [(2, got[0])]
    figures.record("delivery.stale_ack.naive_control", f"{len(stale)} stale PUBACK detected",
                   section="delivery",
                   title="Naive manual-ack client acking an old mid after a session loss "
                         "(negative control, R13b)",
                   target="detected (the check can fail)",
                   source="tests/chaos/test_session.py")
