"""What one MQTT message becomes: `handle(topic, payload)` parses the topic and decodes the
payload into a `Message` (readings to store, rejections to quarantine). Pure: no broker,
no database, no clock beyond the receive time it is given, so tests call it directly.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ingest import topics
from ingest.payload import Decoded, Limits, Rejection, decode_payload
from ingest.topics import READINGS
from shared.errors import InvalidReading
from shared.quarantinecodes import INTERNAL_ERROR

log = logging.getLogger(__name__)

_INTO_QUARTER = tuple(timedelta(minutes=m) for m in range(15))  # minutes past a quarter hour


@dataclass(slots=True)
class Message:
    """One received MQTT message and what decoding made of it.

    `device` and `kind` come from the topic (None when the topic itself was rejected, in which
    case `decoded` holds that rejection).
    """

    topic: str
    payload: bytes
    received: datetime
    device: str | None
    kind: str | None
    decoded: Decoded
    dup: bool = False  # the broker flagged it as a redelivery (its rows may be stored already)
    # Quarter hours the readings fall in, computed on creation (in paho's thread, off the
    # writer's critical path). Every rollup bucket boundary in every zone, DST changes
    # included, is on a quarter hour, so a quarter's start names the same buckets as any
    # reading inside it.
    quarters: set[datetime] = field(init=False)

    def digest(self) -> bytes:
        """SHA-256 of topic, NUL and payload: names the message in quarantine."""
        return hashlib.sha256(self.topic.encode("utf-8", "surrogateescape") + b"\0"
                              + self.payload).digest()

    def __post_init__(self) -> None:
        # Accepted readings are on the 5-minute grid (payload.py), so only the minute moves.
        # Hot path, one per reading: subtracting a ready timedelta is six times cheaper than
        # datetime.replace.
        self.quarters = ({r.time - _INTO_QUARTER[r.time.minute % 15]
                          for r in self.decoded.readings} if self.kind == READINGS else set())


class Handler:
    """Decodes messages under one topic prefix with one set of limits."""

    def __init__(self, prefix: str, limits: Limits) -> None:
        self.prefix = prefix
        self.limits = limits

    def handle(self, topic: str, payload: bytes, received: datetime | None = None,
               ) -> Message:
        """The message for `payload` received on `topic` (now, unless `received` is given).

        Never raises: a decoder bug becomes an `internal_error` rejection of the whole message
        (logged with its traceback), so it cannot kill the thread that delivered the message.
        """
        received = received or datetime.now(UTC)
        try:
            return self._decode(topic, payload, received)
        except Exception as exc:
            log.exception("decoding a message on %s failed", topic)
            return Message(topic, payload, received, None, None, Decoded(
                rejections=[Rejection(None, INTERNAL_ERROR, f"decoder failed: {exc!r}")]))

    def _decode(self, topic: str, payload: bytes, received: datetime) -> Message:
        try:
            where = topics.parse_topic(topic, self.prefix)
        except InvalidReading as exc:
            return Message(topic, payload, received, topics.topic_device(topic, self.prefix),
                                  None, Decoded(rejections=[Rejection(None, exc.code, exc.detail)]))
        decoded = decode_payload(payload, kind=where.kind, device=where.device, now=received,
                                 limits=self.limits)
        return Message(topic, payload, received, where.device, where.kind, decoded)


def handle(topic: str, payload: bytes, *, prefix: str = "sensors",
           limits: Limits | None = None, received: datetime | None = None) -> Message:
    """`Handler(prefix, limits).handle(topic, payload, received)` with default limits."""
    return Handler(prefix, limits or Limits()).handle(topic, payload, received)
