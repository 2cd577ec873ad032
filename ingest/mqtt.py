"""paho-mqtt wiring of the ingester: one MQTT 5 (or 3.1.1) connection with a persistent session.

- paho 2.x, `CallbackAPIVersion.VERSION2`, MQTT 5, a fixed client id, `clean_start=False` and a
  SessionExpiryInterval: the broker keeps the session and queues QoS 1 messages while the
  ingester is away (paho's default Clean Start would discard them on every restart).
- Subscriptions are made in `on_connect`, so every reconnect renews them. They cover all of
  `{prefix}/#` (shared as `$share/<secret group>/{prefix}/#` between shards, ingest/shards.py): a
  device's message on a topic the ingester does not accept is quarantined as `bad_topic`, not
  left without a subscriber. Retain Handling 2: the broker never sends a stored retained
  message on (re)subscribing. A retained publish still reaches the ingester once, as it is
  published (or queued in the session while the ingester is away), so a reconnect can neither
  re-ingest nor re-quarantine it.
- On mosquitto it also subscribes to the broker's shared subscription count (QoS 0, retained
  value sent at once) for the foreign group member alarm, ingest/groupwatch.py; those `$SYS`
  messages go to the watch, never to the committer. A shard first unsubscribes the old public
  group's filter (ingest/shards.py LEGACY_GROUP), which its resumed session may still hold.
- `manual_ack=True`: the committer acknowledges a message after its commit. Acks carry the
  connection generation that delivered the message; an ack from an earlier connection is never
  sent on a later one (its message ids mean nothing there).
- The broker sends at most Receive Maximum unacknowledged messages (mosquitto honours the
  client's CONNECT property over max_inflight_messages).
- Every (re)connect first calls `may_connect`, which raises to veto it (the leader check: a
  leader that lost its lock must not take the session back from its standby).
- The RabbitMQ cluster profile (`SDS_MQTT_PROTOCOL=3.1.1`, shared/brokers.py): MQTT 3.1.1 with
  `clean_session=False` instead of Clean Start and Session Expiry, the broker's `mqtt.prefetch`
  instead of Receive Maximum, no Retain Handling (that broker keeps no retained messages), and
  each reconnect goes to the next node of `SDS_MQTT_FAILOVER`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import cast

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from ingest import groupwatch, shards
from ingest.metrics import Metrics
from shared import brokers
from shared.config import Settings

log = logging.getLogger(__name__)

# (generation, mid, qos, topic, payload, dup) of one received message
OnMessage = Callable[[int, int, int, str, bytes, bool], None]


class MqttLink:
    """The broker connection: connect, subscribe, receive, acknowledge by generation."""

    def __init__(self, settings: Settings, metrics: Metrics, *, on_message: OnMessage,
                 may_connect: Callable[[], None], stopping: threading.Event,
                 retire: bool = False) -> None:
        self.settings = settings
        # Retiring (ingest/shards.py): unsubscribe instead of subscribing, so the session gets
        # nothing new; what it already queued is still delivered and ingested.
        self.retire = retire
        self.unsubscribed = threading.Event()
        self.metrics = metrics
        self.protocol = brokers.protocol(settings)  # ValueError for an unknown version
        if self.protocol != mqtt.MQTTv5 and settings.ingest_shards > 1:
            # Shards share the stream through an MQTT 5 shared subscription ($share), which
            # MQTT 3.1.1 (and RabbitMQ 3.10) does not have.
            raise ValueError("SDS_INGEST_SHARDS: shards need MQTT 5 shared subscriptions; with "
                             "SDS_MQTT_PROTOCOL=3.1.1 (the RabbitMQ cluster profile) run one")
        self.rotation = brokers.Rotation(settings)
        # $SYS exists on mosquitto only (the RabbitMQ profile speaks 3.1.1 and has no shards).
        self.watch = (groupwatch.GroupWatch(settings, metrics)
                      if self.protocol == mqtt.MQTTv5 and not retire else None)
        self.receive_maximum = max(1, min(65535, settings.ingest_receive_maximum))
        self.ready = threading.Event()  # set once subscribed (tests wait on it)
        self._deliver = on_message
        self._may_connect = may_connect
        self._stopping = stopping
        self._lock = threading.Lock()  # guards _generation/_connected against ack()
        self._generation = 0
        self._connected = False
        self._connects = 0
        self.client = self._make_client()

    @property
    def generation(self) -> int:
        """The current connection's generation (bumped on every connect and disconnect)."""
        return self._generation

    def start(self) -> None:
        """Connect in the background (retrying with back-off) and run paho's network thread."""
        s = self.settings
        props = None
        if self.protocol == mqtt.MQTTv5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = s.mqtt_session_expiry
            props.ReceiveMaximum = self.receive_maximum
        log.info("connecting to mqtt %s as %s (MQTT %s, client id %s, receive maximum %d)",
                 ", ".join(f"{h}:{p}" for h, p in self.rotation.endpoints),
                 s.mqtt_username or "(anonymous)", s.mqtt_protocol, s.mqtt_client_id,
                 self.receive_maximum)
        brokers.connect_async(self.client, s, keepalive=s.mqtt_keepalive, persistent=True,
                              properties=props)
        logging.getLogger("paho").addFilter(self._quiet_when_stopping)
        self.client.loop_start()

    def close(self, *, end_session: bool = False) -> None:
        """Disconnect; the session stays on the broker unless `end_session` (then the broker
        deletes it: MQTT 5 lets DISCONNECT set the Session Expiry Interval to 0). No ack is
        sent after this."""
        self.set_connected(False)
        props = None
        if end_session:
            props = Properties(PacketTypes.DISCONNECT)
            props.SessionExpiryInterval = 0
        self.client.disconnect(properties=props)
        self.client.loop_stop()
        logging.getLogger("paho").removeFilter(self._quiet_when_stopping)

    def set_connected(self, connected: bool) -> int:
        """Record a connect or a disconnect: either starts a new generation, so a message
        delivered on an earlier connection is never acknowledged on this one. Returns it."""
        with self._lock:
            self._generation += 1
            self._connected = connected
            self.metrics.broker_connected.set(1 if connected else 0)
            return self._generation

    def ack(self, generation: int, mid: int, qos: int) -> bool:
        """Acknowledge `mid` if the connection that delivered it is still the current one;
        False when it is gone (the broker redelivers the message)."""
        with self._lock:
            if generation == self._generation and self._connected:
                self.client.ack(mid, qos)
                return True
        return False

    # ---- paho callbacks (paho's network thread) ----------------------------------------------

    def _make_client(self) -> mqtt.Client:
        s = self.settings
        client = brokers.new_client(s, s.mqtt_client_id, persistent=True, manual_ack=True,
                                    username=s.mqtt_username, password=s.mqtt_password)
        client.enable_logger(logging.getLogger("paho"))
        client.reconnect_delay_set(min_delay=1, max_delay=30)
        client.on_pre_connect = self._on_pre_connect
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe
        client.on_unsubscribe = self._on_unsubscribe
        return client

    def _on_pre_connect(self, client: mqtt.Client, _userdata: object) -> None:
        # With several broker nodes, each attempt goes to the next one (a dead node's clients
        # reach a live one on their next try); then the leader check may veto the attempt.
        host, port = self.rotation.advance(client)
        if len(self.rotation.endpoints) > 1:
            log.info("connecting to broker node %s:%d", host, port)
        self._may_connect()

    def _quiet_when_stopping(self, record: logging.LogRecord) -> bool:
        # paho 2.2 logs "Client is not connected" at ERROR when its loop ends after our own
        # disconnect; that is the expected end of a graceful stop, not an error.
        return not (self._stopping.is_set() and "not connected" in str(record.msg))

    def _on_connect(self, client: mqtt.Client, _userdata: object, flags: mqtt.ConnectFlags,
                    reason_code: ReasonCode, _props: Properties | None) -> None:
        if reason_code.is_failure:
            log.error("broker refused the connection: %s", reason_code)
            return
        self.set_connected(True)
        self._connects += 1
        self.metrics.connects.inc()
        self.metrics.session_present.set(1 if flags.session_present else 0)
        if flags.session_present:
            log.info("connected; broker resumed the session")
        elif self._connects > 1:
            self.metrics.session_lost.inc()
            log.error("connected, but the broker had no session for %s: messages queued for the "
                      "ingester while it was away may be lost", self.settings.mqtt_client_id)
        else:
            log.info("connected; new session (first start, or the broker lost the old one)")
        filters = shards.subscriptions(self.settings)
        legacy = shards.legacy_subscriptions(self.settings)
        if self.retire:
            client.unsubscribe(filters + legacy)
            return
        if legacy:
            client.unsubscribe(legacy)
        if self.protocol == mqtt.MQTTv5:
            opts = SubscribeOptions(qos=1, retainHandling=SubscribeOptions.RETAIN_DO_NOT_SEND)
            wanted = [(t, opts) for t in filters]
            if self.watch is not None:
                wanted.append((groupwatch.TOPIC, SubscribeOptions(qos=0)))
            client.subscribe(wanted)
        else:
            # MQTT 3.1.1 cannot refuse retained messages; the cluster profile keeps none
            # (mqtt.retained_message_store = noop), so a resubscribe replays nothing.
            client.subscribe([(t, 1) for t in filters])

    def _on_unsubscribe(self, _client: mqtt.Client, _userdata: object, _mid: int,
                        _reason_codes: list[ReasonCode], _props: Properties | None) -> None:
        if not self.retire:
            return  # the old public group's filter, left on connect
        log.info("retiring: unsubscribed; draining what the session had queued")
        self.unsubscribed.set()
        self.ready.set()

    def _on_subscribe(self, _client: mqtt.Client, _userdata: object, _mid: int,
                      reason_codes: list[ReasonCode], _props: Properties | None) -> None:
        if self.watch is not None and len(reason_codes) > 1 and reason_codes[-1].is_failure:
            # The $SYS count comes last: without it only the alarm is off, ingest goes on.
            log.warning("broker refused %s (%s): the foreign group member alarm is off",
                        groupwatch.TOPIC, reason_codes[-1])
            reason_codes = reason_codes[:-1]
        failed = [rc for rc in reason_codes if rc.is_failure]
        if failed:
            log.error("subscription refused: %s", ", ".join(str(rc) for rc in failed))
        else:
            self.ready.set()

    def _on_disconnect(self, _client: mqtt.Client, _userdata: object,
                       _flags: mqtt.DisconnectFlags, reason_code: ReasonCode,
                       _props: Properties | None) -> None:
        self.set_connected(False)
        if not self._stopping.is_set():
            log.warning("disconnected from the broker (%s); reconnecting", reason_code)

    def _on_message(self, _client: mqtt.Client, _userdata: object,
                    msg: mqtt.MQTTMessage) -> None:
        try:
            topic = msg.topic
        except UnicodeDecodeError:
            topic = repr(msg._topic)  # mosquitto refuses such topics; kept for the record
        if self.watch is not None and topic == groupwatch.TOPIC:
            self.watch.observe(cast(bytes, msg.payload))  # QoS 0: nothing to acknowledge
            return
        self._deliver(self._generation, msg.mid, msg.qos, topic,
                      cast(bytes, msg.payload), bool(msg.dup))  # paho hands bytes in
