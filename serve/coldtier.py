"""The cold tier's part of one `/data` page: `attach` gives a page its cold rows (a plain
page's from serve.coldread, an aggregated page's from serve.coldagg), and a cold file that
cannot be read (deleted by an operator, its disk gone, truncated or corrupt) answers 503
naming the file and "cold tier unavailable", not a 500 with a traceback.

`reading()` wraps a page's cold read: pyarrow's error is turned into `ColdTierUnavailable`,
after finding which of the page's files is at fault (each is checked: there, then read
whole). The first failure of a file in a process is logged (one line, not a traceback per
request); every refused page is counted in `sds_api_cold_unavailable_total{reason}` (reason
`missing` or `unreadable`). Pages whose window reaches no broken file never open it, so they
keep working.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from uuid import UUID

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from flask import current_app, has_app_context

from serve import aggregation, coldagg, coldread, queries
from serve.metrics import EXTENSION, metrics_of
from shared import coldfiles
from shared.coldstore import open_store
from shared.errors import ColdTierUnavailable

log = logging.getLogger(__name__)

_logged: set[tuple[str, str]] = set()  # (file, reason) already logged by this process
_lock = threading.Lock()


def attach(conn: psycopg.Connection, scan: queries.Scan,
           bucketing: aggregation.Bucketing | None, listing: tuple[datetime, datetime],
           cold_path: str) -> queries.Scan:
    """`scan` with the cold rows its page reads: a plain page's (serve.coldread), or every
    cold reading of an aggregated page's window (`bucketing` over the `listing`'s window)."""
    if bucketing is None:
        with reading(conn, scan.org, queries.bounds(scan), cold_path):
            return coldread.attach(conn, scan, cold_path)
    interval = bucketing.resolve(*listing)
    window = aggregation.reading_window(scan, interval)
    with reading(conn, scan.org, window, cold_path):
        return coldagg.attach(conn, scan, window, aggregation.output_columns(scan.columns),
                              interval.width, interval.local, cold_path)


def latest_time(conn: psycopg.Connection, org: UUID, device: str, cold_path: str,
                ) -> datetime | None:
    """Time of `device`'s newest reading in the cold tier (for a device with none hot: its
    charts' default range ends there). Files newest first; stops once no older file can hold a
    later reading (a device with no cold rows costs a look at every file's row-group
    statistics). A file that cannot be read is skipped (the page still renders)."""
    rows = conn.execute(
        "SELECT path, last_time FROM cold_files WHERE org_id = %s AND state = ANY(%s)"
        " ORDER BY last_time DESC", (org, list(coldfiles.READABLE))).fetchall()
    store, best = open_store(cold_path), None
    for rel, last in rows:
        if best is not None and last <= best:
            break
        try:
            times = store.dataset([rel]).to_table(
                columns=["time"], filter=pc.field("device") == device).column("time")
        except (OSError, pa.ArrowException) as exc:
            log.warning("cold tier: file %s skipped (%s)", rel, exc)
            continue
        found = pc.max(times).as_py() if len(times) else None
        if found is not None and (best is None or found > best):
            best = found
    return best


def diagnose(cold_path: str, rels: list[str]) -> list[tuple[str, str]]:
    """(file, reason) for each of `rels` that is missing or cannot be read whole."""
    store = open_store(cold_path)
    broken = []
    for rel in rels:
        if not store.exists(rel):
            broken.append((rel, "missing"))
            continue
        try:
            store.read(rel)
        except (OSError, pa.ArrowException):
            broken.append((rel, "unreadable"))
    return broken


@contextmanager
def reading(conn: psycopg.Connection, org: UUID, window: tuple[datetime, datetime],
            cold_path: str) -> Iterator[None]:
    """Run a page's cold read of `window`; a file error becomes a 503 naming the file(s)."""
    try:
        yield
    except (OSError, pa.ArrowException) as exc:
        rels = [rel for _id, rel in coldread.files(conn, org, *window)]
        broken = diagnose(cold_path, rels) or [(", ".join(rels) or "(unknown)", "unreadable")]
        for rel, reason in broken:
            _count(reason)
            with _lock:
                first = (rel, reason) not in _logged
                _logged.add((rel, reason))
            if first:
                log.error("cold tier unavailable: file %s is %s (%s: %s)", rel, reason,
                          type(exc).__name__, exc)
        named = "; ".join(f"{rel} ({reason})" for rel, reason in broken)
        raise ColdTierUnavailable(
            f"cold tier unavailable: {named}; the readings of this window are in a cold-tier "
            "file the server cannot read (docs/operations.md \"Cold tier\"); windows that do "
            "not reach it are answered",
            errors={"cold_file": [f"{rel}: {reason}" for rel, reason in broken]}) from None


def _count(reason: str) -> None:
    if has_app_context() and EXTENSION in current_app.extensions:
        metrics_of().cold_unavailable.labels(reason).inc()
