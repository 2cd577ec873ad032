"""The API as deployed, for tests that talk HTTP over a real socket (the Python client, the
browser tests): `serve.wsgi:app` under gunicorn with deploy/gunicorn.conf.py on a free loopback
port (testbed.services.GunicornServer), against a test database. Stopped with SIGTERM
(then SIGKILL) on exit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.services import GunicornServer


@contextmanager
def gunicorn_api(database_url: str, log_dir: Path, *, workers: int = 2,
                 **env: str) -> Iterator[str]:
    """Run the API on `database_url`; yields its base URL (http://127.0.0.1:PORT). Extra
    keyword arguments are SDS_* settings (e.g. SDS_API_RATE_LIMIT="3")."""
    api = GunicornServer().start(
        {"SDS_DATABASE_URL": database_url, "SDS_CURSOR_SECRET": "apiserver-test", **env},
        log_dir, workers=workers)
    try:
        yield f"http://127.0.0.1:{api.port}"
    finally:
        api.stop()


def edge_api_env(database_url: str) -> dict[str, str]:
    """Settings of a test API instance behind the edge (testbed.services.NginxEdge): it
    trusts the edge's X-Forwarded-For, and no request rate limit or in-flight cap gets in a load
    test's way (tests/serve/test_fairshare.py runs with the shipped ones)."""
    return {"SDS_DATABASE_URL": database_url, "SDS_CURSOR_SECRET": "edge-test",
            "SDS_TRUSTED_PROXY_HOPS": "1", "SDS_API_RATE_LIMIT": "0",
            "SDS_API_USER_RATE_LIMIT": "0", "SDS_API_ORG_RATE_LIMIT": "0",
            "SDS_API_USER_CONCURRENCY": "0", "SDS_API_ORG_CONCURRENCY": "0"}


__all__ = ["edge_api_env", "gunicorn_api"]
