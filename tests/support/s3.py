"""The S3-compatible server of a test module (testbed/s3.py, moto's server mode), with a
bucket of its own: the cold tier's tests against object storage import `s3_server`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.s3 import S3Server


@pytest.fixture(scope="module")
def s3_server(processes: None) -> Iterator[S3Server]:
    """A moto S3 server for the module, with the bucket `cold`."""
    server = S3Server().start()
    try:
        server.create_bucket("cold")
        yield server
    finally:
        server.cleanup()
