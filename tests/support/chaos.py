"""Chaos test support: brokers and PostgreSQL servers of a test's own (so they can
be killed), a `$SYS` counter reader, a pipelined QoS 1 flood publisher with a ledger, and the
ingester's Prometheus counters read over HTTP.

The ingester subprocess, the paced ledger publisher (`Run`) and the ledger check come from
tests/support/ingesting.py; nothing here duplicates them. tests/chaos/conftest.py registers
the fixtures.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import paho.mqtt.client as mqtt
import psycopg
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from testbed.postgres import PostgresServer
from testbed.process import free_port
from tests.support.databases import own_postgres
from tests.support.ingesting import iso, now_slot, wait_for

# $SYS counters every second instead of every 10 s: test instrumentation only, the durable
# settings under test are the shipped ones (appended by MosquittoBroker).
SYS_CONF = "sys_interval 1\n"


@pytest.fixture
def own_broker(tmp_path: Path, processes: None) -> Iterator[MosquittoBroker]:
    """A broker of this test's own with the shipped durable settings (anonymous)."""
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=True, extra_conf=SYS_CONF)
    try:
        yield broker
    finally:
        broker.cleanup()


@pytest.fixture
def own_pg(tmp_path: Path, processes: None) -> Iterator[tuple[PostgresServer, str]]:
    """A PostgreSQL of this test's own (so it can be stopped) with a migrated database."""
    with own_postgres(tmp_path / "pg", durable=False) as pg:
        yield pg


def chaos_settings(settings: Settings, broker: MosquittoBroker, **changes: object) -> Settings:
    """Ingester settings for a test broker: own client id and prefix, a metrics port."""
    tag = uuid.uuid4().hex[:8]
    base = settings.replace(mqtt_host="127.0.0.1", mqtt_port=broker.port, mqtt_username=None,
                            mqtt_password=None, mqtt_client_id=f"ing-{tag}",
                            topic_prefix=f"t{tag}", ingest_batch_size=40,
                            ingest_flush_interval=0.1, metrics_port=free_port())
    return base.replace(**changes)


def scrape(port: int) -> dict[str, float]:
    """The ingester's /metrics as {'name{labels}': value} (empty when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


class SysMonitor:
    """Subscribes to the broker's `$SYS/broker/#` and keeps the latest value and the maximum
    of every numeric counter."""

    def __init__(self, port: int) -> None:
        self.latest: dict[str, float] = {}
        self.maximum: dict[str, float] = {}
        self.rounds = 0  # $SYS publishing rounds seen (uptime is republished every round)
        self._lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                  client_id=f"sys-{uuid.uuid4().hex[:8]}", protocol=mqtt.MQTTv5)
        self.client.on_connect = lambda c, *_: c.subscribe("$SYS/broker/#", qos=0)
        self.client.on_message = self._on_message
        self.client.reconnect_delay_set(0.1, 1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        wait_for(lambda: "$SYS/broker/store/messages/count" in self.latest, 15,
                 what="$SYS counters")

    def _on_message(self, _c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        try:
            value = float(msg.payload.decode().split()[0])
        except (ValueError, IndexError, UnicodeDecodeError):
            return
        with self._lock:
            if msg.topic == "$SYS/broker/uptime":
                self.rounds += 1
            self.latest[msg.topic] = value
            self.maximum[msg.topic] = max(value, self.maximum.get(msg.topic, value))

    def settle(self) -> None:
        """Wait for two more publishing rounds. mosquitto republishes a counter only when it
        changed (retained), so after this `value` reflects everything up to the call."""
        seen = self.rounds
        wait_for(lambda: self.rounds >= seen + 2, 10, what="two $SYS rounds")

    def value(self, name: str) -> float:
        with self._lock:
            return self.latest.get("$SYS/broker/" + name, 0.0)

    def peak(self, name: str) -> float:
        with self._lock:
            return self.maximum.get("$SYS/broker/" + name, 0.0)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def reading_body(device: str, t: datetime, i: int) -> bytes:
    return json.dumps({"time": iso(t), "tair": 10.0 + i % 7, "device": device}).encode()


def slots(n: int, minutes_ago: int = 10) -> list[datetime]:
    """n distinct 5-minute instants going back from now (newest first)."""
    t0 = now_slot(minutes_ago)
    return [t0 - timedelta(minutes=5 * i) for i in range(n)]


class Flood:
    """A pipelined QoS 1 publisher (up to `window` messages in flight): much faster than
    waiting for each PUBACK in turn, so a large backlog builds in seconds. `acked` holds the
    (device, time) keys the broker acknowledged."""

    def __init__(self, port: int, window: int = 500) -> None:
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                  client_id=f"flood-{uuid.uuid4().hex[:8]}",
                                  protocol=mqtt.MQTTv5)
        self.client.max_inflight_messages_set(window)
        self.client.max_queued_messages_set(0)
        self.acked: set[tuple[str, datetime]] = set()
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 600
        self.client.connect("127.0.0.1", port, clean_start=False, properties=props)
        self.client.loop_start()
        wait_for(self.client.is_connected, 10, what="flood publisher connect")

    def send(self, prefix: str, items: list[tuple[str, datetime]], timeout: float = 120.0
             ) -> float:
        """Publish one reading per (device, time) and wait for every PUBACK; returns msg/s."""
        start = time.monotonic()
        infos = [(key, self.client.publish(f"{prefix}/{key[0]}/readings",
                                           reading_body(key[0], key[1], i), qos=1))
                 for i, key in enumerate(items)]
        deadline = start + timeout
        for key, info in infos:
            info.wait_for_publish(max(0.1, deadline - time.monotonic()))
            if info.is_published():
                self.acked.add(key)
        elapsed = time.monotonic() - start
        assert all(info.is_published() for _k, info in infos), "publishes not acknowledged"
        return len(items) / elapsed

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def stored_keys(url: str) -> set[tuple[str, datetime]]:
    with psycopg.connect(url) as c:
        return {(r[0], r[1]) for r in c.execute("SELECT device, time FROM calibrated")}


def stored_count(url: str) -> int:
    with psycopg.connect(url) as c:
        return int(c.execute("SELECT count(*) FROM calibrated").fetchone()[0])


def saves_in_log(broker: MosquittoBroker) -> int:
    """How many times the broker has written its store so far (one log line per save)."""
    return len(re.findall(r"Saving in-memory database", broker.log_text()))


def utcnow() -> datetime:
    return datetime.now(UTC)
