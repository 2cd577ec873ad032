"""Sharded ingesters: N processes share the stream through one MQTT 5 shared subscription.

Shard k of N (1-based) is an ordinary ingester with an identity of its own: broker user and
client id `{SDS_MQTT_USERNAME}-k` / `{SDS_MQTT_CLIENT_ID}-k` (the shipped broker binds client ids
to user names), hence its own persistent session, its own leader lock (keyed on the client id,
so each shard can have a standby) and its own metrics port. Every shard subscribes to
`$share/{group}/{prefix}/#`; the broker hands each message to one of them.

The group name is a per-install secret (SDS_INGEST_SHARE_GROUP). mosquitto's acl_file cannot
refuse a SUBSCRIBE (2.0.11 and 2.0.21 alike: its ACL check passes every subscribe and applies
read access only at delivery), so any device that knew the name could join the group and the
broker would hand it, and then drop, its round-robin share of every organisation's readings
(issue 20). A name a device cannot know is a group it cannot join; the ingester also alarms
when the broker holds more shared subscriptions than the shards made (ingest/groupwatch.py).
`LEGACY_GROUP`, the fixed name of earlier releases, is unsubscribed on every connect so an
upgraded shard's persistent session leaves that guessable group.

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

LEGACY_GROUP = "sds-ingest"  # the fixed, public group name before issue 20
GROUP_MIN_LENGTH = 16  # a secret: deploy/services.sh makes 32 url-safe characters
_GROUP_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
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
    group(settings)  # ValueError for a missing or guessable group name
    return settings.replace(
        mqtt_client_id=f"{settings.mqtt_client_id}-{k}",
        mqtt_username=f"{settings.mqtt_username}-{k}" if settings.mqtt_username else None,
        metrics_port=(settings.metrics_port + METRICS_PORT_OFFSET + k - 1
                      if settings.metrics_port else 0))


def group(settings: Settings) -> str:
    """The shards' secret shared subscription group; ValueError when it is unset, too short,
    the old public name, or has characters a share name cannot carry (`/`, `+`, `#`)."""
    name = settings.ingest_share_group or ""
    if not name:
        raise ValueError("SDS_INGEST_SHARE_GROUP: required with SDS_INGEST_SHARDS > 1 (a secret "
                         "group name; deploy/services.sh generates one in .state/secrets.env)")
    if len(name) < GROUP_MIN_LENGTH or not set(name) <= _GROUP_CHARS or name == LEGACY_GROUP:
        raise ValueError(f"SDS_INGEST_SHARE_GROUP: must be at least {GROUP_MIN_LENGTH} letters, "
                         "digits, - or _ (a random secret, e.g. python3 -c 'import secrets; "
                         "print(secrets.token_urlsafe(24))')")
    return name


def expected_shared_subscriptions(settings: Settings) -> int:
    """How many shared subscriptions all shards of this layout hold on the broker together."""
    if settings.ingest_shards <= 1:
        return 0
    return settings.ingest_shards * len(topics.subscriptions(settings.topic_prefix))


def subscriptions(settings: Settings) -> list[str]:
    """The topic filters of this process: everything under the prefix, shared between shards
    (in the secret group) when there is more than one."""
    plain = topics.subscriptions(settings.topic_prefix)
    if settings.ingest_shards <= 1:
        return plain
    name = group(settings)
    return [f"$share/{name}/{t}" for t in plain]


def legacy_subscriptions(settings: Settings) -> list[str]:
    """The filters earlier releases subscribed shards to (`$share/sds-ingest/...`): a shard
    unsubscribes them on connect, so its resumed session is no member of the public group."""
    if settings.ingest_shards <= 1:
        return []
    return [f"$share/{LEGACY_GROUP}/{t}" for t in topics.subscriptions(settings.topic_prefix)]


def runs_retention(settings: Settings) -> bool:
    """Only one shard (the first) applies the quarantine retention."""
    return settings.ingest_shard <= 1
