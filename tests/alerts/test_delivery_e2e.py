"""End to end through every real process: an MQTT reading makes a rule fire and a signed
webhook arrives at a receiver process (verified with the specification's Webhook.verify); the
reading that meets the clear condition sends the all-clear. Ingester (in-process), evaluator
and deliverer (child processes), webhook receiver (its own process), all on loopback."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import psycopg
from standardwebhooks.webhooks import Webhook

from shared.config import Settings
from testbed.receivers import webhook_receiver
from tests.support.apps import close_app, make_app
from tests.support.delivery import SEAL_KEY, DelivererProcess, deliverer_env, make_org
from tests.support.ingesting import (
    Ledger,
    RunningIngester,
    iso,
    make_site,
    now_slot,
    settings_env,
    topic,
    wait_for,
)


def test_reading_fires_a_signed_webhook_and_the_clear_sends_the_all_clear(
        conn: psycopg.Connection, database_url: str, mqtt_settings: Settings,
        tmp_path: Path) -> None:
    org = make_org(conn, "farm-a")
    site = make_site(conn, org_name="farm-a")
    hook = webhook_receiver(tmp_path)
    app = make_app(database_url, apikey_seal_keys=SEAL_KEY, webhook_allow_private=True)
    client = app.test_client()
    procs: list[DelivererProcess] = []
    ingester = publisher = None
    try:
        secret = client.post("/api/v2/channels", headers=org.auth, json={
            "name": "ops", "kind": "webhook", "url": hook.url}).get_json()["secret"]
        r = client.post("/api/v2/alerts", headers=org.auth, json={
            "name": "Frost", "kind": "threshold", "table": "calibrated", "column": "tair",
            "scope": {"device": site.device}, "condition": {"op": "<", "threshold": 0},
            "clear": {"op": ">=", "threshold": 1}, "for": 0})
        assert r.status_code in (200, 201), r.get_json()
        rule_id = r.get_json()["id"]
        ingester = RunningIngester(mqtt_settings).start()
        # Metrics off: the default port is one per host (another test may hold it).
        procs.append(DelivererProcess(settings_env(mqtt_settings.replace(alerts_metrics_port=0)),
                                      tmp_path / "evaluator.log", "alerts.evaluator").start())
        procs.append(DelivererProcess(deliverer_env(database_url),
                                      tmp_path / "deliverer.log").start())
        wait_for(lambda: "lock taken" in procs[0].log(), 30, what="the evaluator's lock")
        publisher = Ledger(mqtt_settings.mqtt_host, mqtt_settings.mqtt_port)
        t = now_slot(10)
        for at, tair in ((t, -0.8), (t + timedelta(minutes=5), 0.5), (t + timedelta(minutes=10),
                                                                       1.5)):
            assert publisher.publish(topic(mqtt_settings, site.device),
                                     json.dumps({"time": iso(at), "tair": tair}).encode())
            if tair == -0.8:
                got = wait_for(hook.received, 30, what="the firing webhook")
                fired = Webhook(secret).verify(got[0]["body"], got[0]["headers"])
                assert fired["type"] == "alert.firing"
                assert fired["data"]["device"] == site.device
                assert fired["data"]["value"] == -0.8 and fired["data"]["at"] == iso(at)
                assert fired["data"]["rule_id"] == rule_id
                assert got[0]["headers"]["webhook-id"] == fired["data"]["id"]
        # 0.5 lies in the hysteresis band (neither < 0 nor >= 1): no event; 1.5 clears.
        got = wait_for(lambda: [x for x in hook.received()
                                if json.loads(x["body"])["type"] == "alert.resolved"], 30,
                       what="the all-clear webhook")
        cleared = Webhook(secret).verify(got[0]["body"], got[0]["headers"])
        assert cleared["data"]["value"] == 1.5 and cleared["data"]["rule_id"] == rule_id
        assert len(hook.received()) == 2
    finally:
        for p in procs:
            p.stop()
        if publisher is not None:
            publisher.close()
        if ingester is not None:
            ingester.stop()
        hook.stop()
        close_app(app)
