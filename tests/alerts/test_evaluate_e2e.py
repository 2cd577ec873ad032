"""End to end with the real ingester and the real evaluator process: an MQTT reading makes a
rule fire (the event row appears within seconds, driven by the committer's NOTIFY: the sweep is
set to ten minutes), a value in the hysteresis band changes nothing, the clear condition gives
the `resolved` event; built-in kinds (battery from a health report, a burst of quarantined
messages); the evaluator SIGKILLed and restarted mid-stream loses and repeats nothing; the time
of its last pass on its metrics port."""

from __future__ import annotations

import json
import random
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from alerts.evaluator import machine
from shared import alertrules
from shared.config import Settings
from testbed.process import free_port
from tests.support.alerting import EvaluatorProcess, add_rule, events
from tests.support.figures import Figures
from tests.support.ingesting import (
    Ledger,
    RunningIngester,
    Site,
    count,
    iso,
    make_site,
    now_slot,
    topic,
    wait_for,
)

SWEEP_OFF = 600.0  # the sweep would come after the test: every event here follows a NOTIFY
FROST = {"name": "Frost", "table": "calibrated", "column": "tair",
         "condition": {"op": "<", "threshold": 0}, "clear": {"op": ">=", "threshold": 1},
         "units": {"temp": "c"}}


@pytest.fixture
def evaluator(mqtt_settings: Settings, tmp_path: Path) -> Iterator[EvaluatorProcess]:
    proc = EvaluatorProcess(mqtt_settings.replace(alert_sweep_interval=SWEEP_OFF),
                            tmp_path / "evaluate.log")
    yield proc
    proc.stop()


# Reading times count back from one instant taken at import: a test that crosses a 5-minute
# boundary would otherwise give two readings the same time (the second a duplicate).
BASE = now_slot()


def slot(minutes_ago: int) -> datetime:
    return BASE - timedelta(minutes=minutes_ago)


def reading(publisher: Ledger, s: Settings, device: str, minutes_ago: int, tair: float) -> None:
    body = {"time": iso(slot(minutes_ago)), "tair": tair, "rh": 0.8}
    assert publisher.publish(topic(s, device), json.dumps(body).encode())


def test_a_reading_fires_and_the_clear_condition_resolves(
        conn: psycopg.Connection, site: Site, mqtt_settings: Settings,
        ingester: RunningIngester, publisher: Ledger, evaluator: EvaluatorProcess,
        database_url: str, figures: Figures) -> None:
    rule = add_rule(database_url, site.org, FROST | {"scope": {"device": site.device}})
    evaluator.start()
    sent = time.monotonic()
    reading(publisher, mqtt_settings, site.device, 15, -2.0)
    fired = wait_for(lambda: events(database_url), 15, what="firing event")
    latency = time.monotonic() - sent
    assert [(e[0], e[1], e[2], e[3], e[4]) for e in fired] == [
        (site.device, "firing", slot(15), pytest.approx(-2.0), rule)]
    # In the hysteresis band (>= 0 but < 1): no event.
    reading(publisher, mqtt_settings, site.device, 10, 0.5)
    wait_for(lambda: count(conn, "SELECT count(*) FROM calibrated") == 2, 15,
             what="second reading stored")
    time.sleep(2.0)  # time for a (wrong) event to appear
    assert len(events(database_url)) == 1
    reading(publisher, mqtt_settings, site.device, 5, 1.5)
    done = wait_for(lambda: len(events(database_url)) == 2 and events(database_url), 15,
                    what="resolved event")
    assert done[1][1:3] == ("resolved", slot(5))
    conn.rollback()
    title, unit, body = conn.execute(
        "SELECT title, unit, body FROM alert_events WHERE kind = 'firing'").fetchone()
    assert title == f"Frost: tair < 0 C at {site.device}" and unit == "C"
    assert body["rule"]["id"] == str(rule) and body["value_shown"] == -2.0
    figures.record("alerts_publish_to_event_s", round(latency, 2), section="alerts",
                   title="Publish of a reading to its firing event row (s)", target="<= 10",
                   source="tests/alerts/test_evaluate_e2e.py")
    assert latency < 10


def test_battery_and_quarantine_kinds(
        site: Site, mqtt_settings: Settings, ingester: RunningIngester, publisher: Ledger,
        evaluator: EvaluatorProcess, database_url: str) -> None:
    add_rule(database_url, site.org, {"name": "Battery", "kind": "battery",
                                      "scope": {"organisation": True},
                                      "condition": {"threshold": 20},
                                      "clear": {"op": ">=", "threshold": 30}})
    add_rule(database_url, site.org, {"name": "Bad data", "kind": "quarantine",
                                      "scope": {"location": str(site.location)},
                                      "condition": {"threshold": 3}})
    evaluator.start()
    health = {"time": iso(slot(5)), "batt_pct": 15.0, "batt_volt": 3.4}
    assert publisher.publish(topic(mqtt_settings, site.device, "health"),
                             json.dumps(health).encode())
    fired = wait_for(lambda: events(database_url), 15, what="battery event")
    assert [(e[0], e[1], e[3]) for e in fired] == [(site.device, "firing", 15.0)]
    for _ in range(3):
        assert publisher.publish(topic(mqtt_settings, site.device), b"{not json")
    wait_for(lambda: len(events(database_url)) == 2, 15, what="quarantine event")
    burst = [e for e in events(database_url) if e[3] == 3.0]
    assert len(burst) == 1 and burst[0][1] == "firing"


def expected_events(values: dict[str, list[tuple[int, float]]]) -> list[tuple[str, str, object]]:
    rule = alertrules.parse(FROST | {"scope": {"organisation": True}})
    found = []
    for device, series in values.items():
        _state, transitions = machine.run(rule, [(slot(m), v) for m, v in series])
        found += [(device, t.kind, t.at) for t in transitions]
    return sorted(found, key=lambda e: (e[0], e[2], e[1]))


@pytest.mark.chaos
def test_sigkill_mid_stream_loses_and_repeats_nothing(
        conn: psycopg.Connection, mqtt_settings: Settings, ingester: RunningIngester,
        publisher: Ledger, evaluator: EvaluatorProcess, database_url: str,
        figures: Figures) -> None:
    devices = [f"K{i}" for i in range(4)]
    site = make_site(conn, device=devices[0])
    for name in devices[1:]:
        make_site(conn, device=name)
    add_rule(database_url, site.org, FROST | {"scope": {"organisation": True}})
    rng = random.Random(24)
    plan = {d: [(m, rng.choice((-2.0, 0.5, 2.0))) for m in range(240, 0, -5)] for d in devices}
    evaluator.start()
    kills = 0
    for step in range(len(plan[devices[0]])):
        for d in devices:
            minutes, value = plan[d][step]
            reading(publisher, mqtt_settings, d, minutes, value)
        if step in (8, 20, 33):
            time.sleep(rng.uniform(0.0, 0.3))  # somewhere in a pass, or between passes
            evaluator.kill()
            kills += 1
            evaluator.start()
    want = expected_events(plan)
    assert len(want) > 20  # the plan has many transitions to lose or repeat
    # Generous waits: on a loaded machine a restarted evaluator may take seconds to start.
    wait_for(lambda: count(conn, "SELECT count(*) FROM calibrated") == 4 * 48, 90,
             what="every reading stored")
    try:
        wait_for(lambda: len(events(database_url)) >= len(want), 90, what="every event")
    finally:
        got = [(e[0], e[1], e[2]) for e in events(database_url)]
        lost = [e for e in want if e not in got]
        extra = [e for e in got if e not in want]
        print(f"lost {lost}, extra {extra}\nevaluator log:\n{evaluator.log()[-4000:]}")
    time.sleep(1.0)
    got = [(e[0], e[1], e[2]) for e in events(database_url)]
    assert got == want
    figures.record("alerts_kill_events", len(want), section="alerts",
                   title="Evaluator SIGKILL test: events expected = events written, none "
                         f"repeated ({kills} kills)", target="lost 0, repeated 0",
                   source="tests/alerts/test_evaluate_e2e.py")


def test_the_cursors_are_written_when_idle_and_at_a_clean_stop(
        conn: psycopg.Connection, site: Site, mqtt_settings: Settings,
        ingester: RunningIngester, publisher: Ledger, evaluator: EvaluatorProcess,
        database_url: str) -> None:
    """The cursors are written every few seconds rather than with every pass: an idle
    evaluator writes those of its last passes, and a stopped one leaves them where it ended
    (a restart reads nothing again)."""
    add_rule(database_url, site.org, FROST | {"scope": {"device": site.device}})
    evaluator.start()

    def cursor() -> object:
        row = conn.execute("SELECT at FROM alert_cursors WHERE source = 'calibrated'"
                           " AND device = %s", (site.device,)).fetchone()
        conn.rollback()
        return row[0] if row else None

    reading(publisher, mqtt_settings, site.device, 15, -2.0)
    wait_for(lambda: cursor() == slot(15), 60, what="the cursor written while idle")
    reading(publisher, mqtt_settings, site.device, 10, 1.5)
    wait_for(lambda: len(events(database_url)) == 2, 30, what="the resolved event")
    assert evaluator.stop() == 0
    assert cursor() == slot(10)


def test_the_evaluator_exports_the_time_of_its_last_pass(evaluator: EvaluatorProcess) -> None:
    """`sds_alerts_last_pass_timestamp_seconds` (what SdsAlertEvaluatorBehind watches) is set
    by the first pass, the sweep at start."""
    port = free_port()
    evaluator.start(alerts_metrics_port=port)

    def last_pass() -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return next((s.value for f in text_string_to_metric_families(text) for s in f.samples
                     if s.name == "sds_alerts_last_pass_timestamp_seconds"), 0.0)

    stamp = wait_for(last_pass, 30, what="a committed pass")
    assert abs(time.time() - stamp) < 60
