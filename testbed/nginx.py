"""The shipped edge (deploy/nginx/nginx.conf, rendered by deploy/lib/edge_conf.py exactly as
deploy/run.sh renders it) on a free loopback port in front of given API upstreams.

    edge = NginxEdge().start([f"127.0.0.1:{api.port}"])
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
from pathlib import Path
from types import ModuleType

from testbed.process import (
    REPO,
    ProcessServer,
    ensure_traversable,
    free_port,
    port_open,
    tail,
    wait_started,
)

SHIPPED_NGINX_CONF = REPO / "deploy" / "nginx" / "nginx.conf"


def _edge_conf() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sds_edge_conf",
                                                  REPO / "deploy" / "lib" / "edge_conf.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render_nginx_conf(directory: Path, listen: str, upstreams: list[str]) -> str:
    """deploy/nginx/nginx.conf rendered exactly as deploy/run.sh renders it
    (deploy/lib/edge_conf.py)."""
    return str(_edge_conf().render(str(directory), listen, upstreams,
                                   SHIPPED_NGINX_CONF.read_text()))


class NginxEdge(ProcessServer):
    """The shipped edge on a free port in front of given upstreams, in the foreground with its
    own directory for config, pid, logs and temp files. stop(): SIGQUIT, nginx's graceful
    shutdown (stops accepting, finishes in-flight requests); kill(): master and workers."""

    stop_signal = signal.SIGQUIT
    prefork = True

    def __init__(self) -> None:
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, upstreams: list[str], base_dir: Path | None = None, *,
              port: int | None = None) -> NginxEdge:
        """Render the config for `upstreams` ("127.0.0.1:port"), start, wait for the port."""
        base = self._prepare_dir(base_dir, "sds-nginx-")
        self._port = port or free_port()
        (base / "tmp").mkdir(exist_ok=True)
        self.conf_path = base / "nginx.conf"
        self.access_log = base / "access.log"
        self.error_log = base / "error.log"
        self.conf_path.write_text(
            render_nginx_conf(base, f"127.0.0.1:{self._port}", upstreams))
        # The workers run as www-data and write request bodies and big answers under tmp/.
        ensure_traversable(base, "www-data")
        self._launch()
        return self

    def _launch(self) -> None:
        with open(self.error_log, "ab") as err:
            self._proc = subprocess.Popen(
                ["nginx", "-c", str(self.conf_path), "-e", str(self.error_log)],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        wait_started(self._proc, lambda: port_open(self.port), what="nginx",
                     log=lambda: tail(self.error_log))
