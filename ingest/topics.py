"""MQTT topic names: `{prefix}/{device}/readings` and `{prefix}/{device}/health`; pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from shared.errors import InvalidReading

READINGS = "readings"
HEALTH = "health"
KINDS = (READINGS, HEALTH)

# Same rule as the devices.name CHECK constraint: a topic level that could never name a device
# is rejected here with a clear reason instead of as an unknown device.
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class DeviceTopic:
    """A parsed topic: which device sent it and whether it carries readings or health."""

    device: str
    kind: str


def subscriptions(prefix: str) -> list[str]:
    """The topic filters the ingester subscribes to."""
    return [f"{prefix}/+/{kind}" for kind in KINDS]


def topic_for(prefix: str, device: str, kind: str = READINGS) -> str:
    """The topic a device publishes `kind` messages to."""
    return f"{prefix}/{device}/{kind}"


@lru_cache(maxsize=65536)  # a handful of topics per device, parsed for every message
def parse_topic(topic: str, prefix: str) -> DeviceTopic:
    """Split `topic` into device and kind; InvalidReading('bad_topic') for anything else."""
    parts = topic.split("/")
    if len(parts) != 3 or parts[0] != prefix or parts[2] not in KINDS:
        raise InvalidReading(
            "bad_topic", f"topic {topic!r} is not {prefix}/<device>/readings or "
            f"{prefix}/<device>/health")
    if not _DEVICE_NAME.match(parts[1]):
        raise InvalidReading(
            "bad_topic", f"topic {topic!r}: {parts[1]!r} is not a device name "
            "(1-64 letters, digits, '_', '.' or '-')")
    return DeviceTopic(device=parts[1], kind=parts[2])
