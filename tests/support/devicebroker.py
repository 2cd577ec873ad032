"""A broker as deployed for the device tests (`sds device`, the dashboard's fleet pages): a real
mosquitto with a password file holding the ingester's login and the broker's pid file (which
the device writes reload), and the real ingester subscribed to it. Fixtures
`deployed_broker` and `deployed_ingester` (registered by tests/shared/conftest.py and
tests/web/conftest.py; named apart from tests/support/ingesting.py's `ingester`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.client import Ingester
from shared.config import Settings
from testbed.mosquitto import MosquittoBroker

INGESTER_PW = "ingester-deployed-password"
"""The ingester's broker password (its login is the only one the password file starts with)."""


@pytest.fixture
def deployed_broker(tmp_path: Path, processes: None) -> Iterator[tuple[MosquittoBroker, Path]]:
    """A broker with a password file (the ingester only) and its pid file, as deployed; yields
    the broker and the password file's path."""
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=False,
                                     users={"ingester": INGESTER_PW})
    (tmp_path / "mqtt" / "mosquitto.pid").write_text(f"{broker.pid}\n")
    try:
        yield broker, tmp_path / "mqtt" / "passwd"
    finally:
        broker.stop()


@pytest.fixture
def deployed_ingester(database_url: str, deployed_broker: tuple[MosquittoBroker, Path],
                      request: pytest.FixtureRequest) -> Iterator[None]:
    """The ingester on `database_url`, subscribed to the deployed broker as its own login
    (client id named after the test module)."""
    broker, _ = deployed_broker
    module = request.node.module.__name__.rpartition(".")[2]
    settings = Settings(database_url=database_url, metrics_port=0, aggregate_metrics_port=0,
                        mqtt_host="127.0.0.1", mqtt_port=broker.port, mqtt_username="ingester",
                        mqtt_password=INGESTER_PW, mqtt_client_id=f"ing-{module}"[:23],
                        ingest_flush_interval=0.1)
    running = Ingester(settings)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    assert running.ready.wait(15), "ingester did not subscribe"
    yield
    running.stop()
    thread.join(30)
