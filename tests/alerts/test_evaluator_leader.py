"""One active evaluator per database (alerts/evaluator/service.py on shared.locks.Leadership):
a second process stands by while the first holds the lock and takes over when it is killed;
a leader whose lock session is ended steps down and takes the lock again."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import psycopg
from prometheus_client.parser import text_string_to_metric_families

from alerts.evaluator.service import LOCK_NAME
from shared.config import Settings
from shared.locks import holders
from testbed.database import as_role
from testbed.process import free_port
from tests.support.alerting import EvaluatorProcess
from tests.support.ingesting import wait_for

SWEEP = 600.0  # no sweep during the test: the lock is what it watches


def leader_gauge(port: int) -> float | None:
    """`sds_alerts_leader` on the metrics port (None while the port does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    return next((s.value for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == "sds_alerts_leader"), None)


def lock_holders(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return holders(conn, LOCK_NAME)


def test_a_second_evaluator_stands_by_and_takes_over(
        settings: Settings, database_url: str, tmp_path: Path, processes: None) -> None:
    s = settings.replace(alert_sweep_interval=SWEEP)
    first = EvaluatorProcess(s, tmp_path / "first.log")
    second = EvaluatorProcess(s, tmp_path / "second.log")
    port = free_port()
    try:
        first.start()
        (held,) = lock_holders(database_url)
        second.start(standby=True, alerts_metrics_port=port)
        assert wait_for(lambda: leader_gauge(port) == 0.0, 60, what="the standby's metrics")
        assert "evaluator lock taken" not in second.log()
        assert lock_holders(database_url) == [held]
        first.kill()
        wait_for(lambda: "evaluator lock taken" in second.log(), 60, what="the takeover")
        assert wait_for(lambda: leader_gauge(port) == 1.0, 30, what="the new leader's gauge")
        (taken,) = lock_holders(database_url)
        assert taken != held
    finally:
        first.stop()
        second.stop()


def test_a_leader_whose_lock_session_ends_takes_the_lock_again(
        settings: Settings, database_url: str, tmp_path: Path, processes: None) -> None:
    evaluator = EvaluatorProcess(settings.replace(alert_sweep_interval=SWEEP),
                                 tmp_path / "evaluator.log")
    try:
        evaluator.start()
        (held,) = lock_holders(database_url)
        with psycopg.connect(as_role(database_url, "postgres"), autocommit=True) as su:
            assert su.execute("SELECT pg_terminate_backend(%s)", (held,)).fetchone() == (True,)
        wait_for(lambda: evaluator.log().count("evaluator lock taken") == 2, 60,
                 what="the lock taken again")
        (again,) = lock_holders(database_url)
        assert again != held
    finally:
        evaluator.stop()
