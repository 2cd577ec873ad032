"""The alarm for foreign members of a shared subscription group (issue 20).

mosquitto lets any authenticated client join any shared group it can name and then drops that
member's round-robin share at delivery when it has no read access: the shards' group name is a
secret for that reason (ingest/shards.py). This watch is the second layer. The broker publishes
`$SYS/broker/shared_subscriptions/count` (retained, every sys_interval, only when it changes);
the shards know how many shared subscriptions they hold themselves (shards x filters; zero for
an unsharded ingester, since nothing else in this product makes shared subscriptions). More
than that means a client the ingesters did not start holds one, or a removed shard's session
was not retired: either can hold back or drop readings. The gauge
`sds_ingest_foreign_shared_subscriptions` shows the excess and each rise logs one line at error
level (docs/operations.md "Alarms").

The count covers every group on the broker, so a device that made a group of its own (which
takes nothing from the shards) is reported too: it subscribed where no device may.
"""

from __future__ import annotations

import logging
import threading

from ingest import shards
from ingest.metrics import Metrics
from shared.config import Settings

log = logging.getLogger(__name__)

TOPIC = "$SYS/broker/shared_subscriptions/count"


class GroupWatch:
    """Turns the broker's shared subscription count into the foreign-member gauge and alarm."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.expected = shards.expected_shared_subscriptions(settings)
        self.metrics = metrics
        self.foreign = 0
        self._lock = threading.Lock()

    def observe(self, payload: bytes) -> int | None:
        """Record one `$SYS` count; the number of foreign shared subscriptions, or None for
        a payload that is no count (ignored)."""
        try:
            count = int(payload.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            return None
        foreign = max(0, count - self.expected)
        with self._lock:
            before, self.foreign = self.foreign, foreign
        self.metrics.shared_subscriptions.set(count)
        self.metrics.foreign_shared.set(foreign)
        if foreign > before:
            log.error("ALARM: the broker holds %d shared subscription(s), the shards made %d: %d "
                      "foreign. A client joined a shared group (a device must not subscribe: "
                      "find it in the broker log and end its session with sds device "
                      "rotate-password), or a removed shard's session was not retired (python "
                      "-m ingest --retire). docs/operations.md \"Alarms\"",
                      count, self.expected, foreign)
        elif foreign < before:
            log.warning("foreign shared subscriptions down from %d to %d (broker count %d)",
                        before, foreign, count)
        return foreign
