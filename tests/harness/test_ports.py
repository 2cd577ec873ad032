"""The session holds the deployed stack's ports (tests/support/ports.py), so a test or a
process it starts that binds one fails here as it would beside a running `deploy/run.sh`."""

from __future__ import annotations

import socket

import pytest

from shared.config import Settings
from tests.support.ports import deployed_ports


@pytest.mark.parametrize("port", [Settings().alerts_metrics_port, Settings().mqtt_port,
                                  Settings().metrics_port + 100])
def test_a_default_port_cannot_be_bound_during_the_run(port: int) -> None:
    assert port in deployed_ports()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, \
            pytest.raises(OSError, match="in use"):
        sock.bind(("127.0.0.1", port))
