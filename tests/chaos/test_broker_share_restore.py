"""The shards' `$share` subscriptions survive a broker restart (deploy/mosquitto/patches).

mosquitto 2.0.21 never wrote shared subscriptions into its persistence store (persist_write.c
walked only the normal subscribers of each topic node), so a broker start brought back the
shards' persistent sessions without their `$share/<group>/sensors/#` subscription. Until each
shard reconnected and subscribed again, a device's QoS 1 readings had no subscriber: the broker
acknowledged them and dropped them. Measured on the unpatched build: 10 readings acknowledged
after a restart with the shards offline, 0 delivered (a plain `sensors/#` subscriber got 10).
Every broker start, a clean one included, lost what devices sent before the ingesters were back.

deploy/mosquitto/patches/persist-shared-subs.patch saves every persistent member of a shared
group under its full `$share/<group>/<filter>` name, which the store's reader already restores.
These tests run the broker deploy/setup.sh installs, with the shipped config and ACL.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import psycopg
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from tests.support.figures import Figures
from tests.support.ingesting import (
    DEVICE,
    Ledger,
    Run,
    RunningIngester,
    ledger_check,
    make_site,
    record_ledger,
    stored_times,
    wait_for,
)

pytestmark = pytest.mark.chaos

SHARD_PW = "shard-secret-pw"
DEVICE_PW = "device-a1-pw"
SHARDS = ("ingester-1", "ingester-2")
N = 10  # the supervisor helper's reproduction: 10 QoS 1 readings after the restart
LEDGER_N = 200


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoBroker]:
    """The shipped mosquitto.conf, durable.conf and ACL; the two shard users and device A1."""
    users = {name: SHARD_PW for name in SHARDS} | {DEVICE: DEVICE_PW}
    b = MosquittoBroker().start(tmp_path / "mqtt", users=users, shipped_template=True)
    yield b
    b.cleanup()


class Member:
    """A shard's MQTT 5 persistent session (client id = user name, as the broker enforces)."""

    def __init__(self, port: int, name: str) -> None:
        self.port, self.name = port, name
        self.got: list[bytes] = []
        self.subacked: list[int] = []
        self.client = self._client()

    def _client(self) -> mqtt.Client:
        # One paho client per connection: a second loop_start() on the same client replaces
        # its wake-up socket pair without closing the first (ResourceWarning in CI's output).
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.name,
                             protocol=mqtt.MQTTv5)
        client.username_pw_set(self.name, SHARD_PW)
        client.on_message = lambda _c, _u, msg: self.got.append(msg.payload)
        client.on_subscribe = lambda _c, _u, _m, codes, _p: self.subacked.extend(
            int(rc.value) for rc in codes)
        return client

    def connect(self, *, clean_start: bool) -> Member:
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600
        self.client.connect("127.0.0.1", self.port, clean_start=clean_start, properties=props)
        self.client.loop_start()
        wait_for(self.client.is_connected, 10, what=f"{self.name} connected")
        return self

    def subscribe(self, topic_filter: str) -> None:
        self.client.subscribe([(topic_filter, SubscribeOptions(qos=1))])
        wait_for(lambda: self.subacked, 10, what=f"{self.name}'s SUBACK")
        assert self.subacked == [1], self.subacked

    def leave(self) -> None:
        """Disconnect; the session and its subscriptions stay on the broker."""
        self.client.disconnect()
        self.client.loop_stop()
        self.client = self._client()


def _publish(port: int, n: int) -> int:
    """Device A1 publishes n QoS 1 readings; how many the broker acknowledged."""
    pub = Ledger("127.0.0.1", port, DEVICE, username=DEVICE, password=DEVICE_PW)
    try:
        return sum(pub.publish(f"sensors/{DEVICE}/readings",
                               json.dumps({"time": f"2026-01-01T00:{i:02d}:00Z"}).encode())
                   for i in range(n))
    finally:
        pub.close()


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_offline_share_members_get_what_was_acked_after_a_restart(
    broker: MosquittoBroker, figures: Figures, how: str,
) -> None:
    """Both shards subscribe to the shared group and go offline; the broker restarts (a clean
    stop, or a SIGKILL after its autosave wrote the sessions); a device publishes 10 QoS 1
    readings; the shards reconnect (persistent session, no new SUBSCRIBE) and get all 10."""
    group = f"grp-{uuid.uuid4().hex}"
    # Clean start off from the first connect, as the ingester connects (shared/brokers.py):
    # mosquitto persists only sessions whose latest connect had clean start off.
    members = [Member(broker.port, name).connect(clean_start=False) for name in SHARDS]
    for m in members:
        m.subscribe(f"$share/{group}/sensors/#")
        m.leave()
    if how == "sigkill":
        time.sleep(3)  # past the shipped autosave (1 s, i.e. every ~2 s): the sessions are saved
        broker.kill()
        broker.restart()
    else:
        broker.restart()
    acked = _publish(broker.port, N)
    for m in members:
        m.connect(clean_start=False)
    try:
        wait_for(lambda: sum(len(m.got) for m in members) >= acked, 10, every=0.1,
                 what=f"{acked} readings delivered to the restored group")
        time.sleep(0.5)  # a duplicate would show here
    except AssertionError:
        pass
    finally:
        for m in members:
            m.leave()
    delivered = sum(len(m.got) for m in members)
    figures.record(
        f"delivery.share_restore.{how}",
        {"acked after restart": acked, "delivered": delivered},
        section="delivery",
        title=f"broker restart ({how.upper()}) with both shards' persistent $share sessions "
              f"offline, then {N} QoS 1 readings: delivered once the shards reconnect "
              "(unpatched mosquitto 2.0.21: 0; deploy/mosquitto/patches/persist-shared-subs)",
        target=f"{N} of {N}", source="tests/chaos/test_broker_share_restore.py")
    assert acked == N
    assert delivered == N, f"{delivered} of {acked} acknowledged readings delivered"
    assert len({p for m in members for p in m.got}) == N


def test_shard_ledger_across_a_broker_restart(
    conn: psycopg.Connection, database_url: str, settings: Settings,
    broker: MosquittoBroker, figures: Figures,
) -> None:
    """Two real ingester shards in their secret group stop (sessions kept), the broker
    restarts, a device publishes LEDGER_N QoS 1 readings, the shards start again: every
    acknowledged reading is stored, once."""
    make_site(conn)
    base = settings.replace(mqtt_host="127.0.0.1", mqtt_port=broker.port,
                            mqtt_username="ingester", mqtt_password=SHARD_PW,
                            mqtt_client_id="ingester", topic_prefix="sensors",
                            ingest_flush_interval=0.1, ingest_shards=2,
                            ingest_share_group=f"grp-{uuid.uuid4().hex}")
    shard = [base.replace(ingest_shard=k) for k in (1, 2)]  # users ingester-1, ingester-2
    for s in shard:  # subscribe once, then go away with the session kept
        RunningIngester(s).start().stop()
    broker.restart()
    pub = Ledger("127.0.0.1", broker.port, DEVICE, username=DEVICE, password=DEVICE_PW)
    try:
        run = Run(pub, f"sensors/{DEVICE}/readings", LEDGER_N, 200.0).start()
        wait_for(run.done, 60, what="ledger published")
    finally:
        pub.close()
    assert not stored_times(database_url)
    ingesters = [RunningIngester(s).start() for s in shard]
    try:
        try:
            ledger_check(database_url, run, timeout=30)
        finally:
            record_ledger(figures, "share_restore_broker_restart",
                          f"2 ingester shards offline across a broker restart (SIGTERM); "
                          f"{LEDGER_N} QoS 1 readings acked before they reconnect",
                          database_url, run, source="tests/chaos/test_broker_share_restore.py")
    finally:
        for i in ingesters:
            i.stop()
