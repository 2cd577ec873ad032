"""shared.brokers.connected: the one "connect and wait for the CONNACK" of the `sds` commands'
broker sessions (admin/brokersession.py, admin/publish.py; issue 31): a session accepted, an
unreachable broker, each said once, and the client disconnected on leaving."""

from __future__ import annotations

import socket

import paho.mqtt.client as mqtt

from shared import brokers
from shared.config import Settings
from testbed.mosquitto import MosquittoBroker


def _client(settings: Settings) -> mqtt.Client:
    return brokers.new_client(settings, "sds-connack-test", persistent=False)


def test_an_unreachable_broker_is_said_so() -> None:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(mqtt_host="127.0.0.1", mqtt_port=port)
    with brokers.connected(_client(settings), settings, timeout=5,
                           keepalive=30) as connack:
        assert connack.refused is None
        assert connack.problem is not None
        assert connack.problem.startswith(f"cannot reach the broker at 127.0.0.1:{port}")


def test_an_accepted_session_and_its_end(broker: MosquittoBroker) -> None:
    settings = Settings(mqtt_host="127.0.0.1", mqtt_port=broker.port)
    client = _client(settings)
    with brokers.connected(client, settings, timeout=10,
                           keepalive=30) as connack:
        assert connack == brokers.Connack(None)
        assert client.is_connected()
    assert not client.is_connected()
