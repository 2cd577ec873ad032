"""MQTT topic names: `{prefix}/{device}/readings` and `{prefix}/{device}/health`; pure.

The ingester subscribes to everything under `{prefix}/`, not only to these two kinds: the
broker lets a device publish anywhere under its own `{prefix}/{device}/` (deploy/mosquitto/acl),
and a message on any other topic there must reach quarantine as `bad_topic` rather than vanish
for want of a subscriber.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from shared.errors import InvalidReading

READINGS = "readings"
HEALTH = "health"
KINDS = (READINGS, HEALTH)

# Same rule as the devices.name CHECK constraint of 0001: a topic level that could never name a
# device is rejected here with a clear reason instead of as an unknown device. Deliberately not
# the stricter rule for new names (shared.places.DEVICE_NAME, migration 0085): a device
# registered as '..' before 0085 still exists and its readings must still be stored.
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class DeviceTopic:
    """A parsed topic: which device sent it and whether it carries readings or health."""

    device: str
    kind: str


def subscriptions(prefix: str) -> list[str]:
    """The topic filters the ingester subscribes to: all of `{prefix}/`."""
    return [f"{prefix}/#"]


def topic_device(topic: str, prefix: str) -> str | None:
    """The device a topic under `{prefix}/` belongs to (its second level, when that is a valid
    device name), even when the topic itself is not one the ingester accepts; else None.

    The broker's ACL lets only device D publish under `{prefix}/D/`, so this names the sender.
    """
    parts = topic.split("/", 2)
    if len(parts) >= 2 and parts[0] == prefix and _DEVICE_NAME.match(parts[1]):
        return parts[1]
    return None


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
