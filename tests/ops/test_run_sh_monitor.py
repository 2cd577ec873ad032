"""`deploy/run.sh monitor` against the whole stack, in a scratch tree on free ports: Prometheus,
Alertmanager and node_exporter start under supervision with the rendered configuration,
every process's endpoint is scraped, and a shipped rule fires as shipped (SdsProcessRestartLoop
has no `for:`) and reaches the webhook; `run.sh stop` stops them all."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.monitoring import WebhookReceiver
from testbed.process import free_port
from tests.support.ingesting import wait_for

pytestmark = [pytest.mark.chaos,
              pytest.mark.skipif(os.geteuid() != 0, reason="run.sh runs as root")]

REPO = Path(__file__).resolve().parents[2]


class Tree:
    """deploy/run.sh in a scratch tree: deploy/ copied (so .state is scratch), the rest linked."""

    def __init__(self, root: Path, hook: WebhookReceiver) -> None:
        self.root = root
        for entry in REPO.iterdir():
            if entry.name not in {"deploy", ".state", ".git"}:
                (root / entry.name).symlink_to(entry)
        shutil.copytree(REPO / "deploy", root / "deploy")
        self.state = root / ".state"
        http = free_port()
        self.prom_port = free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
        self.env.update({
            "SDS_PG_PORT": str(free_port()), "SDS_MQTT_PORT": str(free_port()),
            "SDS_EDGE_BIND": f"127.0.0.1:{free_port()}", "SDS_HTTP_BIND": f"127.0.0.1:{http}",
            "SDS_API_INSTANCES": "1", "SDS_INGEST_SHARDS": "1",
            "SDS_METRICS_PORT": str(free_port()), "SDS_AGGREGATE_METRICS_PORT": str(free_port()),
            "SDS_API_METRICS_PORT": str(free_port()), "SDS_PROMETHEUS_PORT": str(self.prom_port),
            "SDS_ALERTS_METRICS_PORT": str(free_port()),
            "SDS_DELIVERY_METRICS_PORT": str(free_port()),
            "SDS_ALERTMANAGER_PORT": str(free_port()),
            "SDS_NODE_EXPORTER_PORT": str(free_port()), "SDS_ALERT_WEBHOOK_URL": hook.url,
        })

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """deploy/run.sh ARGS, output captured."""
        return subprocess.run(["bash", str(self.root / "deploy" / "run.sh"), *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=self.root)

    def prometheus(self, path: str) -> object:
        """GET Prometheus' /api/v1/<path>: its data."""
        import json

        url = f"http://127.0.0.1:{self.prom_port}/api/v1/{path}"
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
            return json.loads(resp.read())["data"]

    def child(self, name: str) -> int:
        """The pid of NAME's child, from its supervisor's status file."""
        return int((self.state / "supervise" / f"{name}.status").read_text().split()[1])

    def leftovers(self) -> list[str]:
        """Live processes whose command line names this tree."""
        found = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                if str(self.root) in cmd:
                    found.append(f"{proc.name}: {cmd}")
        return found


@pytest.fixture
def tree() -> Iterator[tuple[Tree, WebhookReceiver]]:
    """A scratch tree and the webhook its Alertmanager posts to; stopped afterwards. The tree
    is under a short path: PostgreSQL's unix socket (.state/pg/run/.s.PGSQL.<port>) holds at
    most 107 bytes, and under an xdist worker's tmp_path it came to 106-112."""
    hook = WebhookReceiver().start()
    base = Path(tempfile.mkdtemp(prefix="sds-mon-"))
    (base / "tree").mkdir()
    t = Tree(base / "tree", hook)
    try:
        yield t, hook
    finally:
        t.run("stop", timeout=300)
        hook.stop()
        shutil.rmtree(base, ignore_errors=True)


def _health(t: Tree) -> dict[str, str]:
    data = t.prometheus("targets")
    assert isinstance(data, dict)
    return {f"{x['labels']['job']}/{x['labels'].get('process', '')}": x["health"]
            for x in data["activeTargets"]}


def test_run_sh_monitor_scrapes_the_stack_and_a_shipped_rule_fires(
        tree: tuple[Tree, WebhookReceiver]) -> None:
    """run.sh monitor: all targets up; four quick deaths of one process fire
    SdsProcessRestartLoop (the shipped rule and intervals) and Alertmanager delivers it."""
    t, hook = tree
    started = t.run("monitor")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "Prometheus http://127.0.0.1:" in started.stdout
    expected = {"sds-ingest/ingest", "sds-aggregate/aggregate", "sds-api/serve-1",
                "node/node-exporter", "prometheus/prometheus", "alertmanager/alertmanager"}
    # The first scrape of each target comes within one 15 s interval.
    wait_for(lambda: expected <= {k for k, v in _health(t).items() if v == "up"}, 90, 1,
             what=f"targets up (last: {_health(t)})")
    status = t.run("status")
    for name in ("prometheus", "alertmanager", "node-exporter"):
        assert f"{name}: running" in status.stdout, status.stdout

    for _ in range(4):
        before = t.child("logrotate")
        os.kill(before, signal.SIGKILL)
        wait_for(lambda b=before: t.child("logrotate") != b  # type: ignore[misc]
                 and (t.state / "supervise" / "logrotate.status").read_text().startswith(
                     "running"), 30, 0.2, what="logrotate restarted")
    fired = time.monotonic()

    def firing() -> list[object]:
        data = t.prometheus("alerts")
        assert isinstance(data, dict)
        return [a for a in data["alerts"] if a["labels"]["alertname"] == "SdsProcessRestartLoop"
                and a["labels"].get("process") == "logrotate" and a["state"] == "firing"]

    wait_for(firing, 60, 1, what="SdsProcessRestartLoop firing")
    wait_for(lambda: [a for a in hook.alerts()
                      if a["labels"]["alertname"] == "SdsProcessRestartLoop"], 90, 1,
             what="SdsProcessRestartLoop delivered to the webhook")
    assert time.monotonic() - fired < 150

    stopped = t.run("stop", timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "prometheus: stopped" in stopped.stdout
    wait_for(lambda: not t.leftovers(), 30, 0.5, what="every process of the tree gone")
