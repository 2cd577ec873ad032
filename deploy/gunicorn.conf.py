"""Gunicorn settings for the HTTP API (`gunicorn -c deploy/gunicorn.conf.py serve.wsgi:app`).

Used by deploy/run.sh (once per API instance, behind the nginx edge), the systemd unit and the
container. Reads SDS_HTTP_BIND (default 127.0.0.1:8081), SDS_HTTP_WORKERS (default 5),
PROMETHEUS_MULTIPROC_DIR (the workers' metric files; default a temporary directory) and
SDS_LOG_DIR (default <repo>/.state/logs; "-" sends the access log to stdout, for systemd's journal
or a container). Gunicorn's own messages go to stderr, which run.sh collects in
.state/logs/serve-<k>.log together with the app's log.
"""

import dataclasses
import os
import sys
import tempfile
from pathlib import Path

_repo = Path(__file__).resolve().parent.parent
_log_dir = os.environ.get("SDS_LOG_DIR") or str(_repo / ".state" / "logs")

bind = [os.environ.get("SDS_HTTP_BIND") or "127.0.0.1:8081"]
proc_name = "sds-serve"
# The request line may be as long as the edge lets through (nginx's large_client_header_buffers
# 8k: 8,190 bytes before its CRLF; gunicorn's own default is 4,094), so a URL the edge accepts is
# never refused behind it, and a client straight at gunicorn meets the same boundary.
# tests/serve/test_edge.py checks both sides of it. 8,190 is gunicorn's maximum.
limit_request_line = 8190
timeout = 60
graceful_timeout = 20
# Gunicorn 25+ opens a control socket in $HOME/.gunicorn by default; we do not use it, and two
# instances on one host (or a home-less service user) would trip over it.
control_socket_disable = True

# Prometheus' multiprocess mode (serve/metrics.py): the workers write their metrics to files in
# PROMETHEUS_MULTIPROC_DIR (deploy/run.sh gives each API instance its own under .state), which
# must be set before prometheus_client is first imported (by serve, below). Without it: a fresh
# temporary directory, removed at exit (serve.gunicorn_hooks.on_exit). A reload (SIGHUP)
# re-reads this file and keeps the directory already set.
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="sds-api-metrics-")

# gunicorn's own error answers (400/414/431 before the app sees a request) in the API's JSON
# error body, and access-log values with control characters escaped (serve/gunicorn_hooks.py).
# The config runs in the master before it forks, so the workers inherit both.
if str(_repo) not in sys.path:
    sys.path.insert(0, str(_repo))
from serve import gunicorn_hooks  # noqa: E402
from shared.config import Settings  # noqa: E402

# SDS_HTTP_WORKERS, default Settings' (5): more than SDS_API_USER_CONCURRENCY (4), so the
# per-user cap binds before one user holds every worker (serve/fairshare.py).
workers = int(os.environ.get("SDS_HTTP_WORKERS")
              or {f.name: f.default for f in dataclasses.fields(Settings)}["http_workers"])

gunicorn_hooks.install()
logger_class = "serve.gunicorn_hooks.AccessLogger"
# The master serves the workers' summed metrics on SDS_API_METRICS_PORT (docs/operations.md
# "Monitoring and alerts").
on_starting = gunicorn_hooks.on_starting
when_ready = gunicorn_hooks.when_ready
post_fork = gunicorn_hooks.post_fork
child_exit = gunicorn_hooks.child_exit
worker_exit = gunicorn_hooks.worker_exit
on_exit = gunicorn_hooks.on_exit

errorlog = "-"
accesslog = "-" if _log_dir == "-" else os.path.join(_log_dir, "access.log")
# Path without the query string (%(U)s, not %(r)s or %(q)s): the deprecated ?apikey= puts keys in
# the URL, and the log must never hold one. No Referer either (it can carry such a URL) and no
# user name (Basic auth's is an email address). %(M)s is the duration in milliseconds.
access_log_format = '%(h)s - - %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s %(M)sms "%(a)s"'
