"""Real monitoring servers on free loopback ports, for tests: Prometheus, Alertmanager and
node_exporter (Debian's packages) with the shipped configuration (deploy/prometheus/, rendered
by deploy/lib/monitoring_conf.py as deploy/run.sh renders it), and a webhook receiver that
records what Alertmanager delivers.

    node = NodeExporter().start(textfile_dir)
    hook = WebhookReceiver().start()
    am = Alertmanager().start(conf_dir / "alertmanager" / "alertmanager.yml")
    prom = PrometheusServer().start(conf_dir / "prometheus" / "prometheus.yml")
    prom.alerts()  # GET /api/v1/alerts

`render_fast` renders the shipped files with 1 s scrape and evaluation intervals, the rules'
`for:` cut to seconds and Alertmanager's grouping waits to 1 s, so a test sees a rule fire and
be delivered in seconds; the expressions and the receiver are the shipped ones.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import re
import subprocess
import threading
import urllib.parse
import urllib.request
from abc import abstractmethod
from pathlib import Path
from types import ModuleType
from typing import Any

from testbed.process import REPO, ProcessServer, free_port, tail, wait_started


def _conf() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "sds_monitoring_conf", REPO / "deploy" / "lib" / "monitoring_conf.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render(out: Path, **layout: Any) -> list[str]:
    """deploy/lib/monitoring_conf.py's `render` (the one run.sh uses) into `out`."""
    return list(_conf().render(out, **layout))


def render_fast(out: Path, *, rule_for: str = "2s", **layout: Any) -> None:
    """`render`, then quickened for a test: intervals of 1 s, every `for:` set to `rule_for`,
    Alertmanager's group_wait and group_interval 1 s."""
    render(out, **layout)
    prom = out / "prometheus" / "prometheus.yml"
    text = prom.read_text()
    for key in ("scrape_interval", "evaluation_interval", "scrape_timeout"):
        text = re.sub(rf"^(\s*{key}:) \S+", r"\1 1s", text, flags=re.MULTILINE)
    prom.write_text(text)
    rules = out / "prometheus" / "sds.rules.yml"
    rules.write_text(re.sub(r"^(\s+for:) \S+", rf"\1 {rule_for}", rules.read_text(),
                            flags=re.MULTILINE))
    am = out / "alertmanager" / "alertmanager.yml"
    text = am.read_text()
    for key in ("group_wait", "group_interval"):
        text = re.sub(rf"^(\s*{key}:) \S+", r"\1 1s", text, flags=re.MULTILINE)
    am.write_text(text)


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback test URL
        return json.loads(resp.read())


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:  # noqa: S310 - loopback test URL
            return bool(resp.status == 200)
    except OSError:
        return False


class _Daemon(ProcessServer):
    """One foreground process on one port, ready when GET `ready_path` answers 200."""

    ready_path = "/"
    prefix = "sds-mon-"

    def __init__(self) -> None:
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @abstractmethod
    def command(self) -> list[str]:
        """The command line (uses self.port and self.base_dir)."""

    def _start(self, base_dir: Path | None, port: int | None) -> None:
        self._prepare_dir(base_dir, self.prefix)
        self._port = port or free_port()
        self.log_path = self.base_dir / "stderr.log"
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=log)
        wait_started(self._proc, lambda: _ready(f"{self.url}{self.ready_path}"),
                     what=self.command()[0], log=lambda: tail(self.log_path), every=0.1)

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT"""
        return f"http://127.0.0.1:{self.port}"


class PrometheusServer(_Daemon):
    """Prometheus on a free port with the given configuration file; its TSDB in base_dir."""

    ready_path = "/-/ready"
    prefix = "sds-prometheus-"

    def start(self, config: Path, base_dir: Path | None = None, *,
              port: int | None = None) -> PrometheusServer:
        """Start and wait until ready; returns self."""
        self.config = config
        self._start(base_dir, port)
        return self

    def command(self) -> list[str]:
        """prometheus with its own data directory, on 127.0.0.1 only."""
        return ["prometheus", f"--config.file={self.config}",
                f"--storage.tsdb.path={self.base_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}"]

    def api(self, path: str) -> Any:
        """GET /api/v1/<path>: its `data`."""
        body = _get_json(f"{self.url}/api/v1/{path}")
        assert body["status"] == "success", body
        return body["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts Prometheus holds (pending and firing)."""
        return list(self.api("alerts")["alerts"])

    def firing(self, name: str) -> list[dict[str, Any]]:
        """The firing alerts named `name`."""
        return [a for a in self.alerts()
                if a["labels"]["alertname"] == name and a["state"] == "firing"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        return list(self.api(f"query?query={urllib.parse.quote(expr)}")["result"])

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets with their health."""
        return list(self.api("targets")["activeTargets"])


class Alertmanager(_Daemon):
    """Alertmanager on a free port, not clustered, with the given configuration file."""

    ready_path = "/-/ready"
    prefix = "sds-alertmanager-"

    def start(self, config: Path, base_dir: Path | None = None, *,
              port: int | None = None) -> Alertmanager:
        """Start and wait until ready; returns self."""
        self.config = config
        self._start(base_dir, port)
        return self

    def command(self) -> list[str]:
        """prometheus-alertmanager with its own storage, gossip off, on 127.0.0.1 only."""
        return ["prometheus-alertmanager", f"--config.file={self.config}",
                f"--storage.path={self.base_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="]


class NodeExporter(_Daemon):
    """node_exporter with only the filesystem and textfile collectors (as deploy/run.sh)."""

    ready_path = "/metrics"
    prefix = "sds-node-exporter-"

    def start(self, textfile_dir: Path, base_dir: Path | None = None, *,
              port: int | None = None) -> NodeExporter:
        """Start and wait until it answers; returns self."""
        self.textfile_dir = textfile_dir
        self._start(base_dir, port)
        return self

    def command(self) -> list[str]:
        """The collector set deploy/run.sh uses."""
        return ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{self.port}",
                "--collector.disable-defaults", "--collector.filesystem",
                "--collector.textfile", f"--collector.textfile.directory={self.textfile_dir}"]


class WebhookReceiver:
    """An HTTP server in a thread that keeps every JSON body POSTed to it (Alertmanager's
    webhook notifications)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        received, lock = self.received, self._lock

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    received.append({"path": self.path, "body": json.loads(body)})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> WebhookReceiver:
        """Serve in the background; returns self."""
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        """Where to post: http://127.0.0.1:PORT/alerts"""
        return f"http://127.0.0.1:{self._server.server_address[1]}/alerts"

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every notification received so far, in order."""
        with self._lock:
            return [alert for n in self.received for alert in n["body"]["alerts"]]

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


__all__ = ["Alertmanager", "NodeExporter", "PrometheusServer", "WebhookReceiver", "render",
           "render_fast"]
