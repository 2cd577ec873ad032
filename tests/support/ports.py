"""The ports of a deployed stack, held while the tests run, so a test that opens one fails.

Tests and benchmarks pick free ports (testbed.services.free_port) for everything they start:
they must run beside a `deploy/run.sh` stack on the same machine (a CI host, an operator's
box). On a machine without one, nothing would notice a test that binds a default port, so the
session holds these ports itself (tests/conftest.py): a process a test starts on one of them
fails to bind, just as it would beside a running stack.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from shared.config import Settings

# deploy/run.sh derives some ports from the settings: API instance k at the HTTP and API
# metrics port + k - 1, ingester shard k at the metrics port + 100 + k - 1 (its standby at
# + 150 + k - 1, one shard's standby at + 50); this many instances and shards are covered.
LAYOUT = 4
# deploy/services.sh: PostgreSQL, its standby, and the Patroni profile's HAProxy and nodes.
SERVICES = (55432, 55433, *range(55440, 55448))


def deployed_ports() -> list[int]:
    """The TCP ports a stack on the default settings listens on, on 127.0.0.1."""
    s = Settings()
    ports = {s.mqtt_port, s.aggregate_metrics_port, s.alerts_metrics_port, s.prometheus_port,
             s.alertmanager_port, s.node_exporter_port, *SERVICES}
    ports.add(int(s.edge_bind.rsplit(":", 1)[1]))
    ports.add(urlsplit(s.alert_webhook_url).port or 80)
    http = int(s.http_bind.rsplit(":", 1)[1])
    for k in range(1, LAYOUT + 1):
        ports |= {http + k - 1, s.api_metrics_port + k - 1,
                  s.metrics_port + 100 + k - 1, s.metrics_port + 150 + k - 1}
    ports |= {s.metrics_port, s.metrics_port + 50}
    return sorted(ports)


@contextmanager
def held(ports: list[int]) -> Iterator[list[int]]:
    """Listen on each of `ports` that is free on 127.0.0.1 (never accepting); yields those
    held. A port already taken is left alone: something (a real stack) holds it anyway."""
    sockets: list[socket.socket] = []
    try:
        for port in ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
                sock.listen(1)
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
        yield [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()
