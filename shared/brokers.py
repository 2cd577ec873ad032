"""Which broker to reach and in which MQTT version: shared by the ingester and the simulator.

Two broker profiles (docs/operations.md): mosquitto, one broker spoken to in MQTT 5 (the
default), and the RabbitMQ cluster profile, several nodes of one cluster spoken to in MQTT 3.1.1
(RabbitMQ 3.10 has no MQTT 5). With several nodes (`SDS_MQTT_FAILOVER`), every reconnect moves to
the next node, so a client whose node died reaches a live one on its next attempt.
"""

from __future__ import annotations

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
