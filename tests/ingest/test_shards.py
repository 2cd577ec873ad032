"""Sharded ingesters (issue 17): N processes share the stream through `$share/<group>/...`,
each with its own client id, persistent session, leader lock and standby.

First the broker behaviour the design rests on, measured on the real mosquitto 2.0: an offline
shared subscriber with a persistent session keeps getting its share queued, and a dead member's
unacknowledged messages are not handed to the others. Then the ingester: shards split the
stream, `--retire` drains a removed shard's session and ends it, and the ledger holds through 20
SIGKILLs of shard leaders (each replaced by its standby) in a 20,000-message run.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from ingest import shards
from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from tests.support.figures import Figures
from tests.support.ingesting import (
    IngesterProcess,
    Ledger,
    Run,
    RunningIngester,
    Site,
    drop_session,
    ledger_check,
    record_ledger,
    stored_times,
    wait_for,
)


def test_shard_identity_and_subscription() -> None:
    base = Settings(mqtt_username="ingester", mqtt_client_id="ingester", metrics_port=9108,
                    ingest_share_group="Secret_group-0123456789")
    assert shards.shard_settings(base) is base
    assert shards.subscriptions(base) == ["sensors/#"]
    third = shards.shard_settings(base.replace(ingest_shards=4, ingest_shard=3))
    assert (third.mqtt_username, third.mqtt_client_id, third.metrics_port) == (
        "ingester-3", "ingester-3", 9108 + 100 + 2)
    assert shards.subscriptions(third) == ["$share/Secret_group-0123456789/sensors/#"]
    assert shards.legacy_subscriptions(third) == ["$share/sds-ingest/sensors/#"]
    assert shards.legacy_subscriptions(base) == []
    assert shards.runs_retention(third) is False
    for shards_n, shard in ((4, 0), (4, 5), (1, 2), (17, 1), (0, 0)):
        with pytest.raises(ValueError):
            shards.shard_settings(base.replace(ingest_shards=shards_n, ingest_shard=shard))


def test_shipped_acl_grants_every_shard_user() -> None:
    acl = (Path(__file__).resolve().parents[2] / "deploy" / "mosquitto" / "acl").read_text()
    for k in range(1, shards.MAX_SHARDS + 1):
        assert f"user ingester-{k}\ntopic read sensors/#\n" in acl


# ---- the broker's behaviour ---------------------------------------------------------------------

class Member:
    """A shared subscriber with a persistent session, recording the payloads it receives."""

    def __init__(self, port: int, client_id: str, topic: str, *, ack: bool = True) -> None:
        self.got: list[int] = []
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=mqtt.MQTTv5, manual_ack=not ack)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 600
        self.client.on_connect = lambda c, *_: c.subscribe(
            f"$share/g/{topic}", options=SubscribeOptions(qos=1))
        self.client.on_message = lambda _c, _u, m: self.got.append(int(m.payload))
        self.client.connect("127.0.0.1", port, clean_start=False, properties=props)
        self.client.loop_start()
        wait_for(self.client.is_connected, 10, what=f"{client_id} connect")
        time.sleep(0.3)  # the SUBACK

    def drop(self) -> None:
        """Close the socket without DISCONNECT (as a killed process would)."""
        self.client.loop_stop()
        self.client.socket().close()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def test_mosquitto_keeps_queueing_to_an_offline_shared_subscriber(
    broker: MosquittoBroker, figures: Figures,
) -> None:
    topic = f"share-{uuid.uuid4().hex[:6]}/x"
    pub = Ledger("127.0.0.1", broker.port)
    tag = uuid.uuid4().hex[:6]
    s1 = Member(broker.port, f"s1-{tag}", topic)
    s2 = Member(broker.port, f"s2-{tag}", topic)
    try:
        s2.close()  # offline, session kept
        for i in range(100):
            assert pub.publish(topic, str(i).encode())
        time.sleep(1.0)
        while_offline = len(s1.got)
        s2 = Member(broker.port, f"s2-{tag}", topic)
        wait_for(lambda: len(s2.got) >= 100 - while_offline, 10, what="s2's queued share")
        # A member dies holding unacknowledged messages: are they handed to s1?
        s2.close()
        s2 = Member(broker.port, f"s2-{tag}", topic, ack=False)
        s1.got.clear()
        for i in range(100, 140):
            assert pub.publish(topic, str(i).encode())
        time.sleep(0.5)
        held = [x for x in s2.got if x >= 100]
        s2.drop()
        for i in range(140, 160):
            assert pub.publish(topic, str(i).encode())
        time.sleep(1.5)
        moved = [x for x in s1.got if x in held]
        s2 = Member(broker.port, f"s2-{tag}", topic)
        wait_for(lambda: set(held) <= set(s2.got), 10, what="held messages on resume")
    finally:
        for member in (s1, s2):
            member.close()
        pub.close()
    # Round robin ignores that s2 is offline: about half waited in its session.
    assert 40 <= while_offline <= 60
    assert held and moved == []
    figures.record("delivery.shared_subscription_offline_member", {
        "delivered to the online member of 100 while the other was offline": while_offline,
        "held unacked by a member that died": len(held),
        "of those handed to the live member": len(moved),
        "delivered when the dead member's session resumed": len(held)}, section="delivery",
        title="mosquitto 2.0 shared subscription with persistent sessions: an offline member "
              "keeps its round-robin share queued; a dead member's unacked messages wait for it",
        target="recorded (why each shard needs a standby, and --retire before removing one)",
        source="tests/ingest/test_shards.py")


# ---- sharded ingesters --------------------------------------------------------------------------

def _sharded(s: Settings, n: int, k: int) -> Settings:
    return s.replace(ingest_shards=n, ingest_shard=k)


def test_two_shards_split_the_stream_and_retire_drains_one(
    site: Site, mqtt_settings: Settings, publisher: Ledger, database_url: str,
) -> None:
    topic = f"{mqtt_settings.topic_prefix}/{site.device}/readings"
    one = RunningIngester(_sharded(mqtt_settings, 2, 1)).start()
    two = RunningIngester(_sharded(mqtt_settings, 2, 2)).start()
    run = Run(publisher, topic, 200, 400).start()
    try:
        wait_for(run.done, 30, what="published")
        wait_for(lambda: run.acked <= set(stored_times(database_url)), 30,
                 what="all stored by two shards")
        got = [r.metric("sds_ingest_messages_received_total") for r in (one, two)]
        assert sum(got) >= 200 and min(got) > 50  # both took a share
        # Shard 2 goes away; its share queues in its session until --retire drains it.
        two.stop()
        more = Run(publisher, topic, 100, 400)
        more.times = [run.times[-1] - timedelta(minutes=5 * (i + 1)) for i in range(100)]
        more.start()
        wait_for(more.done, 30, what="published while shard 2 is away")
        time.sleep(1.0)
        assert not more.acked <= set(stored_times(database_url))  # half waits in shard 2
        retiring = RunningIngester(_sharded(mqtt_settings, 2, 2), retire=True).start()
        retiring.thread.join(60)
        assert not retiring.thread.is_alive(), "retire did not finish"
        assert more.acked <= set(stored_times(database_url))
    finally:
        one.stop()
        two.stop()
    # The retired session is gone: a connect with its client id finds none.
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                    client_id=f"{mqtt_settings.mqtt_client_id}-2", protocol=mqtt.MQTTv5)
    present: list[bool] = []
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 60
    c.on_connect = lambda _c, _u, flags, *_: present.append(bool(flags.session_present))
    c.connect(mqtt_settings.mqtt_host, mqtt_settings.mqtt_port, clean_start=False,
              properties=props)
    c.loop_start()
    wait_for(lambda: present, 10, what="probe connect")
    c.disconnect()
    c.loop_stop()
    assert present == [False]
    drop_session(_sharded(mqtt_settings, 2, 1).replace(
        mqtt_client_id=f"{mqtt_settings.mqtt_client_id}-1"))


SHARD_MESSAGES = 20_000
SHARD_KILLS = 20


@pytest.fixture
def shard_procs(mqtt_settings: Settings, tmp_path: Path) -> Iterator[list[IngesterProcess]]:
    """Two shards, each a leader and a standby (four processes)."""
    s = mqtt_settings.replace(ingest_batch_size=200, ingest_flush_interval=0.1)
    procs = [IngesterProcess(_sharded(s, 2, k), tmp_path / f"shard{k}-{i}.log")
             for k in (1, 2) for i in (0, 1)]
    for p in procs:
        p.start()
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for k in (1, 2):
            drop_session(s.replace(mqtt_client_id=f"{s.mqtt_client_id}-{k}"))


def _leader(procs: list[IngesterProcess]) -> IngesterProcess | None:
    """A live process whose log says it holds its shard's lock and has not been replaced."""
    live = [p for p in procs if p.alive()
            and "holding the leader lock" in p.log().rsplit("ingester starting", 1)[-1]]
    return random.choice(live) if live else None


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_shard_sigkill_ledger(
    site: Site, mqtt_settings: Settings, publisher: Ledger, database_url: str,
    shard_procs: list[IngesterProcess], figures: Figures,
) -> None:
    """20 SIGKILLs of shard leaders during a 20,000-message run: each shard's standby takes its
    session over (the killed process is restarted as the new standby); missing 0, extra 0."""
    topic = f"{mqtt_settings.topic_prefix}/{site.device}/readings"
    wait_for(lambda: sum("connected;" in p.log() for p in shard_procs) >= 2, 30,
             what="both shards connected")
    started = time.monotonic()
    run = Run(publisher, topic, SHARD_MESSAGES, 500).start()
    kills = 0
    rng = random.Random(17)
    while kills < SHARD_KILLS and not run.done():
        time.sleep(rng.uniform(0.8, 1.6))
        victim = _leader(shard_procs)
        if victim is None:
            continue
        victim.kill()
        kills += 1
        victim.start()  # back as the standby of its shard
    wait_for(run.done, 120, what="publishing finished")
    ledger_check(database_url, run, timeout=120)
    elapsed = time.monotonic() - started
    assert kills == SHARD_KILLS
    record_ledger(figures, "shard_sigkill",
                  f"2 shards x (leader + standby), {SHARD_KILLS} leader SIGKILLs in a "
                  f"{SHARD_MESSAGES:,}-message run at 500 msg/s (issue 17)", database_url, run,
                  source="tests/ingest/test_shards.py", kills=kills, seconds=round(elapsed, 1))


# ---- deploy/run.sh's shard layout ---------------------------------------------------------------

RUN_SH = Path(__file__).resolve().parents[2] / "deploy" / "run.sh"


def _run_sh(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`script` in bash with deploy/run.sh sourced (which only defines its functions then)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
    return subprocess.run(["bash", "-c", f'. "{RUN_SH}"; {script}'], capture_output=True,
                          text=True, env={**base, **env}, timeout=30)


@pytest.mark.usefixtures("processes")
def test_run_sh_starts_shards_with_standbys() -> None:
    one = _run_sh('api_layout; echo "${INGEST_PROCS[@]}"', SDS_INGEST_SHARDS="1")
    assert one.stdout.split() == ["ingest"]
    three = _run_sh('api_layout; echo "${INGEST_PROCS[@]}"; VENV=/v; proc_argv ingest-2-standby;'
                    ' echo "${ARGV[@]}"; proc_argv ingest-3; echo "${ARGV[@]}"',
                    SDS_INGEST_SHARDS="3", SDS_METRICS_PORT="9108")
    layout, standby, shard = three.stdout.splitlines()
    assert layout.split() == ["ingest-1", "ingest-1-standby", "ingest-2", "ingest-2-standby",
                              "ingest-3", "ingest-3-standby"]
    assert standby == ("env SDS_INGEST_SHARDS=3 SDS_INGEST_SHARD=2 SDS_METRICS_PORT=9158 "
                       "/v/bin/python -m ingest")
    assert shard == "env SDS_INGEST_SHARDS=3 SDS_INGEST_SHARD=3 /v/bin/python -m ingest"
    no_standby = _run_sh('api_layout; echo "${INGEST_PROCS[@]}"', SDS_INGEST_SHARDS="2",
                         SDS_INGEST_STANDBY="0")
    assert no_standby.stdout.split() == ["ingest-1", "ingest-2"]
    bad = _run_sh("api_layout", SDS_INGEST_SHARDS="17")
    assert bad.returncode != 0 and "1..16" in bad.stderr


@pytest.mark.usefixtures("processes")
def test_run_sh_defaults_to_one_shard_per_core() -> None:
    """Without SDS_INGEST_SHARDS: one shard per core (at most 16) on mosquitto, each with a
    standby; one shard on the RabbitMQ cluster profile (MQTT 3.1.1: no shared subscription)."""
    cores = min(os.cpu_count() or 1, 16)
    default = _run_sh('api_layout; echo "$INGEST_SHARDS"; echo "${INGEST_PROCS[@]}"',
                      SDS_BROKER="mosquitto")
    count, procs = default.stdout.splitlines()
    assert int(count) == cores
    assert procs.split() == (["ingest"] if cores == 1 else [
        name for k in range(1, cores + 1) for name in (f"ingest-{k}", f"ingest-{k}-standby")])
    cluster = _run_sh('api_layout; echo "$INGEST_SHARDS"; echo "${INGEST_PROCS[@]}"',
                      SDS_BROKER="rabbitmq-cluster")
    assert cluster.stdout.split() == ["1", "ingest"]


@pytest.mark.usefixtures("processes")
@pytest.mark.parametrize("prev,new,targets", [
    (1, 3, ["0"]), (4, 2, ["3", "4"]), (3, 1, ["1", "2", "3"]), (2, 4, []), (2, 2, [])])
def test_run_sh_retires_the_sessions_a_new_layout_drops(
    tmp_path: Path, prev: int, new: int, targets: list[str],
) -> None:
    """retire_old_shards runs `python -m ingest --retire` once per dropped session, with the old
    layout's shard settings, and records the new count."""
    calls = tmp_path / "calls"
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(
        f'#!/bin/sh\necho "$SDS_INGEST_SHARDS $SDS_INGEST_SHARD $*" >> {calls}\n')
    (venv / "python").chmod(0o755)
    (tmp_path / "ingest-shards").write_text(f"{prev}\n")
    out = _run_sh(f'STATE={tmp_path}; LOGS={tmp_path}; VENV={tmp_path}/venv; api_layout;'
                  " retire_old_shards", SDS_INGEST_SHARDS=str(new))
    assert out.returncode == 0, out.stderr
    made = calls.read_text().splitlines() if calls.exists() else []
    assert made == [f"{prev} {k} -m ingest --retire" for k in targets]
    assert (tmp_path / "ingest-shards").read_text().strip() == str(new)
