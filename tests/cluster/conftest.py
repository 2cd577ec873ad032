"""Fixtures for the RabbitMQ cluster profile: one 3-node cluster per module (helpers:
tests/support/clustering.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.clustering import CLIENT_BASE, DEVICES, INGESTER
from tests.support.rabbit import RabbitCluster


@pytest.fixture(scope="module")
def cluster(processes: None) -> Iterator[RabbitCluster]:
    """Three RabbitMQ nodes with the service's vhost, ingester and devices (DEVICES)."""
    c = RabbitCluster(size=3).start()
    try:
        c.provision(ingester=INGESTER, devices=DEVICES, ingester_client_id=CLIENT_BASE)
        yield c
    finally:
        c.cleanup()
