"""Which broker to reach and in which MQTT version: shared by the ingester and the simulator.

Two broker profiles (docs/operations.md): mosquitto, one broker spoken to in MQTT 5 (the
default), and the RabbitMQ cluster profile, several nodes of one cluster spoken to in MQTT 3.1.1
(RabbitMQ 3.10 has no MQTT 5). With several nodes (`SDS_MQTT_FAILOVER`), every reconnect moves to
the next node, so a client whose node died reaches a live one on its next attempt.
`connected` is the one "connect and wait for the CONNACK" of the one-shot clients.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties

from shared.config import Settings

PROTOCOLS = {"5": mqtt.MQTTv5, "3.1.1": mqtt.MQTTv311}


def protocol(settings: Settings) -> mqtt.MQTTProtocolVersion:
    """paho's protocol constant for SDS_MQTT_PROTOCOL; ValueError names the valid values."""
    try:
        return PROTOCOLS[settings.mqtt_protocol]
    except KeyError:
        raise ValueError(f"SDS_MQTT_PROTOCOL: {settings.mqtt_protocol!r} is not one of "
                         + ", ".join(PROTOCOLS)) from None


def endpoints(settings: Settings) -> list[tuple[str, int]]:
    """SDS_MQTT_HOST:SDS_MQTT_PORT, then each `host:port` of SDS_MQTT_FAILOVER."""
    found = [(settings.mqtt_host, settings.mqtt_port)]
    for item in settings.mqtt_failover.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"SDS_MQTT_FAILOVER: {item!r} is not host:port")
        found.append((host.strip("[]"), int(port)))
    return found


class Rotation:
    """Moves a paho client to the next broker endpoint on every (re)connect attempt after the
    first; call `advance(client)` from `on_pre_connect`."""

    def __init__(self, settings: Settings) -> None:
        self.endpoints = endpoints(settings)
        self._attempts = 0

    def advance(self, client: mqtt.Client) -> tuple[str, int]:
        """Point `client` at the endpoint for this attempt and return it."""
        host, port = self.endpoints[self._attempts % len(self.endpoints)]
        self._attempts += 1
        if len(self.endpoints) > 1:
            # paho 2.2 calls on_pre_connect with the state already 'connecting', where its
            # host/port setters refuse; the socket is opened from these right after the hook.
            client._host, client._port = host, port
        return host, port


def new_client(settings: Settings, client_id: str, *, persistent: bool,
               manual_ack: bool = False, username: str | None = None,
               password: str | None = None) -> mqtt.Client:
    """A paho 2.x client in the configured MQTT version, logging in as `username` and trusting
    SDS_MQTT_TLS_CA when set: every MQTT client of the service is made here. persistent=True
    asks the broker to keep the session (MQTT 3.1.1's clean_session=False; for MQTT 5 see
    `connect_async`)."""
    proto = protocol(settings)
    if proto == mqtt.MQTTv5:
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=proto, manual_ack=manual_ack)
    else:
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=proto, manual_ack=manual_ack,
                             clean_session=not persistent)
    if username:
        client.username_pw_set(username, password)
    if settings.mqtt_tls_ca:
        client.tls_set(ca_certs=settings.mqtt_tls_ca)
    return client


def connect_async(client: mqtt.Client, settings: Settings, *, keepalive: int,
                  persistent: bool = False, properties: Properties | None = None) -> None:
    """connect_async to the first endpoint. MQTT 5: Clean Start off when persistent, with the
    given CONNECT properties (SessionExpiryInterval, ReceiveMaximum); MQTT 3.1.1 carries neither
    (the session flag was given to the client, the window is the broker's own setting)."""
    host, port = endpoints(settings)[0]
    if client.protocol == mqtt.MQTTv5:
        client.connect_async(host, port, keepalive=keepalive, clean_start=not persistent,
                             properties=properties)
    else:
        client.connect_async(host, port, keepalive=keepalive)


@dataclass(frozen=True)
class Connack:
    """How a connection attempt ended: `problem` is why there is no session (None: the broker
    accepted it); `refused` is the broker's reason code when it said no."""

    problem: str | None
    refused: Any = None


@contextmanager
def connected(client: mqtt.Client, settings: Settings, *, timeout: float,
              **connect: Any) -> Iterator[Connack]:
    """Connect `client` to SDS_MQTT_HOST:PORT (`connect`: keepalive, clean_start, properties),
    run its network loop and wait for the CONNACK: the one "connect and wait" of the one-shot
    clients (`sds` commands). Yields how it ended; disconnects and stops the loop on leaving."""
    outcome: dict[str, Any] = {}
    answered = threading.Event()

    def on_connect(_c: Any, _u: Any, _f: Any, reason: Any, _p: Any = None) -> None:
        outcome["reason"] = reason
        answered.set()

    client.on_connect = on_connect
    try:
        client.connect(settings.mqtt_host, settings.mqtt_port, **connect)
    except OSError as exc:
        yield Connack(f"cannot reach the broker at {settings.mqtt_host}:"
                      f"{settings.mqtt_port}: {exc}")
        return
    client.loop_start()
    try:
        if not answered.wait(timeout):
            yield Connack(f"the broker did not answer the connection within {timeout:g} s")
        elif outcome["reason"].is_failure:
            yield Connack(f"the broker refused the login ({outcome['reason']})",
                          outcome["reason"])
        else:
            yield Connack(None)
    finally:
        client.disconnect()
        client.loop_stop()


def wait_connected(client: mqtt.Client, deadline: float) -> bool:
    """Wait until a client connecting in the background (`connect_async`, `loop_start`) holds
    a session, up to time.monotonic() `deadline`; False when it does not by then (the
    long-lived clients: the deliverer's publisher)."""
    while not client.is_connected():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # paho offers no wait on the connected state itself
    return True
