"""The client against a rate-limited gunicorn (3 requests per 2 s per key): it paces itself
on RateLimit-Remaining/-Reset, sits out a 429's Retry-After, and gives up on a wait longer
than max_wait. Also Retry-After parsing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest
from sds_client import ApiError, Client, retry_after_seconds

from testbed.apiserver import gunicorn_api
from tests.support.data_world import World
from tests.support.ingesting import wait_for

LIMIT, WINDOW = 3, 2


@pytest.fixture(scope="module")
def limited_url(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gunicorn_api(world.url, tmp_path_factory.mktemp("limited"),
                      SDS_API_RATE_LIMIT=str(LIMIT), SDS_API_RATE_WINDOW=str(WINDOW)) as base:
        yield base


class Sleeps:
    """Records every wait of the client (and waits for real)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        time.sleep(seconds)


def _fresh_window(url: str, key: str) -> None:
    """Wait until the key's window has passed (a 200 with the full budget less one)."""
    with Client(url, apikey=key, retries=0) as probe:

        def fresh() -> bool:
            try:
                response = probe.transport.request("GET", "/api/v2/schemas")
            except ApiError:
                return False
            return int(response.headers["RateLimit-Remaining"]) == LIMIT - 1

        wait_for(fresh, 10, every=0.5, what="the key's window to pass")


def test_paces_on_ratelimit_headers_without_a_429(limited_url: str, world: World) -> None:
    _fresh_window(limited_url, world.keys["a"])
    sleeps = Sleeps()
    with Client(limited_url, apikey=world.keys["a"], sleep=sleeps) as client:
        original = client.transport.session.request
        statuses: list[int] = []

        def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
            response = original(*args, **kwargs)
            statuses.append(response.status_code)
            return response

        client.transport.session.request = spy  # type: ignore[method-assign]
        for _ in range(LIMIT * 2 + 1):
            assert "daily" in client.tables()
    # The probe used one request of the window: the client saw Remaining 0 and waited for the
    # reset instead of sending into a 429.
    assert 429 not in statuses and len(statuses) == LIMIT * 2 + 1
    assert sleeps.waits and all(0 < w <= WINDOW + 0.5 for w in sleeps.waits)


def test_sits_out_retry_after_of_a_429(limited_url: str, world: World) -> None:
    _fresh_window(limited_url, world.keys["a"])
    with Client(limited_url, apikey=world.keys["a"], retries=0) as other:
        for _ in range(LIMIT - 1):
            other.tables()  # another process of the same key uses the rest of the window
    sleeps = Sleeps()
    with Client(limited_url, apikey=world.keys["a"], sleep=sleeps) as client:
        started = time.monotonic()
        assert "daily" in client.tables()  # 429 first, then the retry after Retry-After
        elapsed = time.monotonic() - started
    assert len(sleeps.waits) == 1 and 1 <= sleeps.waits[0] <= WINDOW + 1
    assert elapsed >= sleeps.waits[0]


def test_gives_up_when_the_wait_exceeds_max_wait(limited_url: str, world: World) -> None:
    _fresh_window(limited_url, world.keys["a"])
    with Client(limited_url, apikey=world.keys["a"], retries=0) as other:
        for _ in range(LIMIT - 1):
            other.tables()
    sleeps = Sleeps()
    with Client(limited_url, apikey=world.keys["a"], sleep=sleeps, max_wait=0.1) as client:
        with pytest.raises(ApiError) as caught:
            client.tables()
    assert caught.value.status == 429 and sleeps.waits == []
    assert caught.value.response is not None and "Retry-After" in caught.value.response.headers


def test_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=30), usegmt=True),
                               now=now) == 30.0
    assert retry_after_seconds("garbage") is None and retry_after_seconds(None) is None
    assert retry_after_seconds("-3") == 0.0


def test_unreachable_server_is_retried_then_raised(tmp_path: Path) -> None:
    import requests

    from testbed.process import free_port

    sleeps = Sleeps()
    with Client(f"http://127.0.0.1:{free_port()}", apikey="sdsk_x", retries=2, backoff=0.01,
                sleep=sleeps) as client:
        with pytest.raises(requests.ConnectionError):
            client.tables()
    assert len(sleeps.waits) == 2
