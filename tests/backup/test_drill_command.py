"""`sds drill publish|check` (issue 32): the operator's RPO drill. Readings published as a
device are in the ledger once acknowledged; `check` finds them all stored (exit 0), and after
some are deleted names how many are lost and when they were acknowledged (exit 3)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest

from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from testbed.postgres import PostgresServer
from tests.support.chaos import chaos_settings
from tests.support.ingesting import IngesterProcess, make_site, settings_env, wait_for
from tests.support.restoring import SDS

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]


def test_drill_publishes_a_ledger_and_checks_it(
    own_pg: tuple[PostgresServer, str], own_broker: MosquittoBroker,  # noqa: F811  fixture
    settings: Settings, tmp_path: Path,
) -> None:
    _, url = own_pg
    with psycopg.connect(url) as c:
        make_site(c)
    s = chaos_settings(settings.replace(database_url=url), own_broker)
    env = {**settings_env(s), "SDS_DEVICE_PASSWORD": "any"}
    ledger = tmp_path / "ledger.jsonl"
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    try:
        proc.wait_subscribed(1)
        pub = subprocess.run([SDS, "drill", "publish", "A1", "--ledger", str(ledger),
                              "--count", "40", "--rate", "50"], env=env, capture_output=True,
                             text=True, timeout=120)
        assert pub.returncode == 0, pub.stdout + pub.stderr
        assert "40 readings of A1 acknowledged" in pub.stdout
        assert len(ledger.read_text().splitlines()) == 40

        def check() -> subprocess.CompletedProcess[str]:
            return subprocess.run([SDS, "drill", "check", "A1", "--ledger", str(ledger)],
                                  env=env, capture_output=True, text=True, timeout=60)

        wait_for(lambda: check().returncode == 0, 60, what="every acked reading stored")
        assert "acknowledged 40, stored 40, lost 0" in check().stdout
        with psycopg.connect(url) as c:
            c.execute("DELETE FROM calibrated WHERE time IN (SELECT time FROM calibrated "
                      "WHERE device = 'A1' ORDER BY time DESC LIMIT 5)")
        lost = check()
        assert lost.returncode == 3, lost.stdout + lost.stderr
        assert "lost 5" in lost.stdout and "the RPO of this loss" in lost.stdout
    finally:
        proc.kill()
