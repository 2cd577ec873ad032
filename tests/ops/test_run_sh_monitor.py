"""`deploy/run.sh monitor` against the whole stack, in a scratch tree on free ports: Prometheus,
Alertmanager and node_exporter start under supervision with the rendered configuration,
every process's endpoint is scraped, and a shipped rule fires as shipped (SdsProcessRestartLoop
has no `for:`) and reaches the webhook; `run.sh stop` stops them all."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.monitoring import WebhookReceiver
from testbed.process import free_port
from tests.support.ingesting import wait_for
from tests.support.restoring import Tree, processes_naming

pytestmark = [pytest.mark.chaos,
              pytest.mark.skipif(os.geteuid() != 0, reason="run.sh runs as root")]

def monitored(root: Path, hook: WebhookReceiver) -> Tree:
    """A scratch tree (tests/support/restoring.py `Tree`) whose processes all expose metrics
    on free ports, with Prometheus, Alertmanager and node_exporter on free ports and
    Alertmanager posting to `hook`."""
    t = Tree(root)
    t.env.update({
        "SDS_API_INSTANCES": "1", "SDS_METRICS_PORT": str(free_port()),
        "SDS_PROMETHEUS_PORT": str(free_port()), "SDS_ALERTS_METRICS_PORT": str(free_port()),
        "SDS_DELIVERY_METRICS_PORT": str(free_port()),
        "SDS_ALERTMANAGER_PORT": str(free_port()),
        "SDS_NODE_EXPORTER_PORT": str(free_port()), "SDS_ALERT_WEBHOOK_URL": hook.url,
    })
    return t


def run(t: Tree, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """deploy/run.sh ARGS in the tree, output captured; by its absolute path, as before, so
    every process it starts names the tree (`leftovers`)."""
    return t.sh(shlex.join(["bash", str(t.root / "deploy" / "run.sh"), *args]), timeout=timeout)


def prometheus(t: Tree, path: str) -> object:
    """GET the tree's Prometheus /api/v1/<path>: its data."""
    url = f"http://127.0.0.1:{t.env['SDS_PROMETHEUS_PORT']}/api/v1/{path}"
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())["data"]


def child(t: Tree, name: str) -> int:
    """The pid of NAME's child, from its supervisor's status file."""
    return int((t.state / "supervise" / f"{name}.status").read_text().split()[1])


def leftovers(t: Tree) -> list[str]:
    """Live processes whose command line names this tree."""
    return processes_naming(t.root)


@pytest.fixture
def tree() -> Iterator[tuple[Tree, WebhookReceiver]]:
    """A scratch tree and the webhook its Alertmanager posts to; stopped afterwards. The tree
    is under a short path: PostgreSQL's unix socket (.state/pg/run/.s.PGSQL.<port>) holds at
    most 107 bytes, and under an xdist worker's tmp_path it came to 106-112."""
    hook = WebhookReceiver().start()
    base = Path(tempfile.mkdtemp(prefix="sds-mon-"))
    (base / "tree").mkdir()
    t = monitored(base / "tree", hook)
    try:
        yield t, hook
    finally:
        run(t, "stop", timeout=300)
        hook.stop()
        shutil.rmtree(base, ignore_errors=True)


def _health(t: Tree) -> dict[str, str]:
    """Each target's health; none while Prometheus does not answer yet (run.sh returns once
    its processes stayed up, and on a loaded machine Prometheus opens its port after that:
    connection refused at the first look, seen once in a full chaos run)."""
    try:
        data = prometheus(t, "targets")
    except (urllib.error.URLError, ConnectionError):
        return {}
    assert isinstance(data, dict)
    return {f"{x['labels']['job']}/{x['labels'].get('process', '')}": x["health"]
            for x in data["activeTargets"]}


def test_run_sh_monitor_scrapes_the_stack_and_a_shipped_rule_fires(
        tree: tuple[Tree, WebhookReceiver]) -> None:
    """run.sh monitor: all targets up; four quick deaths of one process fire
    SdsProcessRestartLoop (the shipped rule and intervals) and Alertmanager delivers it."""
    t, hook = tree
    started = run(t, "monitor")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "Prometheus http://127.0.0.1:" in started.stdout
    expected = {"sds-ingest/ingest", "sds-aggregate/aggregate", "sds-api/serve-1",
                "node/node-exporter", "prometheus/prometheus", "alertmanager/alertmanager"}
    # The first scrape of each target comes within one 15 s interval.
    wait_for(lambda: expected <= {k for k, v in _health(t).items() if v == "up"}, 90, 1,
             what=f"targets up (last: {_health(t)})")
    status = run(t, "status")
    for name in ("prometheus", "alertmanager", "node-exporter"):
        assert f"{name}: running" in status.stdout, status.stdout

    for _ in range(4):
        before = child(t, "logrotate")
        os.kill(before, signal.SIGKILL)
        wait_for(lambda b=before: child(t, "logrotate") != b  # type: ignore[misc]
                 and (t.state / "supervise" / "logrotate.status").read_text().startswith(
                     "running"), 30, 0.2, what="logrotate restarted")
    fired = time.monotonic()

    def firing() -> list[object]:
        data = prometheus(t, "alerts")
        assert isinstance(data, dict)
        return [a for a in data["alerts"] if a["labels"]["alertname"] == "SdsProcessRestartLoop"
                and a["labels"].get("process") == "logrotate" and a["state"] == "firing"]

    wait_for(firing, 60, 1, what="SdsProcessRestartLoop firing")
    wait_for(lambda: [a for a in hook.alerts()
                      if a["labels"]["alertname"] == "SdsProcessRestartLoop"], 90, 1,
             what="SdsProcessRestartLoop delivered to the webhook")
    assert time.monotonic() - fired < 150

    stopped = run(t, "stop", timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "prometheus: stopped" in stopped.stdout
    wait_for(lambda: not leftovers(t), 30, 0.5, what="every process of the tree gone")
