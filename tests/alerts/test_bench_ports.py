"""bench.alerts beside a running stack (issue 33): every process it starts listens on a port
it picked free, or on none, never on a default port of shared/config.py, which a
deploy/run.sh stack on the same host holds (it failed with "did not start within 60 s")."""

from __future__ import annotations

import pytest

from bench.alerts.stack import LISTEN_PORTS, SCRAPED, process_env
from shared.config import PREFIX, Settings
from testbed.process import free_port

DEFAULTS = Settings()


@pytest.mark.parametrize("module", sorted(SCRAPED))
def test_each_process_listens_on_its_free_port_only(module: str) -> None:
    settings = DEFAULTS.replace(metrics_port=free_port(), alerts_metrics_port=free_port(),
                                delivery_metrics_port=free_port())
    env, port = process_env(module, settings)
    assert port == getattr(settings, SCRAPED[module]) != getattr(DEFAULTS, SCRAPED[module])
    assert "metrics_port" in LISTEN_PORTS and "api_metrics_port" in LISTEN_PORTS
    for name in LISTEN_PORTS:
        value = env[PREFIX + name.upper()]
        assert value == (str(port) if name == SCRAPED[module] else "0"), name
