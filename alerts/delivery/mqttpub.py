"""Alerts on the broker: each event published at QoS 1 on `alerts/{organisation id}/{kind}`
(shared.alerttopic).

For on-site controllers (an irrigation valve that closes on a frost alert): they log in with
their organisation's alert-reader account (`sds alert-reader add`), which the broker plugin
lets subscribe to that organisation's subtree only. The deliverer publishes as
SDS_ALERTS_MQTT_USERNAME; an attempt succeeds when the broker acknowledged the message (PUBACK).
Messages are not retained (the broker plugin strips retain flags anyway).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import paho.mqtt.client as mqtt

from alerts.delivery.webhook import Outcome
from shared import alerttopic, brokers
from shared.config import Settings

log = logging.getLogger(__name__)


class Publisher:
    """One broker connection shared by the deliverer's workers, (re)connected in the background."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._client: mqtt.Client | None = None

    def _connected_client(self) -> mqtt.Client:
        with self._lock:
            if self._client is None:
                # A fresh id per process: a restarted deliverer must not wait for the broker to
                # end the old session, and it keeps no session (it needs none: the outbox is
                # the queue).
                client = brokers.new_client(
                    self.settings, f"{self.settings.alerts_mqtt_username}-{uuid.uuid4().hex[:8]}",
                    persistent=False, username=self.settings.alerts_mqtt_username,
                    password=self.settings.alerts_mqtt_password)
                brokers.connect_async(client, self.settings, keepalive=30)
                client.loop_start()
                self._client = client
            return self._client

    def publish(self, org: Any, kind: str, body: bytes, *, timeout: float) -> Outcome:
        """Publish one event; ok once the broker acknowledged it within `timeout` seconds."""
        client = self._connected_client()
        deadline = time.monotonic() + timeout
        if not brokers.wait_connected(client, deadline):
            return Outcome(False, None, "MQTT: not connected to the broker")
        info = client.publish(alerttopic.topic(org, kind), body, qos=1)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            return Outcome(False, None, f"MQTT publish: {mqtt.error_string(info.rc)}")
        timeout = max(0.1, deadline - time.monotonic())
        try:
            info.wait_for_publish(timeout)
        except (RuntimeError, ValueError) as exc:
            return Outcome(False, None, f"MQTT publish: {exc}")
        if not info.is_published():
            return Outcome(False, None, f"MQTT: no PUBACK within {timeout:g} s")
        return Outcome(True, None)

    def close(self) -> None:
        """Disconnect and stop the network thread."""
        with self._lock:
            if self._client is not None:
                self._client.disconnect()
                self._client.loop_stop()
                self._client = None
