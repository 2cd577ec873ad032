"""Alerts on the broker: the deliverer publishes an organisation's events on
alerts/<organisation id>/<kind>; that organisation's alert reader (made with `sds alert-reader
add`) receives them; another organisation's reader cannot subscribe to them.

The broker runs the shipped mosquitto.conf and ACL with the broker plugin built from this
tree's deploy/mosquitto/sds_plugin.c (the same gcc line as deploy/setup.sh), so the test
checks the source it sits beside, not whatever plugin is installed.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import psycopg
import pytest
from click.testing import CliRunner

from admin.cli import main as sds
from shared import alerttopic
from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from tests.support.delivery import DelivererProcess, Org, deliverer_env, insert_event, make_org
from tests.support.ingesting import build_plugin, wait_for

PUBLISHER_PW = "alerts-publisher-pw"
NOT_AUTHORIZED = 0x87


@pytest.fixture
def orgs(conn: psycopg.Connection) -> tuple[Org, Org]:
    return make_org(conn, "farm-a"), make_org(conn, "farm-b")


@pytest.fixture
def secured_broker(tmp_path: Path) -> Iterator[MosquittoBroker]:
    broker = MosquittoBroker().start(
        tmp_path / "mqtt", users={"alerts-publisher": PUBLISHER_PW, "ingester": "ing-pw"},
        shipped_template=True, plugin=build_plugin(tmp_path))
    yield broker
    broker.cleanup()


def _reader(broker: MosquittoBroker, conn: psycopg.Connection, org: Org) -> dict[str, str]:
    """`sds alert-reader add` for `org` against the broker's password file; its login."""
    result = CliRunner().invoke(
        sds, ["alert-reader", "add", org.name, "--mqtt-passwd-file",
              str(broker.base_dir / "passwd")],
        env={"SDS_DATABASE_URL": conn.info.dsn}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "broker reloaded" in result.output, result.output
    found = dict(re.findall(r"^(username|password|topic):\s+(\S+)", result.output, re.M))
    assert found["username"] == f"alerts-{org.id}"
    assert found["topic"] == f"alerts/{org.id}/#"
    return found


class Subscriber:
    """An MQTT 5 client that records SUBACK reason codes and messages."""

    def __init__(self, port: int, user: str, password: str) -> None:
        self.messages: list[mqtt.MQTTMessage] = []
        self.subacks: dict[int, list[int]] = {}
        self._acked = threading.Condition()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=user,
                                  protocol=mqtt.MQTTv5)
        self.client.username_pw_set(user, password)
        self.client.on_message = lambda _c, _u, msg: self.messages.append(msg)
        self.client.on_subscribe = self._on_subscribe
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        wait_for(self.client.is_connected, 10, what=f"{user} connected")

    def _on_subscribe(self, _c: Any, _u: Any, mid: int, codes: list[Any], _p: Any) -> None:
        with self._acked:
            self.subacks[mid] = [c.value for c in codes]
            self._acked.notify_all()

    def subscribe(self, topic: str) -> int:
        """Subscribe at QoS 1; the SUBACK's reason code."""
        _rc, mid = self.client.subscribe(topic, qos=1)
        with self._acked:
            assert self._acked.wait_for(lambda: mid in self.subacks, 10)
            return self.subacks[mid][0]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def test_alert_arrives_on_the_orgs_topic_and_not_on_anothers(
        secured_broker: MosquittoBroker, orgs: tuple[Org, Org], conn: psycopg.Connection,
        database_url: str, tmp_path: Path) -> None:
    a, b = orgs
    conn.execute("INSERT INTO alert_channels (org_id, name, kind) VALUES (%s, 'valve', 'mqtt'),"
                 " (%s, 'valve', 'mqtt')", (a.id, b.id))
    conn.commit()
    login_a, login_b = _reader(secured_broker, conn, a), _reader(secured_broker, conn, b)
    reader_a = Subscriber(secured_broker.port, login_a["username"], login_a["password"])
    reader_b = Subscriber(secured_broker.port, login_b["username"], login_b["password"])
    deliverer = DelivererProcess(deliverer_env(
        database_url, mqtt_host="127.0.0.1", mqtt_port=secured_broker.port,
        alerts_mqtt_password=PUBLISHER_PW), tmp_path / "deliverer.log").start()
    try:
        assert reader_a.subscribe(alerttopic.subscription(a.id)) == 1
        # Another organisation's reader: refused for A's topic in any spelling, and for all.
        for stolen in (f"alerts/{a.id}/#", f"alerts/{a.id}", f"alerts/{a.id}/firing",
                       "alerts/#", "alerts/+/firing", "#", f"$share/g/alerts/{a.id}/#"):
            assert reader_b.subscribe(stolen) == NOT_AUTHORIZED, stolen
        assert reader_b.subscribe(alerttopic.subscription(b.id)) == 1

        event = insert_event(conn, a.id)
        wait_for(lambda: reader_a.messages, 30, what="A's alert on the broker")
        msg = reader_a.messages[0]
        assert msg.topic == f"alerts/{a.id}/firing" and msg.qos == 1
        doc = json.loads(msg.payload)
        assert doc["type"] == "alert.firing" and doc["data"]["id"] == str(event)
        time.sleep(2)  # B's own subscription stays silent: nothing of A reaches it
        assert reader_b.messages == []
        row = conn.execute("SELECT state FROM alert_deliveries d JOIN alert_channels c"
                           " ON c.id = d.channel_id WHERE d.event_id = %s", (event,)).fetchall()
        assert row == [("delivered",)]
    finally:
        deliverer.stop()
        reader_a.close()
        reader_b.close()
    # The publisher account may publish alerts but subscribe to nothing.
    spy = Subscriber(secured_broker.port, "alerts-publisher", PUBLISHER_PW)
    try:
        assert spy.subscribe("alerts/#") == NOT_AUTHORIZED
    finally:
        spy.close()


def test_reserved_alert_account_names() -> None:
    from shared.places import RESERVED_ALERT_NAMES

    assert RESERVED_ALERT_NAMES.match("alerts-publisher")
    assert RESERVED_ALERT_NAMES.match("alerts-0b1c2d3e-0000-4000-8000-000000000000")
    assert not RESERVED_ALERT_NAMES.match("alerts") and not RESERVED_ALERT_NAMES.match("A1")
    assert Settings().alerts_mqtt_username == "alerts-publisher"
