"""gunicorn's hooks: its own answers and access log lines made safe, and the master's side of the
API's metrics (loaded by deploy/gunicorn.conf.py).

- Errors gunicorn answers itself, before the app sees a request (a malformed request line or
  header, a request line over `limit_request_line` (414), too many or too long headers (431)),
  come back in the API's JSON error body (serve/errors.py) instead of gunicorn's HTML page, also
  when they pass through the edge (nginx forwards answers from gunicorn unchanged).
- `AccessLogger` writes every value of an access-log line with control characters, `"` and `\\`
  escaped as `\\xHH` (the escaping nginx uses for its log): a CR, LF or NUL decoded from the URL
  cannot start a forged line or cut one short.
- Prometheus in gunicorn's multiprocess mode (serve/metrics.py): the master empties
  PROMETHEUS_MULTIPROC_DIR at start (`on_starting`), serves the sum of its workers' files on
  SDS_METRICS_BIND:SDS_API_METRICS_PORT from a thread (`when_ready`; a scrape never waits for a
  busy worker, and is never reachable through the edge), with `sds_api_database_up` probed at
  each scrape, and drops a dead worker's gauges (`child_exit`).
- A worker that ends normally skips the interpreter's teardown (`worker_exit`): a stop no longer
  waits seconds for every worker to free its heap.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import orjson
from gunicorn import util
from gunicorn.glogging import Logger
from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from people.links import ACCEPT_PATH
from shared import metrics
from shared.config import Settings
from shared.db import connect

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PROBE_TIMEOUT = 2  # seconds a scrape's database probe may take to connect
# deploy/gunicorn.conf.py's temporary directory when PROMETHEUS_MULTIPROC_DIR is not given;
# it must exist before prometheus_client is imported, so the config makes it itself.
TMP_PREFIX = "sds-api-metrics-"

# Bytes below 32, DEL, and the two characters that delimit fields in the log line.
_UNSAFE = re.compile(r'[\x00-\x1f\x7f"\\]')


def escape_log_value(value: str) -> str:
    """`value` with control characters, `"` and `\\` written as `\\xHH`."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02X}", value)


# A one-time link's secret is in its path (people/links.py): whoever reads the log must not be
# able to accept an invitation or reset a password before its addressee.
_LINK_SECRET = re.compile(re.escape(ACCEPT_PATH) + r"[^/?#\s\"]+")


def redact_link_secrets(value: str) -> str:
    """`value` with the secret of every accept-page path replaced by `<redacted>`."""
    return _LINK_SECRET.sub(ACCEPT_PATH + "<redacted>", value)


class AccessLogger(Logger):
    """gunicorn's logger whose access-log values are escaped (`escape_log_value`) and carry no
    one-time link's secret (`redact_link_secrets`)."""

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any
              ) -> dict[str, Any]:
        """gunicorn's atoms, every text value redacted and escaped."""
        atoms = super().atoms(resp, req, environ, request_time)
        return {k: escape_log_value(redact_link_secrets(v)) if isinstance(v, str) else v
                for k, v in atoms.items()}


def error_body(status: int, message: str) -> bytes:
    """The JSON error body {code, status, message} of serve/errors.py for gunicorn's errors."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return orjson.dumps({"code": status, "status": phrase, "message": message})


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """Drop-in for gunicorn.util.write_error: the same answer with a JSON body.

    `mesg` is gunicorn's description of what was wrong; it may quote the client's bytes, which
    JSON encoding keeps inert (and the answer says nosniff).
    """
    body = error_body(status_int, mesg or reason)
    # The reason phrase is gunicorn's own constant text; the status line is latin-1 as before.
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
            "Content-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1", "replace")
    util.write_nonblock(sock, head + body)


def install() -> None:
    """Make gunicorn answer its own errors with `write_json_error` (workers call
    util.write_error through the module, so replacing the attribute is enough)."""
    util.write_error = write_json_error


# ---- Prometheus, multiprocess ------------------------------------------------------------------
_server: Any = None  # the master's metrics HTTP server (its socket is closed in each worker)


def multiproc_dir() -> Path:
    """The directory the workers write their metric files to (set by deploy/gunicorn.conf.py)."""
    return Path(os.environ[MULTIPROC_ENV])


def empty_dir(path: Path) -> None:
    """Remove the metric files of an earlier run: a clean directory at every master start
    (counters of dead workers would otherwise be summed in forever)."""
    path.mkdir(parents=True, exist_ok=True)
    for entry in path.glob("*.db"):
        entry.unlink()


class WorkerFilesCollector(multiprocess.MultiProcessCollector):
    """The workers' summed metrics, leaving out a metric file a worker is still creating: it is
    empty for a moment before the worker sizes it, and prometheus_client's collector then
    raised struct.error, so a scrape during a worker's start answered 500 (seen in a test run).
    An empty file holds no samples yet, so leaving it out loses nothing."""

    def __init__(self, registry: CollectorRegistry, path: str) -> None:
        super().__init__(registry, path=path)
        self.path = Path(path)

    def collect(self) -> Any:
        """Merge every metric file that has its header (8 bytes or more)."""
        files = []
        for entry in self.path.glob("*.db"):
            try:
                if entry.stat().st_size >= 8:
                    files.append(str(entry))
            except FileNotFoundError:  # a live gauge's file removed by mark_process_dead
                continue
        return self.merge(files, accumulate=True)


class DatabaseProbe(Collector):
    """`sds_api_database_up`: whether the database accepts a connection and a query, asked at
    each scrape (the same URL the API uses: with Patroni, the writable leader)."""

    def __init__(self, settings: Settings, logger: Any) -> None:
        self.settings = settings
        self.log = logger
        self.last_up: int | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Connect, SELECT 1, and report 1 or 0 with the time it took."""
        started = time.perf_counter()
        try:
            with connect(self.settings, name="sds-serve-probe",
                         connect_timeout=PROBE_TIMEOUT) as conn:
                conn.execute("SELECT 1")
            up = 1
        except Exception as exc:  # noqa: BLE001 - any failure means down; say why in the log
            if self.last_up != 0:
                self.log.error("database probe: down: %s", exc)
            up = 0
        if up and self.last_up == 0:
            self.log.info("database probe: up again")
        self.last_up = up
        yield GaugeMetricFamily("sds_api_database_up",
                                "1 when the database answered SELECT 1 at this scrape",
                                value=up)
        yield GaugeMetricFamily("sds_api_database_probe_seconds",
                                "How long the scrape's database probe took",
                                value=time.perf_counter() - started)


def on_starting(_server: Any) -> None:
    """Master start (not a reload): empty the metric files' directory."""
    empty_dir(multiproc_dir())


def when_ready(arbiter: Any) -> None:
    """Master ready: serve the workers' summed metrics and the probe (port 0: not at all). A
    port already taken is logged and the API runs on: Prometheus then sees the target down."""
    global _server
    settings = Settings.from_env(os.environ)
    if not settings.api_metrics_port:
        return
    registry = CollectorRegistry()
    WorkerFilesCollector(registry, path=str(multiproc_dir()))
    registry.register(DatabaseProbe(settings, arbiter.log))
    try:
        _server = metrics.serve(registry, settings.api_metrics_port, settings.metrics_bind)
    except OSError as exc:
        arbiter.log.error("API metrics NOT served: %s:%d: %s", settings.metrics_bind,
                  settings.api_metrics_port, exc)
        return


def post_fork(_arbiter: Any, _worker: Any) -> None:
    """In a new worker: close the inherited metrics socket (only the master answers on it)."""
    if _server is not None:
        _server.socket.close()


def child_exit(_arbiter: Any, worker: Any) -> None:
    """A worker exited: drop its live gauges (its counters stay in the sum)."""
    multiprocess.mark_process_dead(worker.pid, path=str(multiproc_dir()))


def on_exit(_arbiter: Any) -> None:
    """Master exit: remove the directory if it is a temporary one deploy/gunicorn.conf.py
    made (TMP_PREFIX)."""
    path = multiproc_dir()
    if path.parent == Path(tempfile.gettempdir()) and path.name.startswith(TMP_PREFIX):
        shutil.rmtree(path, ignore_errors=True)


def worker_exit(_arbiter: Any, _worker: Any) -> None:
    """A worker leaving with exit status 0 (a stop, a reload, max_requests) flushes its logs and
    ends at once: the interpreter's teardown frees the whole heap of a forked copy, measured at
    0.5 s of CPU per worker, about 3 s before `run.sh stop` saw an instance of 5 workers gone on
    a loaded 2-core machine. Its requests are answered by then; nothing else happens at exit
    (the master drops its metrics in `child_exit`). Any other exit takes the normal path, so its
    status reaches the master."""
    exc = sys.exc_info()[1]  # gunicorn calls this in the `finally` of the worker's sys.exit
    if isinstance(exc, SystemExit) and exc.code in (0, None):
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
