"""The API's Prometheus metrics through the real server: gunicorn with several workers, as
deploy/run.sh starts it, its master serving the workers' summed metrics on its own port
(serve/metrics.py, serve/gunicorn_hooks.py)."""

from __future__ import annotations

import http.client
import os
import signal
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shared.config import Settings
from testbed.apiserver import GunicornServer
from tests.support.access_world import World, seed
from tests.support.ingesting import wait_for

WORKERS = 3
RATE_LIMIT = 5


class Api:
    """The running gunicorn: its API port and its metrics port."""

    def __init__(self, server: GunicornServer) -> None:
        self.server = server

    def get(self, path: str, key: str | None = None) -> int:
        """One GET on a fresh connection (so successive ones reach different workers)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        try:
            conn.putrequest("GET", path, skip_accept_encoding=True)
            if key:
                conn.putheader("Authorization", f"Apikey {key}")
            conn.endheaders()
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """{(sample name, sorted labels): value} from the metrics port."""
        conn = http.client.HTTPConnection("127.0.0.1", self.server.metrics_port, timeout=30)
        try:
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            assert resp.status == 200
            text = resp.read().decode()
        finally:
            conn.close()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def count(self, route: str, status: str, method: str = "GET") -> float:
        """sds_api_requests_total of one route, method and status."""
        labels = tuple(sorted({"route": route, "method": method, "status": status}.items()))
        return self.samples().get(("sds_api_requests_total", labels), 0.0)

    def settled(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """The samples once every request sent has been recorded: a request is counted when
        the server closes its body, just after the client has read the answer."""
        def settled() -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float]] | None:
            samples = self.samples()
            return (samples,) if samples.get(("sds_api_requests_in_flight", ()), 0) == 0 else None

        return wait_for(settled, 10, what="no request in flight")[0]


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """The seeded access world."""
    return seed(module_db)


@pytest.fixture(scope="module")
def api(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """gunicorn -c deploy/gunicorn.conf.py serve.wsgi:app with WORKERS workers."""
    server = GunicornServer().start(
        {"SDS_DATABASE_URL": world.url, "SDS_API_RATE_LIMIT": str(RATE_LIMIT),
         "SDS_API_RATE_WINDOW": "600"},
        tmp_path_factory.mktemp("gunicorn-metrics"), workers=WORKERS)
    try:
        yield Api(server)
    finally:
        server.stop()


def _metric_pids(directory: Path) -> set[str]:
    """The pids of the processes that wrote counter files (counter_<pid>.db)."""
    return {p.stem.split("_", 1)[1] for p in directory.glob("counter_*.db")}


def test_counts_per_route_and_status_summed_over_workers(api: Api, world: World) -> None:
    """Requests spread over every worker are counted once each, under the URL rule (not the
    path) with their status; the master's sum equals what was sent."""
    key = world.keys["all"]
    route = "/api/v2/devices/<name>"
    before_ok, before_404 = api.count(route, "200"), api.count(route, "404")
    health_before = api.count("/api/v2/health", "200")
    directory = Path(api.server._env["PROMETHEUS_MULTIPROC_DIR"])
    n, pids = 0, set()
    # Rounds of concurrent requests until two workers or more answered: 30 sequential ones
    # all went to the one worker awake on a loaded machine (seen once in a full run).
    for _ in range(10):
        with ThreadPoolExecutor(WORKERS) as pool:
            statuses = list(pool.map(lambda _: api.get("/api/v2/health"), range(30)))
        assert statuses == [200] * 30
        n += 30
        api.settled()
        if len(pids := _metric_pids(directory)) >= 2:
            break
    assert api.get("/api/v2/devices/NO-SUCH-DEVICE", key) == 404
    assert api.get("/api/v2/devices/ANOTHER-MISSING", key) == 404
    api.settled()
    # Every worker wrote metrics (the requests were spread), and the master sums them all.
    assert len(pids) >= 2, f"only workers {pids} answered {n} requests"
    assert api.count("/api/v2/health", "200") - health_before == n
    assert api.count(route, "404") - before_404 == 2
    assert api.count(route, "200") == before_ok
    samples = api.samples()
    # The latency histogram counts the same requests.
    hist = ("sds_api_request_duration_seconds_count",
            (("method", "GET"), ("route", "/api/v2/health")))
    assert samples[hist] >= n


def test_hostile_paths_add_no_labels(api: Api) -> None:
    """Paths nobody routes, odd methods and bytes: one `(unmatched)` route, one `other`
    method; the label sets do not grow with what clients send."""
    for i in range(40):
        assert api.get(f"/no/such/path/{i}/%E2%80%AE{'x' * i}") == 404
        assert api.get(f"/api/v2/devices/{i}/nope/{i}") == 404
    conn = http.client.HTTPConnection("127.0.0.1", api.server.port, timeout=30)
    try:
        conn.request("BREW", "/api/v2/health")
        conn.getresponse().read()
    finally:
        conn.close()
    samples = api.settled()
    routes = {dict(labels)["route"] for name, labels in samples
              if name == "sds_api_requests_total"}
    methods = {dict(labels)["method"] for name, labels in samples
               if name == "sds_api_requests_total"}
    assert not any("no/such" in r or "nope" in r for r in routes), routes
    assert "(unmatched)" in routes
    assert methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}
    assert "other" in methods
    assert all(r == "(unmatched)" or r.startswith(("/api/", "/dashboard", "/"))
               for r in routes)
    unmatched = tuple(sorted({"route": "(unmatched)", "method": "GET",
                              "status": "404"}.items()))
    assert samples[("sds_api_requests_total", unmatched)] >= 40


def test_rate_limit_refusals_pool_and_database_probe(api: Api, world: World) -> None:
    """429s of the rate limit are counted by budget; the pool gauges and the database probe
    are there."""
    key = world.keys["devices"]
    statuses = [api.get("/api/v2/devices", key) for _ in range(RATE_LIMIT + 3)]
    assert statuses.count(429) == 3, statuses
    samples = api.settled()
    refused = sum(v for (name, labels), v in samples.items()
                  if name == "sds_api_refused_total" and dict(labels)["reason"].startswith(
                      "rate_limit_"))
    assert refused >= 3
    assert samples[("sds_api_requests_total", tuple(sorted(
        {"route": "/api/v2/devices", "method": "GET", "status": "429"}.items())))] >= 3
    assert samples[("sds_api_database_up", ())] == 1
    # Each live worker's pool: at least one connection, summed over the workers (livesum).
    def summed() -> Any:
        now = api.samples()
        return now if now.get(("sds_api_db_pool_size", (("pool", "primary"),)), 0) >= WORKERS \
            else None

    samples = wait_for(summed, 10, every=0.5, what="pool gauges summed over the workers")
    assert samples[("sds_api_db_pool_max", (("pool", "primary"),))] == 2 * WORKERS


def test_a_dead_worker_keeps_its_counts_and_drops_its_gauges(api: Api) -> None:
    """SIGKILL one worker: what it counted stays in the sum (counters), its pool gauges leave
    it (child_exit -> mark_process_dead), and its replacement's join."""
    for _ in range(10):
        api.get("/api/v2/health")
    api.settled()
    before = api.count("/api/v2/health", "200")
    workers = Path(f"/proc/{api.server.pid}/task/{api.server.pid}/children").read_text().split()
    os.kill(int(workers[0]), signal.SIGKILL)
    def replaced() -> bool:
        now = Path(f"/proc/{api.server.pid}/task/{api.server.pid}/children").read_text().split()
        return len(now) == WORKERS and workers[0] not in now

    wait_for(replaced, 30, every=0.2, what="gunicorn replacing the killed worker")
    assert api.count("/api/v2/health", "200") >= before
    # Within a couple of sampling periods the gauge is the live workers' sum again (2 each;
    # the dead worker's 2 would make it 2 * WORKERS + 2).
    pool = ("sds_api_db_pool_max", (("pool", "primary"),))
    wait_for(lambda: api.samples().get(pool) == 2 * WORKERS, 15, every=0.5,
             what="the pool gauge back to the live workers' sum")


def test_database_probe_reports_a_refused_connection() -> None:
    """The probe the master runs at each scrape: 1 against the test database, 0 against a port
    where nothing listens (a real refused connection), and the error logged once."""
    import socket

    from serve.gunicorn_hooks import DatabaseProbe

    class Log:
        def __init__(self) -> None:
            self.errors: list[str] = []

        def error(self, msg: str, *args: object) -> None:
            self.errors.append(msg % args)

        def info(self, msg: str, *args: object) -> None:
            pass

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # bound, never listening: connections are refused
        log = Log()
        probe = DatabaseProbe(Settings(database_url=f"postgresql://x@127.0.0.1:{closed}/x"),
                              log)
        for _ in range(2):
            up = {m.name: m.samples[0].value for m in probe.collect()}
            assert up["sds_api_database_up"] == 0
    assert len(log.errors) == 1 and "down" in log.errors[0]


def test_database_probe_up(world: World) -> None:
    """Against the running test database the probe says 1."""
    from serve.gunicorn_hooks import DatabaseProbe

    probe = DatabaseProbe(Settings(database_url=world.url), None)
    assert {m.name: m.samples[0].value for m in probe.collect()}["sds_api_database_up"] == 1



def test_a_worker_file_still_being_created_is_left_out(tmp_path: Path) -> None:
    """A metric file a worker has just created is empty until it sizes it; the master's
    collector read it and raised struct.error, so the scrape answered 500 (seen once, while
    this module's gunicorn booted its workers). Now the empty file is left out and the rest is
    summed."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    from serve.gunicorn_hooks import WorkerFilesCollector

    written = MmapedDict(str(tmp_path / "counter_101.db"))
    written.write_value(mmap_key("sds_api_t", "sds_api_t_total", ["route"], ["/x"], "t"), 3.0,
                        0.0)
    written.close()
    (tmp_path / "counter_102.db").touch()  # the booting worker's file, not sized yet
    library = CollectorRegistry()
    multiprocess.MultiProcessCollector(library, path=str(tmp_path))
    with pytest.raises(struct.error):  # what the master served as a 500
        generate_latest(library)
    ours = CollectorRegistry()
    WorkerFilesCollector(ours, path=str(tmp_path))
    text = generate_latest(ours).decode()
    assert 'sds_api_t_total{route="/x"} 3.0' in text, text
