"""The Patroni failover drill (docs/operations.md "The automatic failover profile"): the
SDS_DB=patroni profile as deploy/services.sh runs it (three etcd members, two PostgreSQL nodes
under Patroni, synchronous replication, HAProxy), in a scratch copy of deploy/. Under MQTT ingest
(real mosquitto, real ingester) and API load (gunicorn), the leader node is lost: its
PostgreSQL, its Patroni and its supervisor SIGKILLed at once. A new leader must serve writes
within 30 s, every PUBACKed reading stored once, the failed API requests counted; the lost node,
started again, rejoins as a replica (pg_rewind when its WAL went further). Run once with each way
of finding the leader (HAProxy following Patroni's REST API; a multi-host libpq URL), on the same
cluster: the second run loses the node the first one promoted.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from people import accounts
from shared.config import Settings
from testbed.apiserver import edge_api_env, gunicorn_api
from testbed.mosquitto import MosquittoBroker
from testbed.process import REPO, free_port, port_open
from tests.support.failover import ApiLoad, WriteProbe
from tests.support.figures import Figures
from tests.support.ingesting import (
    ROOT,
    IngesterProcess,
    Ledger,
    Run,
    Site,
    ledger_check,
    make_site,
    settings_env,
    stored_times,
    wait_for,
)

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(os.geteuid() != 0, reason="the nodes run as users postgres and etcd"),
]

NODES = 2
GOAL_S = 30.0  # the goal for a new leader serving writes


def _free_base() -> int:
    """A port base with B..B+33 free (HAProxy, nodes, REST APIs, etcd)."""
    for _ in range(50):
        base = random.randrange(42000, 60000, 50)
        if not any(port_open(base + off) for off in range(34)):
            return base
    raise AssertionError("no free port base")


class Profile:
    """deploy/services.sh with SDS_DB=patroni in a scratch copy of deploy/."""

    def __init__(self, tmp: Path) -> None:
        shutil.copytree(REPO / "deploy", tmp / "deploy")
        (tmp / ".venv").symlink_to(REPO / ".venv")
        self.state = tmp / ".state"
        self.base = _free_base()
        self.env = {**os.environ, "SDS_DB": "patroni", "SDS_PATRONI_NODES": str(NODES),
                    "SDS_PATRONI_PORT_BASE": str(self.base), "SDS_PG_PORT": str(free_port()),
                    "SDS_MQTT_PORT": str(free_port())}
        self.script = str(tmp / "deploy" / "services.sh")

    def run(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", self.script, *args], env={**self.env, **extra},
                              capture_output=True, text=True, timeout=400,
                              stdin=subprocess.DEVNULL)

    def start(self, **extra: str) -> None:
        r = self.run("start", **extra)
        assert r.returncode == 0, r.stdout + r.stderr

    def secrets(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in
                    (self.state / "secrets.env").read_text().splitlines()
                    if line and not line.startswith("#"))

    def rest(self, k: int, path: str) -> tuple[int, dict[str, object]]:
        """Node k's REST API answer to GET path: (status, JSON body); (0, {}) if none."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.base + 10 + k}{path}",
                                        timeout=2) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except (OSError, ValueError):
            return 0, {}

    def leader(self) -> int | None:
        for k in range(1, NODES + 1):
            if self.rest(k, "/primary")[0] == 200:
                return k
        return None

    def kill_node(self, k: int) -> None:
        """Lose node k at once: its PostgreSQL (the postmaster's whole process group), its
        Patroni and the supervisor that would restart it, all SIGKILLed."""
        data = self.state / "patroni" / f"node{k}" / "data"
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        supervisor = int((self.state / "pids" / f"patroni-{k}.pid").read_text())
        patroni = int((self.state / "supervise" / f"patroni-{k}.status").read_text().split()[1])
        os.killpg(os.getpgid(postmaster), signal.SIGKILL)
        os.kill(patroni, signal.SIGKILL)
        os.kill(supervisor, signal.SIGKILL)

    def log(self, k: int) -> str:
        return (self.state / "logs" / f"patroni-{k}.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Profile]:
    """The profile started once, migrated; both drills run on it."""
    p = Profile(tmp_path_factory.mktemp("patroni"))
    try:
        p.start()
        r = subprocess.run([sys.executable, "-m", "admin", "db", "upgrade"], cwd=ROOT,
                           env={**os.environ, "SDS_DATABASE_URL": p.secrets()["SDS_DATABASE_URL"]},
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        yield p
    finally:
        stopped = p.run("stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.fixture(scope="module")
def site(profile: Profile) -> Site:
    """Device A1 (the one tests.support.ingesting.Run publishes as) deployed at a site."""
    with psycopg.connect(profile.secrets()["SDS_DATABASE_URL"]) as c:
        return make_site(c, device="A1", org_name="Failover drill")


@pytest.fixture(scope="module")
def api_key(profile: Profile, site: Site) -> str:
    """An API key reading the organisation's data."""
    with psycopg.connect(profile.secrets()["SDS_DATABASE_URL"]) as c:
        uid = accounts.create_user(c, org=site.org, email="drill@example.org",
                                   password="drill-password-1")
        key = str(accounts.create_api_key(c, user=uid, scopes=["data:read"])["apikey"])
        c.commit()
    return key


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoBroker]:
    b = MosquittoBroker().start(tmp_path / "mqtt", durable=True)
    try:
        yield b
    finally:
        b.cleanup()


def test_profile_runs_synchronous_replicas_and_archives(profile: Profile) -> None:
    """What the drill relies on: one leader, its replica synchronous, checksums on (pg_rewind),
    WAL archived by pgBackRest from the leader, and services.sh status saying so."""
    leader = profile.leader()
    assert leader is not None
    # Patroni names the synchronous replica on its next loop after the replica streams.
    wait_for(lambda: profile.run("psql", "-tA", "-c", "SELECT sync_state FROM "
                                 "pg_stat_replication").stdout.split() == ["sync"] * (NODES - 1),
             60, every=1, what="the replica synchronous")
    r = profile.run("psql", "-tA", "-c", "SHOW data_checksums")
    assert r.stdout.strip() == "on"
    profile.run("psql", "-tA", "-c", "SELECT pg_switch_wal() IS NOT NULL")
    wait_for(lambda: "0" != profile.run("psql", "-tA", "-c",
                                        "SELECT archived_count FROM pg_stat_archiver"
                                        ).stdout.strip(), 60, what="a WAL segment archived")
    status = profile.run("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"patroni-{leader}: master running" in status.stdout, status.stdout


@pytest.mark.timeout(900)
@pytest.mark.parametrize("discovery", ["haproxy", "libpq"])
def test_leader_lost_under_load(profile: Profile, api_key: str, broker: MosquittoBroker,
                                tmp_path: Path, figures: Figures, discovery: str) -> None:
    profile.start(SDS_PATRONI_DISCOVERY=discovery)  # rewrites SDS_DATABASE_URL in secrets.env
    wait_for(lambda: all(profile.rest(k, "/health")[0] == 200 for k in range(1, NODES + 1)),
             120, what="every node running")
    url = profile.secrets()["SDS_DATABASE_URL"]
    assert (url.count(",") == NODES - 1) == (discovery == "libpq"), url
    tag = discovery
    with psycopg.connect(url) as c:
        c.execute("DELETE FROM calibrated WHERE device = 'A1'")  # the first drill's readings

    s = Settings(database_url=url, mqtt_host="127.0.0.1", mqtt_port=broker.port,
                 mqtt_client_id=f"ing-{tag}", topic_prefix=f"t{tag}", ingest_batch_size=40,
                 ingest_flush_interval=0.1, metrics_port=0, aggregate_metrics_port=0,
                 aggregate_interval=1)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    sched_log = open(tmp_path / "aggregate.log", "ab")
    scheduler = subprocess.Popen([sys.executable, "-m", "aggregate"], cwd=ROOT,
                                 env=settings_env(s), stdout=sched_log, stderr=sched_log)
    ledger = Ledger("127.0.0.1", broker.port)
    probe = WriteProbe(url).start()
    old = profile.leader()
    assert old is not None
    try:
        with gunicorn_api(url, tmp_path, workers=2, **edge_api_env(url)) as api:
            load = ApiLoad(api, "/api/v2/data/calibrated?device=A1&order=desc&limit=10",
                           api_key).start()
            proc.wait_subscribed(1)
            run = Run(ledger, f"{s.topic_prefix}/A1/readings", 900, 40).start()
            wait_for(lambda: len(stored_times(url)) >= 200, 90, what="readings stored")
            time.sleep(2)
            failures_before = len(load.failures)
            profile.kill_node(old)
            lost_at = time.monotonic()
            lost_wall = datetime.now(UTC)
            wait_for(lambda: profile.leader() not in (None, old), 120, every=0.2,
                     what="a new leader")
            new_leader_s = round(time.monotonic() - lost_at, 1)
            new = profile.leader()
            wait_for(lambda: probe.first_write_after(lost_at) is not None, 60,
                     what="a write through the URL after the loss")
            first_write_s = probe.first_write_after(lost_at)

            wait_for(run.done, 180, what="publishing")
            ledger_check(url, run, timeout=120)
            recovered_s = round(time.monotonic() - lost_at, 1)
            time.sleep(2)  # the API's requests after the switch, too
            load.stop()
            api_failed = len(load.failures) - failures_before
            api_requests = load.requests
            api_slowest = round(load.slowest, 1)
        assert proc.alive(), proc.log()[-3000:]

        def jobs_after() -> int:
            with psycopg.connect(url) as c:
                return int(c.execute("SELECT count(*) FROM job_runs WHERE ok AND started > %s",
                                     (lost_wall,)).fetchone()[0])

        wait_for(jobs_after, 90, what="a rollup job run on the new leader")
        assert scheduler.poll() is None
    finally:
        probe.stop()
        ledger.close()
        proc.kill()
        scheduler.terminate()
        scheduler.wait(30)
        sched_log.close()

    # The lost node, started again (services.sh start, as after a reboot), rejoins as a replica
    # of the new leader, synchronous again.
    rejoin_at = time.monotonic()
    log_before = len(profile.log(old))
    profile.start(SDS_PATRONI_DISCOVERY=discovery)
    wait_for(lambda: profile.rest(old, "/replica")[0] == 200, 180, every=0.5,
             what="the old leader running as a replica")
    wait_for(lambda: profile.run("psql", "-tA", "-c", "SELECT sync_state FROM "
                                 "pg_stat_replication").stdout.split() == ["sync"], 120,
             what="the old leader synchronous again")
    rejoined_s = round(time.monotonic() - rejoin_at, 1)
    assert profile.leader() == new
    rewound = "running pg_rewind" in profile.log(old)[log_before:]

    rows = stored_times(url)
    missing = len(run.acked - set(rows))
    extra = len(rows) - len(set(rows) & run.acked)
    assert first_write_s is not None and first_write_s <= GOAL_S, first_write_s
    figures.record(f"failover.patroni_{discovery}",
                   {"acked": len(run.acked), "missing": missing, "extra": extra,
                    "new leader s": new_leader_s, "first write s": first_write_s,
                    "all acked stored s": recovered_s,
                    "API failed": api_failed, "API requests": api_requests,
                    "API slowest s": api_slowest,
                    "old leader rejoined s": rejoined_s, "pg_rewind": "yes" if rewound else "no"},
                   section="failover",
                   title=f"Patroni profile ({NODES} nodes, synchronous): leader node SIGKILLed "
                         f"under ingest and API load, leader found through {discovery}. "
                         "RPO = missing; RTO = first write s",
                   target=f"missing 0, extra 0, first write <= {GOAL_S:g} s",
                   source="tests/cluster/test_patroni.py")


@pytest.mark.timeout(600)
@pytest.mark.usefixtures("site")
def test_leader_postgres_killed_alone(profile: Profile, broker: MosquittoBroker, tmp_path: Path,
                                      figures: Figures) -> None:
    """Only the leader's PostgreSQL is SIGKILLed (its Patroni lives): Patroni restarts it in
    place (crash recovery) while it still holds the leader key, or the replica takes over;
    either way writes come back and no acknowledged reading is lost."""
    profile.start()  # HAProxy, the default
    wait_for(lambda: all(profile.rest(k, "/health")[0] == 200 for k in range(1, NODES + 1)),
             180, what="every node running")
    url = profile.secrets()["SDS_DATABASE_URL"]
    with psycopg.connect(url) as c:
        c.execute("DELETE FROM calibrated WHERE device = 'A1'")
    s = Settings(database_url=url, mqtt_host="127.0.0.1", mqtt_port=broker.port,
                 mqtt_client_id="ing-pgkill", topic_prefix="tpgkill", ingest_batch_size=40,
                 ingest_flush_interval=0.1, metrics_port=0)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    ledger = Ledger("127.0.0.1", broker.port)
    probe = WriteProbe(url).start()
    old = profile.leader()
    assert old is not None
    try:
        proc.wait_subscribed(1)
        run = Run(ledger, f"{s.topic_prefix}/A1/readings", 600, 40).start()
        wait_for(lambda: len(stored_times(url)) >= 150, 90, what="readings stored")
        data = profile.state / "patroni" / f"node{old}" / "data"
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        os.killpg(os.getpgid(postmaster), signal.SIGKILL)
        lost_at = time.monotonic()
        wait_for(lambda: probe.first_write_after(lost_at) is not None, 90, every=0.2,
                 what="a write after the kill")
        first_write_s = probe.first_write_after(lost_at)
        wait_for(run.done, 180, what="publishing")
        ledger_check(url, run, timeout=120)
        assert proc.alive(), proc.log()[-3000:]
    finally:
        probe.stop()
        ledger.close()
        proc.kill()
    wait_for(lambda: all(profile.rest(k, "/health")[0] == 200 for k in range(1, NODES + 1)),
             180, what="every node running again")
    leader = profile.leader()
    rows = stored_times(url)
    assert first_write_s is not None and first_write_s <= GOAL_S, first_write_s
    figures.record("failover.patroni_postgres_only",
                   {"acked": len(run.acked), "missing": len(run.acked - set(rows)),
                    "extra": len(rows) - len(set(rows) & run.acked),
                    "first write s": first_write_s,
                    "leader": "same node, restarted" if leader == old else "the replica"},
                   section="failover",
                   title="Patroni profile: the leader's PostgreSQL alone SIGKILLed under ingest "
                         "(its Patroni lives). RPO = missing; RTO = first write s",
                   target=f"missing 0, extra 0, first write <= {GOAL_S:g} s",
                   source="tests/cluster/test_patroni.py")
