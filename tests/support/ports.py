"""The stack's ports, for the tests: the kernel's ephemeral port range and
deploy/lib/ports.sh's defaults (tests/test_ports.py and tests/test_deploy.py keep the defaults
out of that range), and the ports a deployed stack listens on, held while the tests run so a
test that opens one fails.

Tests and benchmarks pick free ports (testbed.process.free_port) for everything they start:
they must run beside a `deploy/run.sh` stack on the same machine (a CI host, an operator's
box). On a machine without one, nothing would notice a test that binds a default port, so the
session holds these ports itself (tests/conftest.py): a process a test starts on one of them
fails to bind, just as it would beside a running stack.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from shared.config import Settings

REPO = Path(__file__).resolve().parents[2]
PORTS_SH = REPO / "deploy" / "lib" / "ports.sh"
FALLBACK_RANGE = (32768, 60999)  # Linux's default net.ipv4.ip_local_port_range


def ephemeral_range() -> tuple[int, int]:
    """This kernel's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        lo, hi = (int(x) for x in
                  Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return FALLBACK_RANGE
    return lo, hi


def in_ephemeral_range(port: int) -> bool:
    """Whether the kernel may give `port` to an outgoing connection."""
    lo, hi = ephemeral_range()
    return lo <= port <= hi


def port_of(value: object) -> int | None:
    """The port in a default: a number, host:port, or a URL with a port."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        return None
    if value.isdigit():
        return int(value)
    if "://" in value:
        return urlsplit(value).port
    host, sep, port = value.rpartition(":")
    return int(port) if sep and host and port.isdigit() else None


def ports_sh() -> dict[str, str]:
    """The NAME=value lines of deploy/lib/ports.sh."""
    return dict(re.findall(r"^([A-Z_]+)=(\S+)$", PORTS_SH.read_text(), re.M))


def span(profile: str) -> range:
    """The ports a profile (PATRONI, RABBITMQ) may use by default: its base and declared span."""
    sh = ports_sh()
    base = int(sh[f"DEFAULT_{profile}_PORT_BASE"])
    return range(base, base + int(sh[f"{profile}_PORT_SPAN"]) + 1)


# deploy/run.sh derives some ports from the settings: API instance k at the HTTP and API
# metrics port + k - 1, ingester shard k at the metrics port + 100 + k - 1 (its standby at
# + 150 + k - 1, one shard's standby at + 50); this many instances and shards are covered.
LAYOUT = 4


def deployed_ports() -> list[int]:
    """The TCP ports a stack on the default settings listens on, on 127.0.0.1."""
    s = Settings()
    sh = ports_sh()
    # deploy/services.sh: PostgreSQL, its standby, and the Patroni profile's HAProxy and nodes.
    services = {int(sh["DEFAULT_PG_PORT"]), int(sh["DEFAULT_PG_STANDBY_PORT"]),
                *span("PATRONI")[:8]}
    ports = {s.mqtt_port, s.aggregate_metrics_port, s.alerts_metrics_port,
             s.delivery_metrics_port, s.prometheus_port, s.alertmanager_port,
             s.node_exporter_port, *services}
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
