"""Broker identity, stray topics and retained messages (issue 11, findings 1 and 5).

On the shipped broker config (deploy/mosquitto/mosquitto.conf rendered as deploy/services.sh
does, with the shipped ACL) every client id is replaced by the client's user name
(`use_username_as_clientid`): a device that connects with the ingester's client id, or with
another device's, gets its own name instead and takes nobody's session. Each identity test runs
a negative control on a broker without that option, to show the same check fails there.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import paho.mqtt.client as mqtt
import psycopg
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from people import accounts
from shared import places
from shared.config import Settings
from shared.errors import BadParameter
from testbed.mosquitto import MosquittoBroker
from tests.support.figures import Figures
from tests.support.ingesting import Ledger, RunningIngester, iso, make_site, now_slot, wait_for

USERS = {"ingester": "ingester-pw", "A000001": "pw-1", "A000002": "pw-2"}
THIEF, VICTIM = "A000001", "A000002"


def _count(conn: psycopg.Connection, query: str, *args: object) -> int:
    conn.rollback()
    row = conn.execute(query, args).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


@pytest.fixture(params=[True, False], ids=["shipped", "control_without_identity"])
def identity_broker(request: pytest.FixtureRequest, tmp_path: Path, processes: None,
                    ) -> Iterator[tuple[MosquittoBroker, bool]]:
    """The shipped template (identity on) or, as negative control, the same users and ACL
    without use_username_as_clientid."""
    shipped = bool(request.param)
    broker = MosquittoBroker().start(tmp_path / "mq", users=USERS, shipped_template=shipped)
    try:
        yield broker, shipped
    finally:
        broker.cleanup()


def _settings(settings: Settings, broker: MosquittoBroker) -> Settings:
    return settings.replace(mqtt_host="127.0.0.1", mqtt_port=broker.port,
                            mqtt_username="ingester", mqtt_password=USERS["ingester"],
                            mqtt_client_id="ingester", topic_prefix="sensors",
                            ingest_flush_interval=0.1)


class Device:
    """A device's MQTT connection with a chosen client id, recording its disconnects."""

    def __init__(self, broker: MosquittoBroker, user: str, client_id: str, *,
                 persistent: bool = False, reconnect: bool = True) -> None:
        self.disconnects = 0
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=mqtt.MQTTv5)
        self.client.username_pw_set(user, USERS[user])
        self.client.on_disconnect = self._on_disconnect
        if not reconnect:
            self.client.reconnect_delay_set(3600, 3600)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600 if persistent else 0
        self.client.connect("127.0.0.1", broker.port, clean_start=not persistent,
                            properties=props)
        self.client.loop_start()
        wait_for(self.client.is_connected, 10, what=f"{user} connect as {client_id}")

    def _on_disconnect(self, *_args: object) -> None:
        self.disconnects += 1

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def test_device_cannot_take_the_ingesters_session(
    conn: psycopg.Connection, settings: Settings,
    identity_broker: tuple[MosquittoBroker, bool], figures: Figures,
) -> None:
    """Finding 1: a device connecting with client id `ingester` while others publish. Shipped:
    the ingester keeps its one connection and every acknowledged reading is stored. Control:
    the broker hands the device the ingester's session (the ingester is knocked off)."""
    broker, shipped = identity_broker
    make_site(conn, device=VICTIM)
    places.register_device(conn, org=accounts.org_id(conn, "Ingest Org"), name=THIEF)
    conn.commit()
    run = RunningIngester(_settings(settings, broker)).start()
    ledger = Ledger("127.0.0.1", broker.port, client_id=VICTIM, username=VICTIM,
                    password=USERS[VICTIM])
    acked: list[str] = []
    t0 = now_slot(60 * 24)

    def publish() -> None:
        for i in range(300):
            t = iso(t0 - timedelta(minutes=5 * i))
            if ledger.publish(f"sensors/{VICTIM}/readings",
                              json.dumps({"time": t, "tair": 10.0}).encode()):
                acked.append(t)
            time.sleep(0.01)

    thieves: list[Device] = []
    try:
        publisher = threading.Thread(target=publish)
        publisher.start()
        time.sleep(0.5)
        for _ in range(3):  # the same device tries three times, each a persistent session
            thieves.append(Device(broker, THIEF, "ingester", persistent=True, reconnect=False))
            time.sleep(0.5)
        publisher.join(60)
        if not shipped:
            # The control: mosquitto gave the device the ingester's session.
            wait_for(lambda: run.metric("sds_ingest_connects_total") >= 2, 15,
                     what="the ingester knocked off (control)")
            return
        wait_for(lambda: _count(conn, "SELECT count(*) FROM calibrated WHERE device = %s",
                                VICTIM) >= len(acked), 30, what="acked readings stored")
        stored = {iso(r[0]) for r in conn.execute(
            "SELECT time FROM calibrated WHERE device = %s", (VICTIM,))}
        missing = set(acked) - stored
        assert len(acked) == 300 and not missing
        assert run.metric("sds_ingest_connects_total") == 1  # never knocked off
        assert all(thief.disconnects == 0 for thief in thieves[-1:])
        assert f"as {THIEF} (" in broker.log_text()  # the broker renamed the thief
        figures.record("security.session_theft", {
            "acked": len(acked), "missing": len(missing), "ingester reconnects": 0},
            section="security",
            title="A device connects 3 times with the ingester's client id while another "
                  "device publishes 300 QoS 1 readings (issue 11 finding 1: 10/10 lost)",
            target="missing 0; the ingester keeps its session (use_username_as_clientid)",
            source="tests/ingest/test_identity.py")
    finally:
        for thief in thieves:
            thief.close()
        ledger.close()
        run.stop()


def test_device_cannot_knock_another_device_off(
    identity_broker: tuple[MosquittoBroker, bool],
) -> None:
    broker, shipped = identity_broker
    victim = Device(broker, VICTIM, VICTIM, reconnect=False)
    thief = Device(broker, THIEF, VICTIM, reconnect=False)
    try:
        time.sleep(1.0)
        if shipped:
            assert victim.disconnects == 0 and victim.client.is_connected()
        else:
            wait_for(lambda: victim.disconnects >= 1, 5, what="victim knocked off (control)")
    finally:
        thief.close()
        victim.close()


def test_ingester_names_cannot_be_device_names(conn: psycopg.Connection) -> None:
    org = accounts.create_org(conn, name="Reserved Org")
    for name in ("ingester", "ingester-1", "ingester-12"):
        with pytest.raises(BadParameter, match="reserved"):
            places.register_device(conn, org=org, name=name)
    places.register_device(conn, org=org, name="ingester-x")  # only the exact forms


@pytest.fixture
def shipped_broker(tmp_path: Path, processes: None) -> Iterator[MosquittoBroker]:
    broker = MosquittoBroker().start(tmp_path / "mq", users=USERS, shipped_template=True)
    try:
        yield broker
    finally:
        broker.cleanup()


def test_stray_topic_under_a_device_is_quarantined_as_bad_topic(
    conn: psycopg.Connection, settings: Settings, shipped_broker: MosquittoBroker,
) -> None:
    """Finding 5: `sensors/<itself>/<anything>` passed the ACL and vanished unheard."""
    make_site(conn, device=VICTIM)
    run = RunningIngester(_settings(settings, shipped_broker)).start()
    dev = Ledger("127.0.0.1", shipped_broker.port, client_id=VICTIM, username=VICTIM,
                 password=USERS[VICTIM])
    try:
        for topic in (f"sensors/{VICTIM}/status", f"sensors/{VICTIM}/readings/extra"):
            assert dev.publish(topic, b'{"anything": 1}')
        wait_for(lambda: _count(conn, "SELECT count(*) FROM quarantine") == 2,
                 what="stray topics quarantined")
        rows = conn.execute("SELECT topic, reason, device FROM quarantine ORDER BY id").fetchall()
        assert rows == [(f"sensors/{VICTIM}/status", "bad_topic", VICTIM),
                        (f"sensors/{VICTIM}/readings/extra", "bad_topic", VICTIM)]
        wait_for(lambda: run.metric("sds_ingest_quarantine_rows_total", {"device": VICTIM})
                 == 2, what="rows metric by device")
    finally:
        dev.close()
        run.stop()


@pytest.fixture
def retaining_broker(tmp_path: Path, processes: None) -> Iterator[MosquittoBroker]:
    """The shipped ACL and durable settings without the shipped template, hence without its
    retain-stripping plugin (deploy/mosquitto/sds_plugin.c): a broker that keeps retained
    messages, as the shipped one did before issue 20."""
    broker = MosquittoBroker().start(tmp_path / "mq", users=USERS)
    try:
        yield broker
    finally:
        broker.cleanup()


def test_retained_bad_message_quarantined_once_across_reconnects(
    conn: psycopg.Connection, settings: Settings, retaining_broker: MosquittoBroker,
    figures: Figures,
) -> None:
    """Finding 5: a retained bad message was re-quarantined on every reconnect (18 copies).
    The shipped broker no longer keeps retained messages at all (tests/chaos/
    test_broker_retained.py); the ingester's Retain Handling 2 is checked here on a broker
    that does, as the second line."""
    shipped_broker = retaining_broker
    make_site(conn, device=VICTIM)
    s = _settings(settings, shipped_broker)
    run = RunningIngester(s).start()
    dev = Ledger("127.0.0.1", shipped_broker.port, client_id=VICTIM, username=VICTIM,
                 password=USERS[VICTIM])
    reconnects = 0
    try:
        info = dev.client.publish(f"sensors/{VICTIM}/readings", b"not json", qos=1, retain=True)
        info.wait_for_publish(5)
        wait_for(lambda: _count(conn, "SELECT count(*) FROM quarantine") == 1, what="quarantined")
        for _ in range(3):  # ingester restarts: a new connection resuming the session
            run.stop()
            run = RunningIngester(s).start()
            reconnects += 1
        shipped_broker.restart()  # a broker restart: the ingester reconnects by itself
        wait_for(lambda: run.metric("sds_ingest_connects_total") >= 2, 30, what="reconnect")
        reconnects += 1
        # A reading after the reconnects: once it is stored, anything resent before it is in.
        t = now_slot(30)
        dev.close()
        dev = Ledger("127.0.0.1", shipped_broker.port, client_id=VICTIM, username=VICTIM,
                     password=USERS[VICTIM])
        assert dev.publish(f"sensors/{VICTIM}/readings",
                           json.dumps({"time": iso(t), "tair": 1.0}).encode())
        wait_for(lambda: _count(conn, "SELECT count(*) FROM calibrated WHERE time = %s", t),
                 what="reading after the reconnects")
        copies = _count(conn, "SELECT count(*) FROM quarantine WHERE payload = 'not json'")
        assert copies == 1
    finally:
        dev.close()
        run.stop()
    # Control: the retained message is still on the broker; a subscriber with the default
    # retain handling gets it on every subscribe (what the ingester used to do).
    got: list[bytes] = []
    for _ in range(2):
        sub = Device(shipped_broker, "ingester", "ingester-control")
        sub.client.on_message = lambda _c, _u, msg: got.append(msg.payload)
        sub.client.subscribe("sensors/#", qos=1)
        before = len(got)
        wait_for(lambda b=before: len(got) > b, 5, what="retained message on subscribe")
        sub.close()
    assert got == [b"not json", b"not json"]
    figures.record("security.retained_requarantine", {
        "reconnects": reconnects, "quarantine copies": copies,
        "control: copies a default subscriber gets on 2 subscribes": len(got)},
        section="security",
        title="Retained bad message across ingester restarts and a broker restart (issue 11 "
              "finding 5: 18 copies)",
        target="1 copy (Retain Handling 2: never resent on subscribe)",
        source="tests/ingest/test_identity.py")
