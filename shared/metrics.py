"""The Prometheus endpoint every process serves its own registry on (SDS_METRICS_BIND and the
process's port setting; port 0 disables it)."""

from __future__ import annotations

import logging
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


def serve(registry: CollectorRegistry, port: int, addr: str) -> WSGIServer | None:
    """Serve `registry` on http://addr:port/metrics from a daemon thread (port 0: disabled)."""
    if not port:
        return None
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    log.info("metrics on http://%s:%d/metrics", addr, port)
    return server
