"""The kernel's ephemeral port range and deploy/lib/ports.sh's defaults, for the tests that keep
the stack's default ports out of that range (tests/test_ports.py, tests/test_deploy.py)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

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
