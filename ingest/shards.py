"""Sharded ingesters: N processes share the stream through one MQTT 5 shared subscription.

Shard k of N (1-based) is an ordinary ingester with an identity of its own: broker user and
client id `{SDS_MQTT_USERNAME}-k` / `{SDS_MQTT_CLIENT_ID}-k` (the shipped broker binds client ids
to user names), hence its own persistent session, its own leader lock (keyed on the client id,
so each shard can have a standby) and its own metrics port. Every shard subscribes to
`$share/sds-ingest/{prefix}/#`; the broker hands each message to one of them.

What mosquitto 2.0.11 does with a shared subscriber that is offline (measured here, see
docs/ingest.md "Sharded ingesters"): it keeps choosing it. A shard whose persistent session is
offline keeps receiving its round-robin share into that session's queue, and the messages a dead
shard held unacknowledged are not redelivered to the other shards. Nothing is lost, but that
share waits until the shard's session is resumed: by its standby (same client id, takes over
when the lease ends) or by its restart. Hence: run a standby per shard, or a supervisor that
restarts shards at once; never lower the shard count without retiring the removed shards'
sessions (they would keep queueing until their session expires, and then lose it all).
"""

from __future__ import annotations

from ingest import topics
from shared.config import Settings

GROUP = "sds-ingest"  # the shared subscription's group name
MAX_SHARDS = 16  # the shipped ACL grants read access to ingester-1 .. ingester-16
METRICS_PORT_OFFSET = 100  # shard k serves metrics on SDS_METRICS_PORT + 100 + k - 1


def shard_settings(settings: Settings) -> Settings:
    """The settings of this process's shard (unchanged with one shard); ValueError when the
    shard number does not fit the shard count."""
    n, k = settings.ingest_shards, settings.ingest_shard
    if not 1 <= n <= MAX_SHARDS:
        raise ValueError(f"SDS_INGEST_SHARDS: {n} is not within 1..{MAX_SHARDS}")
    if n == 1:
        if k not in (0, 1):
            raise ValueError(f"SDS_INGEST_SHARD: {k}, but SDS_INGEST_SHARDS is 1")
        return settings
    if not 1 <= k <= n:
        raise ValueError(f"SDS_INGEST_SHARD: {k} is not within 1..{n} (SDS_INGEST_SHARDS)")
    return settings.replace(
        mqtt_client_id=f"{settings.mqtt_client_id}-{k}",
        mqtt_username=f"{settings.mqtt_username}-{k}" if settings.mqtt_username else None,
        metrics_port=(settings.metrics_port + METRICS_PORT_OFFSET + k - 1
                      if settings.metrics_port else 0))


def subscriptions(settings: Settings) -> list[str]:
    """The topic filters of this process: everything under the prefix, shared between shards
    when there is more than one."""
    plain = topics.subscriptions(settings.topic_prefix)
    return [f"$share/{GROUP}/{t}" for t in plain] if settings.ingest_shards > 1 else plain


def runs_retention(settings: Settings) -> bool:
    """Only one shard (the first) applies the quarantine retention."""
    return settings.ingest_shard <= 1
