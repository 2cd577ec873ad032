"""The API as deployed, for tests and benchmarks that talk HTTP over a real socket (the Python
client, the browser tests, the edge): `serve.wsgi:app` under gunicorn with
deploy/gunicorn.conf.py on a free loopback port (`GunicornServer`: the one way to run the API as
deployed), against a test database. Stopped with SIGTERM (then SIGKILL)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.process import REPO, ProcessServer, free_port, http_ok, tail, wait_started

GUNICORN_CONF = REPO / "deploy" / "gunicorn.conf.py"


class GunicornServer(ProcessServer):
    """The API as deployed (gunicorn -c deploy/gunicorn.conf.py serve.wsgi:app) on a free port.

    `env` adds SDS_* settings (SDS_DATABASE_URL at least); the access log goes to base_dir.
    Its master serves the workers' Prometheus metrics on `metrics_port` (a free port unless
    SDS_API_METRICS_PORT is given), from files in base_dir/metrics. stop(): SIGTERM, graceful
    (in-flight requests finish); kill(): the master and its workers.
    """

    prefork = True

    def __init__(self) -> None:
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str], base_dir: Path | None = None, *,
              workers: int | None = 2, port: int | None = None) -> GunicornServer:
        """Start and wait until /api/v2/health answers 200; returns self. `workers` None:
        as many as deploy/gunicorn.conf.py starts by default (the shipped count)."""
        base = self._prepare_dir(base_dir, "sds-gunicorn-")
        self._port = port or free_port()
        self.stderr_path = base / "stderr.log"
        self.access_log = base / "access.log"
        self._env = {**os.environ, "SDS_HTTP_BIND": f"127.0.0.1:{self._port}",
                     "SDS_HTTP_WORKERS": str(workers), "SDS_LOG_DIR": str(base),
                     "SDS_DB_POOL_MIN": "1", "SDS_DB_POOL_MAX": "2",
                     "SDS_API_METRICS_PORT": str(free_port()),
                     "PROMETHEUS_MULTIPROC_DIR": str(base / "metrics"), **env}
        if workers is None:
            self._env.pop("SDS_HTTP_WORKERS")
        self.metrics_port = int(self._env["SDS_API_METRICS_PORT"])
        self._launch()
        return self

    def _launch(self) -> None:
        gunicorn = Path(sys.executable).with_name("gunicorn")
        with open(self.stderr_path, "ab") as err:
            self._proc = subprocess.Popen(
                [str(gunicorn), "-c", str(GUNICORN_CONF), "serve.wsgi:app"],
                cwd=REPO, env=self._env, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        wait_started(self._proc, lambda: http_ok(self.port, "/api/v2/health"),
                     what="gunicorn", log=lambda: tail(self.stderr_path), every=0.1)

    def restart(self) -> None:
        """Start again (after kill or stop) with the same port and settings."""
        self.stop()
        self._launch()


@contextmanager
def gunicorn_api(database_url: str, log_dir: Path, *, workers: int = 2,
                 **env: str) -> Iterator[str]:
    """Run the API on `database_url`; yields its base URL (http://127.0.0.1:PORT). Extra
    keyword arguments are SDS_* settings (e.g. SDS_API_RATE_LIMIT="3")."""
    api = GunicornServer().start(
        {"SDS_DATABASE_URL": database_url, "SDS_CURSOR_SECRET": "apiserver-test", **env},
        log_dir, workers=workers)
    try:
        yield f"http://127.0.0.1:{api.port}"
    finally:
        api.stop()


def edge_api_env(database_url: str) -> dict[str, str]:
    """Settings of a test API instance behind the edge (testbed.nginx.NginxEdge): it
    trusts the edge's X-Forwarded-For, and no request rate limit or in-flight cap gets in a load
    test's way (tests/serve/test_fairshare.py runs with the shipped ones)."""
    return {"SDS_DATABASE_URL": database_url, "SDS_CURSOR_SECRET": "edge-test",
            "SDS_TRUSTED_PROXY_HOPS": "1", "SDS_API_RATE_LIMIT": "0",
            "SDS_API_USER_RATE_LIMIT": "0", "SDS_API_ORG_RATE_LIMIT": "0",
            "SDS_API_USER_CONCURRENCY": "0", "SDS_API_ORG_CONCURRENCY": "0"}


__all__ = ["GunicornServer", "edge_api_env", "gunicorn_api"]
