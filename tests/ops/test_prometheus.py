"""The shipped monitoring against real running parts: Prometheus (rendered configuration,
shipped rules) scrapes a real ingester (`python -m ingest`), a real API (gunicorn, two
workers) and node_exporter; stopping the broker fires SdsBrokerDown in Prometheus, and
Alertmanager delivers it to a webhook receiver, then its resolution once the broker is back.

The rules' `for:` is cut to 2 s and the intervals to 1 s (testbed.monitoring.render_fast) so
the test takes seconds; the expressions, labels and receiver are the shipped ones, and the
`for:` durations themselves are covered by tests/ops/rules_test.yml."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.config import Settings
from testbed.apiserver import GunicornServer
from testbed.monitoring import (
    Alertmanager,
    NodeExporter,
    PrometheusServer,
    WebhookReceiver,
    render_fast,
)
from testbed.mosquitto import MosquittoBroker
from testbed.process import free_port
from tests.support.figures import Figures
from tests.support.ingesting import IngesterProcess, wait_for

pytestmark = pytest.mark.chaos  # several servers and a broker stop: tens of seconds


class Stack:
    """The running parts and the monitoring in front of them."""

    broker: MosquittoBroker
    ingester: IngesterProcess
    prometheus: PrometheusServer
    hook: WebhookReceiver
    api_url: str


@pytest.fixture
def stack(settings: Settings, tmp_path: Path) -> Iterator[Stack]:
    """Broker, ingester, API, node_exporter, Alertmanager with a webhook receiver, and
    Prometheus with the configuration run.sh would render for them."""
    s = Stack()
    parts: list[Any] = []
    s.hook = WebhookReceiver().start()
    try:
        s.broker = MosquittoBroker().start(tmp_path / "mqtt")
        parts.append(s.broker)
        ingest_metrics = free_port()
        s.ingester = IngesterProcess(
            settings.replace(mqtt_host="127.0.0.1", mqtt_port=s.broker.port,
                             mqtt_username=None, mqtt_password=None,
                             mqtt_client_id="prom-test-ingest", metrics_port=ingest_metrics,
                             ingest_flush_interval=0.1),
            tmp_path / "ingest.log").start()
        s.ingester.wait_subscribed(1)
        api = GunicornServer().start({"SDS_DATABASE_URL": settings.database_url,
                                      "SDS_CURSOR_SECRET": "prometheus-test"},
                                     tmp_path / "api")
        parts.append(api)
        textfiles = tmp_path / "supervise"
        textfiles.mkdir()
        node = NodeExporter().start(textfiles, tmp_path / "node")
        parts.append(node)
        am_port, prom_port = free_port(), free_port()
        conf = tmp_path / "conf"
        render_fast(conf, webhook=s.hook.url, prometheus=f"127.0.0.1:{prom_port}",
                    alertmanager=f"127.0.0.1:{am_port}", node=f"127.0.0.1:{node.port}",
                    ingest=[("ingest", f"127.0.0.1:{ingest_metrics}")],
                    api=[("serve-1", f"127.0.0.1:{api.metrics_port}")])
        parts.append(Alertmanager().start(conf / "alertmanager" / "alertmanager.yml",
                                          tmp_path / "am", port=am_port))
        s.prometheus = PrometheusServer().start(conf / "prometheus" / "prometheus.yml",
                                                tmp_path / "prom", port=prom_port)
        parts.append(s.prometheus)
        yield s
    finally:
        if getattr(s, "ingester", None) is not None and s.ingester.alive():
            s.ingester.terminate()
        for part in reversed(parts):
            part.stop()
        s.hook.stop()


def _up(prom: PrometheusServer) -> dict[str, str]:
    """{job: health} of the scraped targets (the Prometheus self-target aside)."""
    return {t["labels"]["job"]: t["health"] for t in prom.targets()
            if t["labels"]["job"] in ("sds-ingest", "sds-api", "node")}


def test_broker_stop_fires_and_delivers_broker_down(stack: Stack, figures: Figures) -> None:
    """Everything scraped and quiet; the broker stops: SdsBrokerDown fires in Prometheus and
    reaches the webhook; the broker returns: the alert resolves and that is delivered too."""
    prom = stack.prometheus
    wait_for(lambda: _up(prom) == {"sds-ingest": "up", "sds-api": "up", "node": "up"}, 30,
             0.5, what="all targets up")
    # What the rules read is there: the ingester connected, the API's probe, node filesystems.
    wait_for(lambda: prom.query("sds_ingest_broker_connected == 1"), 20, 0.5,
             what="the ingester's broker gauge")
    assert prom.query("sds_api_database_up")[0]["value"][1] == "1"
    assert prom.query("node_filesystem_avail_bytes"), "no filesystem metrics from node_exporter"
    time.sleep(3)  # longer than the shortened `for:`: nothing fires while all is well
    assert prom.firing("SdsBrokerDown") == []
    # The host's own alerts (node_exporter's filesystems) judge the machine the test runs on,
    # not the stack: a shared machine's disk below 40 % free and growing fires SdsDiskFilling.
    host = {"SdsDiskFull", "SdsDiskFilling"}
    assert [a["labels"]["alertname"] for a in prom.alerts()
            if a["state"] == "firing" and a["labels"]["alertname"] not in host] == []

    stopped = time.monotonic()
    stack.broker.stop()
    firing = wait_for(lambda: prom.firing("SdsBrokerDown"), 30, 0.2,
                      what="SdsBrokerDown firing in /api/v1/alerts")
    fired_s = time.monotonic() - stopped
    assert firing[0]["labels"]["severity"] == "critical"
    delivered = wait_for(
        lambda: [a for a in stack.hook.alerts()
                 if a["labels"]["alertname"] == "SdsBrokerDown" and a["status"] == "firing"],
        30, 0.2, what="SdsBrokerDown delivered to the webhook")
    delivered_s = time.monotonic() - stopped
    assert delivered[0]["annotations"]["summary"] == "No ingester is connected to the MQTT broker"

    stack.broker.restart()
    stack.ingester.wait_subscribed(2, timeout=60)
    wait_for(lambda: [a for a in stack.hook.alerts()
                      if a["labels"]["alertname"] == "SdsBrokerDown"
                      and a["status"] == "resolved"], 60, 0.2,
             what="the resolution delivered to the webhook")
    assert prom.firing("SdsBrokerDown") == []
    figures.record("delivery.monitoring.broker_down_alert_s",
                   {"firing in Prometheus": round(fired_s, 1),
                    "delivered to the webhook": round(delivered_s, 1)},
                   section="delivery",
                   title="Broker stopped: seconds until SdsBrokerDown fires and reaches the "
                         "Alertmanager webhook (1 s scrape and evaluation, `for` cut to 2 s; "
                         "shipped: 15 s, for 1m, group_wait 30 s, so about 1.5-2 min)",
                   target="fires, is delivered, resolves",
                   source="tests/ops/test_prometheus.py")
