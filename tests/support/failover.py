"""Measuring a database failover from the clients' side: a write probe (how long after the loss
the first write succeeds, through the same URL and connect path as every process) and an API
load (how many HTTP requests failed during the switch). Used by the promotion drill
(tests/chaos/test_promotion.py) and the Patroni drill (tests/cluster/test_patroni.py)."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

import psycopg

from shared import db

PROBE_TABLE = "failover_probe"


class WriteProbe:
    """Inserts a row every `every` seconds through `url` from a thread, reconnecting after an
    error (as a pool does); remembers when each write succeeded."""

    def __init__(self, url: str, every: float = 0.1) -> None:
        self.url, self.every = url, every
        # (began, ended) in time.monotonic() of each committed write
        self.ok: list[tuple[float, float]] = []
        self.failed = 0
        self._stop = threading.Event()
        with db.connect(url, autocommit=True) as c:
            c.execute(f"CREATE TABLE IF NOT EXISTS {PROBE_TABLE} (at timestamptz NOT NULL)")
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn: psycopg.Connection | None = None
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                if conn is None:
                    conn = db.connect(self.url, autocommit=True, connect_timeout=2,
                                      name="failover-probe", keepalive_probes=2)
                conn.execute(f"INSERT INTO {PROBE_TABLE} VALUES (now())")
                self.ok.append((began, time.monotonic()))
            except psycopg.Error:
                self.failed += 1
                db.close_quietly(conn)
                conn = None
            self._stop.wait(self.every)
        db.close_quietly(conn)

    def start(self) -> WriteProbe:
        self.thread.start()
        return self

    def first_write_after(self, t: float) -> float | None:
        """Seconds from `t` to the end of the first write begun after it that succeeded (None:
        none yet). A write begun before `t` may have been committed before it."""
        later = [ended for began, ended in self.ok if began > t]
        return round(later[0] - t, 2) if later else None

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)


class ApiLoad:
    """GETs `path` on the API at `base` with an API key, `rate` per second, from a thread;
    counts the requests and those that failed (any status but 200, or no answer)."""

    def __init__(self, base: str, path: str, key: str, rate: float = 10.0) -> None:
        self.base, self.path, self.key, self.rate = base, path, key, rate
        self.requests = 0
        self.slowest = 0.0  # seconds, the longest request (one waiting for the new leader)
        self.failures: list[tuple[float, str]] = []  # (monotonic time, what)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            req = urllib.request.Request(self.base + self.path,
                                         headers={"Authorization": f"Apikey {self.key}"})
            self.requests += 1
            began = time.monotonic()
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    resp.read()
            except urllib.error.HTTPError as exc:
                self.failures.append((time.monotonic(), f"HTTP {exc.code}"))
            except OSError as exc:
                self.failures.append((time.monotonic(), type(exc).__name__))
            self.slowest = max(self.slowest, time.monotonic() - began)
            self._stop.wait(1 / self.rate)

    def start(self) -> ApiLoad:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(40)
