"""Prometheus metrics of the API: requests, latency and status per route, requests in flight,
the connection pools' use, and refusals (rate limits, fair share, login throttling).

Labels are bounded: the route is Flask's URL rule (`/api/v2/devices/<name>`), never the path a
client sent, `(unmatched)` when no rule matched; the method is one of METHODS or `other`; the
status is the numeric code. Under gunicorn (PROMETHEUS_MULTIPROC_DIR set by
deploy/gunicorn.conf.py) every worker writes its values to files in that directory and the
master serves their sum (serve/gunicorn_hooks.py); elsewhere (tests, `flask run`) each app has
its own registry, read with `exposition(app)`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from flask import Flask, current_app, has_app_context, request, request_started
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from psycopg_pool import ConnectionPool

log = logging.getLogger(__name__)

EXTENSION = "metrics"
ROUTE_KEY = "sds.route"  # the WSGI environ key the route is passed to the middleware in
UNMATCHED = "(unmatched)"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
SAMPLE_EVERY = 2.0  # seconds between samples of the pools' state
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ApiMetrics:
    """The API's metrics (names prefixed `sds_api_`), in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "sds_api_requests", "Requests answered, by route (URL rule), method and status",
            ["route", "method", "status"], registry=r)
        self.latency = Histogram(
            "sds_api_request_duration_seconds",
            "Time from the request's arrival in the worker to the last byte of its answer "
            "(a streamed page included)", ["route", "method"], buckets=LATENCY_BUCKETS,
            registry=r)
        # livesum: the sum over the workers alive now (a dead worker's share is dropped).
        self.in_flight = Gauge("sds_api_requests_in_flight", "Requests being answered",
                               registry=r, multiprocess_mode="livesum")
        self.refused = Counter(
            "sds_api_refused",
            "Requests refused to protect the service (429/503), by reason: rate_limit_<budget>, "
            "in_flight_<user|org>, heavy_pages, login_throttle", ["reason"], registry=r)
        self.pool_size = Gauge("sds_api_db_pool_size", "Connections the pool holds",
                               ["pool"], registry=r, multiprocess_mode="livesum")
        self.pool_max = Gauge("sds_api_db_pool_max", "Connections the pool may hold",
                              ["pool"], registry=r, multiprocess_mode="livesum")
        self.pool_in_use = Gauge("sds_api_db_pool_in_use", "Connections lent out to requests",
                                 ["pool"], registry=r, multiprocess_mode="livesum")
        self.pool_waiting = Gauge("sds_api_db_pool_waiting",
                                  "Requests waiting for a connection", ["pool"], registry=r,
                                  multiprocess_mode="livesum")
        self.pool_timeouts = Counter(
            "sds_api_db_pool_timeouts",
            "Requests that got no connection within the pool's timeout (answered 503)",
            ["pool"], registry=r)
        self.pool_connect_errors = Counter(
            "sds_api_db_pool_connect_errors",
            "Failed attempts of the pool to open a connection (database down or refusing)",
            ["pool"], registry=r)
        self.cold_unavailable = Counter(
            "sds_api_cold_unavailable",
            "Pages answered 503 because a cold-tier file they reach is missing or unreadable, "
            "by reason (missing, unreadable)", ["reason"], registry=r)

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        method = method if method in METHODS else "other"
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)


def metrics_of(app: Flask | None = None) -> ApiMetrics:
    """The metrics of `app`, or of the app handling the current request."""
    owner = app if app is not None else current_app
    found = owner.extensions[EXTENSION]
    assert isinstance(found, ApiMetrics)
    return found


def refused(reason: str) -> None:
    """Count a refusal of the current request (called where a 429/503 is raised); nothing
    outside an app with metrics (the authenticator used on its own)."""
    if has_app_context() and EXTENSION in current_app.extensions:
        metrics_of().refused.labels(reason).inc()


def exposition(app: Flask) -> bytes:
    """The text format of `app`'s own registry (outside gunicorn's multiprocess mode)."""
    return generate_latest(metrics_of(app).registry)


class _Timed:
    """The answer's body, passed through; its close() (WSGI servers call it after the last
    byte, or when the client went away) records the request."""

    def __init__(self, body: Iterable[bytes], done: Callable[[], None]) -> None:
        self.body = body
        self.done = done

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        """Close the body, then record."""
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.done()


class Middleware:
    """WSGI middleware around the Flask app: times each request to its last byte and counts
    it with the route Flask matched (left in the environ by `_remember_route`)."""

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]], metrics: ApiMetrics) -> None:
        self.wsgi_app = wsgi_app
        self.metrics = metrics

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        """Run the app; the request is recorded when its body is closed."""
        started = time.perf_counter()
        status = [500]
        recorded = [False]

        def capture(status_line: str, headers: list[tuple[str, str]], *args: Any) -> Any:
            status[0] = int(status_line.split(" ", 1)[0])
            return start_response(status_line, headers, *args)

        def done() -> None:
            if recorded[0]:
                return
            recorded[0] = True
            self.metrics.in_flight.dec()
            self.metrics.observe(environ.get(ROUTE_KEY, UNMATCHED),
                                 str(environ.get("REQUEST_METHOD", "")), status[0],
                                 time.perf_counter() - started)

        self.metrics.in_flight.inc()
        try:
            body = self.wsgi_app(environ, capture)
        except BaseException:
            done()
            raise
        return _Timed(body, done)


def _remember_route(sender: Flask, **_extra: Any) -> None:
    """request_started (before any before_request hook, so also for requests refused by
    authentication): the matched URL rule into the environ."""
    rule = request.url_rule
    request.environ[ROUTE_KEY] = rule.rule if rule is not None else UNMATCHED


class PoolSampler(threading.Thread):
    """Samples the pools' state every SAMPLE_EVERY seconds into the pool gauges and counters;
    ends when the first pool is closed."""

    def __init__(self, metrics: ApiMetrics, pools: dict[str, ConnectionPool]) -> None:
        super().__init__(name="sds-metrics-pools", daemon=True)
        self.metrics = metrics
        self.pools = pools
        self._seen: dict[tuple[str, str], int] = {}
        self.stopped = threading.Event()

    def sample(self) -> None:
        """Read each pool's statistics once."""
        m = self.metrics
        for name, p in self.pools.items():
            stats = p.get_stats()
            size, available = stats.get("pool_size", 0), stats.get("pool_available", 0)
            m.pool_size.labels(name).set(size)
            m.pool_max.labels(name).set(stats.get("pool_max", 0))
            m.pool_in_use.labels(name).set(max(0, size - available))
            m.pool_waiting.labels(name).set(stats.get("requests_waiting", 0))
            # get_stats() gives totals since the pool opened: count what is new.
            for key, counter in (("requests_errors", m.pool_timeouts),
                                 ("connections_errors", m.pool_connect_errors)):
                total = int(stats.get(key, 0))
                new = total - self._seen.get((name, key), 0)
                if new > 0:
                    counter.labels(name).inc(new)
                self._seen[(name, key)] = total

    def run(self) -> None:
        """Sample until a pool closes or `stopped` is set."""
        while not self.stopped.wait(SAMPLE_EVERY):
            if any(p.closed for p in self.pools.values()):
                return
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a failed sample must not end the sampling
                log.exception("sampling the pools' state failed")


def init_app(app: Flask, pools: dict[str, ConnectionPool]) -> ApiMetrics:
    """Wrap `app` in the metrics middleware and start sampling `pools` (name -> pool)."""
    metrics = ApiMetrics()
    app.extensions[EXTENSION] = metrics
    app.wsgi_app = Middleware(app.wsgi_app, metrics)  # type: ignore[method-assign]
    request_started.connect(_remember_route, app)
    sampler = PoolSampler(metrics, pools)
    sampler.sample()
    sampler.start()
    return metrics


__all__ = ["ApiMetrics", "Middleware", "PoolSampler", "exposition", "init_app", "metrics_of",
           "refused"]
