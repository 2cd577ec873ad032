"""Helpers for tests of the RabbitMQ cluster profile: the ingester's settings in its MQTT 3.1.1
mode with every node to fail over to, its session queue, and a device publisher that fails over
too and records what the broker acknowledged (PUBACK). The cluster itself:
tests/support/rabbit.py."""

from __future__ import annotations

import itertools
import json
import threading
import time
from datetime import datetime, timedelta

import paho.mqtt.client as mqtt

from shared import brokers
from shared.config import Settings
from tests.support.ingesting import iso, now_slot, wait_for
from tests.support.rabbit import RabbitCluster

INGESTER = ("ingester", "ingester-test-password")
CLIENT_BASE = "sds-ingester"
DEVICES = {f"C{i}": f"device-{i}-password" for i in range(1, 6)}
DEVICES.update({"D1": "device-d1-password", "D12": "device-d12-password"})
_ids = itertools.count(1)


def cluster_settings(settings: Settings, cluster: RabbitCluster, *, first: int = 0,
                     **changes: object) -> Settings:
    """The ingester's settings for this cluster: MQTT 3.1.1, node `first`, then the others;
    its own numbered client id (so each test has its own session queue)."""
    ports = cluster.mqtt_ports
    order = ports[first:] + ports[:first]
    s = settings.replace(
        mqtt_host="127.0.0.1", mqtt_port=order[0], mqtt_protocol="3.1.1",
        mqtt_failover=",".join(f"127.0.0.1:{p}" for p in order[1:]),
        mqtt_username=INGESTER[0], mqtt_password=INGESTER[1],
        mqtt_client_id=f"{CLIENT_BASE}-{next(_ids)}", mqtt_keepalive=5,
        ingest_flush_interval=0.1, metrics_port=0)
    return s.replace(**changes)


def queue_of(s: Settings) -> str:
    """The quorum queue RabbitMQ keeps for the ingester's session."""
    return f"mqtt-subscription-{s.mqtt_client_id}qos1"


def drop_session(s: Settings) -> None:
    """Delete the ingester's session queue (a clean-session connect with its client id)."""
    c = brokers.new_client(s.replace(mqtt_failover=""), s.mqtt_client_id, persistent=False)
    c.username_pw_set(s.mqtt_username, s.mqtt_password)
    for host, port in brokers.endpoints(s):
        try:
            c.connect(host, port, keepalive=5)
            c.loop_start()
            wait_for(c.is_connected, 10, what="cleanup connect")
            c.disconnect()
            c.loop_stop()
            return
        except (OSError, AssertionError):
            c.loop_stop()


class DevicePublisher:
    """Device `name` publishing QoS 1 readings over MQTT 3.1.1 with up to `window` in flight,
    its client id its own name; on a lost connection paho resends what was not acknowledged, on
    the next node. `acked` holds the reading times the broker PUBACKed."""

    def __init__(self, cluster: RabbitCluster, name: str, *, first: int, window: int = 100
                 ) -> None:
        ports = cluster.mqtt_ports
        order = ports[first:] + ports[:first]
        s = Settings(mqtt_host="127.0.0.1", mqtt_port=order[0], mqtt_protocol="3.1.1",
                     mqtt_failover=",".join(f"127.0.0.1:{p}" for p in order[1:]))
        self.name = name
        self.client = brokers.new_client(s, name, persistent=False)
        self.client.username_pw_set(name, DEVICES[name])
        self.client.max_inflight_messages_set(window)
        self.client.max_queued_messages_set(0)
        self.client.reconnect_delay_set(0.2, 1)
        rotation = brokers.Rotation(s)
        self.client.on_pre_connect = lambda client, _u: rotation.advance(client)
        self._lock = threading.Lock()
        self._mids: dict[int, datetime] = {}
        self._early: set[int] = set()
        self.acked: set[datetime] = set()
        self.ack_times: list[float] = []  # monotonic time of each PUBACK
        self.published: list[datetime] = []
        self.disconnects = 0
        self.client.on_publish = self._on_publish
        self.client.on_disconnect = self._on_disconnect
        brokers.connect_async(self.client, s, keepalive=5)
        self.client.loop_start()
        wait_for(self.client.is_connected, 20, what=f"device {name} connect")

    def _on_publish(self, _c: mqtt.Client, _u: object, mid: int, _rc: object, _p: object
                    ) -> None:
        with self._lock:
            t = self._mids.pop(mid, None)
            if t is None:
                self._early.add(mid)  # acknowledged before publish() returned its mid
            else:
                self._ack(t)

    def _ack(self, t: datetime) -> None:
        self.acked.add(t)
        self.ack_times.append(time.monotonic())

    def _on_disconnect(self, *_args: object) -> None:
        self.disconnects += 1

    def publish(self, t: datetime, i: int) -> None:
        body = json.dumps({"time": iso(t), "tair": 10.0 + i % 7}).encode()
        # Not under self._lock: paho calls on_publish holding its own message lock, which
        # publish() takes too (holding both in opposite orders deadlocked here).
        info = self.client.publish(f"sensors/{self.name}/readings", body, qos=1)
        with self._lock:
            self.published.append(t)
            if info.mid in self._early:
                self._early.discard(info.mid)
                self._ack(t)
            else:
                self._mids[info.mid] = t

    def run(self, n: int, rate: float, *, during: dict[int, object] | None = None,
            minutes_ago: int = 10) -> list[datetime]:
        """Publish n readings at `rate`/s; `during[i]()` is called before reading i."""
        t0 = now_slot(minutes_ago)
        times = [t0 - timedelta(minutes=5 * i) for i in range(n)]
        start = time.monotonic()
        for i, t in enumerate(times):
            action = (during or {}).get(i)
            if callable(action):
                action()
            self.publish(t, i)
            pause = start + (i + 1) / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        return times

    def wait_acked(self, count: int, timeout: float = 90.0) -> None:
        wait_for(lambda: len(self.acked) >= count, timeout, every=0.2,
                 what=f"{count} PUBACKs for {self.name} (have {len(self.acked)})")

    def longest_gap(self) -> float:
        """Longest time between two consecutive PUBACKs (the failover pause)."""
        ts = sorted(self.ack_times)
        return max((b - a for a, b in zip(ts, ts[1:], strict=False)), default=0.0)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
