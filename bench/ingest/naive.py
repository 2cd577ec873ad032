"""The naive ingester of benchmark (c): json.loads, one INSERT and one commit per reading,
acknowledged by paho after the callback returns (so still after the commit)."""

from __future__ import annotations

import json
import time

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from shared import db
from shared.columns import READING_INPUTS

_COLS = ["time", "device"] + [c.name for c in READING_INPUTS]
_INSERT = (f"INSERT INTO calibrated ({', '.join(_COLS)}) VALUES "
           f"({', '.join(['%s'] * len(_COLS))}) ON CONFLICT (device, time) DO NOTHING")


class NaiveIngester:
    """What a first attempt looks like: correct (ack after commit), but a commit per row."""

    def __init__(self, url: str, port: int, client_id: str, topic: str) -> None:
        self.url, self.port, self.client_id, self.topic = url, port, client_id, topic

    def drain(self, expected: int) -> float:
        """Consume `expected` queued messages; returns the seconds it took."""
        conn = db.connect(self.url)
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.client_id,
                             protocol=mqtt.MQTTv5)
        done = [0]

        def on_message(c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
            r = json.loads(msg.payload)
            device = msg.topic.split("/")[1]
            conn.execute(_INSERT, [r.get("time"), device] + [r.get(n) for n in _COLS[2:]])
            conn.commit()
            done[0] += 1
            if done[0] >= expected:
                c.disconnect()

        client.on_message = on_message
        client.on_connect = lambda c, *_: c.subscribe(self.topic, qos=1)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600
        start = time.monotonic()
        client.connect("127.0.0.1", self.port, clean_start=False, properties=props)
        client.loop_forever()
        took = time.monotonic() - start
        conn.close()
        return took
