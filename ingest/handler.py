"""What one MQTT message becomes: `handle(topic, payload)` parses the topic and decodes the
payload into a `writer.Message` (readings to store, rejections to quarantine). Pure: no broker,
no database, no clock beyond the receive time it is given, so tests call it directly.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from ingest import topics, writer
from ingest.payload import INTERNAL_ERROR, Decoded, Limits, Rejection, decode_payload
from shared.errors import InvalidReading

log = logging.getLogger(__name__)


class Handler:
    """Decodes messages under one topic prefix with one set of limits."""

    def __init__(self, prefix: str, limits: Limits) -> None:
        self.prefix = prefix
        self.limits = limits

    def handle(self, topic: str, payload: bytes, received: datetime | None = None,
               ) -> writer.Message:
        """The message for `payload` received on `topic` (now, unless `received` is given).

        Never raises: a decoder bug becomes an `internal_error` rejection of the whole message
        (logged with its traceback), so it cannot kill the thread that delivered the message.
        """
        received = received or datetime.now(UTC)
        try:
            return self._decode(topic, payload, received)
        except Exception as exc:
            log.exception("decoding a message on %s failed", topic)
            return writer.Message(topic, payload, received, None, None, Decoded(
                rejections=[Rejection(None, INTERNAL_ERROR, f"decoder failed: {exc!r}")]))

    def _decode(self, topic: str, payload: bytes, received: datetime) -> writer.Message:
        try:
            where = topics.parse_topic(topic, self.prefix)
        except InvalidReading as exc:
            return writer.Message(topic, payload, received, topics.topic_device(topic, self.prefix),
                                  None, Decoded(rejections=[Rejection(None, exc.code, exc.detail)]))
        decoded = decode_payload(payload, kind=where.kind, device=where.device, now=received,
                                 limits=self.limits)
        return writer.Message(topic, payload, received, where.device, where.kind, decoded)


def handle(topic: str, payload: bytes, *, prefix: str = "sensors",
           limits: Limits | None = None, received: datetime | None = None) -> writer.Message:
    """`Handler(prefix, limits).handle(topic, payload, received)` with default limits."""
    return Handler(prefix, limits or Limits()).handle(topic, payload, received)
