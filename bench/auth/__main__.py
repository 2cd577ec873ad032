"""Authentication cost per request, with baselines measured in the same run.

    .venv/bin/python -m bench.auth [--quick] [--database-url URL] [--requests N]

Builds the real app (serve.create_app) on a scratch database (a throwaway PostgreSQL started
here unless --database-url names a server whose maintenance database may create databases),
adds two constant routes - one public, one behind `requires("data:read")` - and times:

1. API-key overhead: median request time with `Authorization: Apikey` minus the same constant
   route without authentication. Target: under 1 ms. The per-key request rate limit
   (SDS_API_RATE_LIMIT, one upsert per request) is on, as shipped; "Apikey, rate limit off"
   is the same with SDS_API_RATE_LIMIT=0, so the difference is the limiter's cost.
2. Repeated Basic: median request time with the same Basic credentials (cache on) against one
   argon2 verify, and against Basic with the cache off (every request verifies).
3. Bearer, for comparison.

Numbers are medians and p99 of N requests through Flask's test client (no sockets), so they
show what authentication adds in-process; network and gunicorn costs are the same for all.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from bench.common import scratch_database
from people import accounts, credentials
from shared import db
from shared.config import Settings

PASSWORD = "bench-password-1"  # nosec B105 - a scratch user in a scratch database
EMAIL = "bench@example.com"


def _seed(url: str) -> tuple[str, str]:
    """A user, an API key and a bearer token; returns (key, token)."""
    with db.connect(url) as conn:
        org = accounts.create_org(conn, name="Bench")
        user = accounts.create_user(conn, org=org, email=EMAIL, password=PASSWORD)
        key = accounts.create_api_key(conn, user=user, scopes=["data:read"])["apikey"]
        token = credentials.new_token()
        conn.execute("INSERT INTO auth_tokens (user_id, digest, expires_at)"
                     " VALUES (%s, %s, now() + %s)", (user, token.digest, timedelta(hours=1)))
        conn.commit()
    return key, token.value


def _app(url: str, **overrides: object):  # type: ignore[no-untyped-def]
    from serve import auth, create_app

    settings = Settings(database_url=url, metrics_port=0, aggregate_metrics_port=0,
                        login_max_failures=10**6,
                        # On, as shipped, but never reached: the bench measures its cost.
                        api_rate_limit=10**9).replace(**overrides)
    app = create_app(settings)

    @auth.public
    def bench_open() -> dict[str, bool]:
        return {"ok": True}

    @auth.requires("data:read")
    def bench_closed() -> dict[str, bool]:
        return {"ok": True}

    app.add_url_rule("/bench/open", "bench_open", bench_open)
    app.add_url_rule("/bench/closed", "bench_closed", bench_closed)
    return app


def _time(fn: Callable[[], object], n: int) -> list[float]:
    for _ in range(min(20, n)):  # warm-up: pool connections, caches, code paths
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def _stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(len(ordered) * 0.99) - 1] * 1e3


def _get(client: Any, path: str, headers: dict[str, str]) -> Callable[[], object]:
    def call() -> object:
        r = client.get(path, headers=headers)
        if r.status_code != 200:
            raise SystemExit(f"unexpected {r.status_code} from {path}: {r.get_data()[:200]!r}")
        return r

    return call


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table with ratios."""
    from serve.pool import pool

    parser = argparse.ArgumentParser(prog="python -m bench.auth", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests (about 10 s)")
    parser.add_argument("--requests", type=int, default=None, help="requests per case")
    parser.add_argument("--database-url", default=None,
                        help="server to create a scratch database on (default: start one)")
    args = parser.parse_args(argv)
    n = args.requests or (300 if args.quick else 3000)
    with scratch_database(args.database_url, prefix="bench_auth") as url:
        key, token = _seed(url)
        basic = "Basic " + base64.b64encode(f"{EMAIL}:{PASSWORD}".encode()).decode()
        cached = _app(url)
        uncached = _app(url, basic_auth_cache_ttl=0)
        unlimited = _app(url, api_rate_limit=0)
        try:
            c = cached.test_client()
            rows = {
                "no auth (public route)": _time(_get(c, "/bench/open", {}), n),
                "Apikey": _time(_get(c, "/bench/closed", {"Authorization": f"Apikey {key}"}), n),
                "Apikey, rate limit off": _time(_get(
                    unlimited.test_client(), "/bench/closed",
                    {"Authorization": f"Apikey {key}"}), n),
                "Bearer": _time(_get(c, "/bench/closed", {"Authorization": f"Bearer {token}"}), n),
                "Basic, cached": _time(_get(c, "/bench/closed", {"Authorization": basic}), n),
                "Basic, cache off": _time(_get(uncached.test_client(), "/bench/closed",
                                               {"Authorization": basic}), max(20, n // 20)),
            }
        finally:
            for app in (cached, uncached, unlimited):
                pool(app).close()
        stored = credentials.hash_password(PASSWORD)
        rows["argon2 verify alone"] = _time(
            lambda: credentials.verify_password(stored, PASSWORD), max(20, n // 20))
    medians = {name: _stats(s) for name, s in rows.items()}
    base = medians["no auth (public route)"][0]
    argon = medians["argon2 verify alone"][0]
    print(f"{'case':<26}{'median ms':>11}{'p99 ms':>9}{'over no-auth ms':>17}"
          f"{'/ argon2':>10}")
    for name, (median, p99) in medians.items():
        print(f"{name:<26}{median:>11.3f}{p99:>9.3f}{median - base:>17.3f}"
              f"{median / argon:>10.3f}")
    overhead = medians["Apikey"][0] - base
    ratio = medians["Basic, cached"][0] / argon
    limiter = medians["Apikey"][0] - medians["Apikey, rate limit off"][0]
    print()
    print(f"API-key auth overhead per request: {overhead:.3f} ms median "
          f"(target < 1 ms: {'met' if overhead < 1 else 'NOT met'})")
    print(f"of which the request rate limit: {limiter:.3f} ms median "
          f"(Apikey with the limit on minus off)")
    print(f"repeated Basic / one argon2 verify: {ratio:.3f} "
          f"({'not argon2-bound' if ratio < 0.5 else 'argon2-bound'}); "
          f"cache off / argon2: {medians['Basic, cache off'][0] / argon:.2f}")
    print(f"requests per case: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
