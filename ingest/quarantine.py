"""The quarantine: the write of rejected messages and readings (`write`, from the ingester's
batch), the ingester's hourly retention, and the purge and statistics behind the operator's
`sds quarantine purge|stats` (admin/quarantine.py).

Retention (SDS_QUARANTINE_RETENTION_DAYS) runs in the leading ingester through the database
function `sds_quarantine_purge` (migration 0063): the ingester's role may only insert into
quarantine, and the function deletes by age alone, never rows younger than a day, in short
transactions. Operators purge as the database owner, with filters and without those limits.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from ingest.handler import Message
from ingest.payload import SUMMARISED, Rejection
from shared import db
from shared.config import Settings

log = logging.getLogger(__name__)

RETENTION_EVERY = 3600.0  # seconds between retention passes of the ingester
RETENTION_FIRST = 60.0  # first pass this long after the ingester starts leading
CHUNK = 10_000  # rows per delete transaction


def retention_pass(conn: psycopg.Connection, keep_days: int) -> int:
    """Delete quarantine rows older than `keep_days` (>= 1) in chunks; the number deleted.
    `conn` is in autocommit mode, so each chunk is its own short transaction."""
    total = 0
    while True:
        row = conn.execute("SELECT sds_quarantine_purge(%s, %s)", (keep_days, CHUNK)).fetchone()
        n = int(row[0]) if row else 0
        total += n
        if n < CHUNK:
            return total


def purge(conn: psycopg.Connection, *, before: datetime, device: str | None = None,
          reason: str | None = None, dry_run: bool = False) -> int:
    """Delete (or with `dry_run` count) quarantine rows received before `before`, optionally of
    one device and/or reason; committed chunk by chunk (`conn` in autocommit mode)."""
    where = "received_at < %(before)s"
    if device is not None:
        where += " AND device = %(device)s"
    if reason is not None:
        where += " AND reason = %(reason)s"
    params = {"before": before, "device": device, "reason": reason, "chunk": CHUNK}
    if dry_run:
        row = conn.execute(f"SELECT count(*) FROM quarantine WHERE {where}",  # nosec B608  fixed fragments
                           params).fetchone()
        return int(row[0]) if row else 0
    total = 0
    while True:
        cur = conn.execute(
            f"DELETE FROM quarantine WHERE id IN (SELECT id FROM quarantine WHERE {where}"  # nosec B608  fixed fragments
            " ORDER BY received_at LIMIT %(chunk)s)", params)
        total += cur.rowcount
        if cur.rowcount < CHUNK:
            return total


def stats(conn: psycopg.Connection) -> list[tuple[str | None, str, int, int, datetime,
                                                   datetime]]:
    """(device, reason, rows, payload+detail bytes, oldest, newest), largest first."""
    return conn.execute(
        "SELECT device, reason, count(*), sum(octet_length(payload) + octet_length(detail)),"
        " min(received_at), max(received_at) FROM quarantine GROUP BY device, reason"
        " ORDER BY 4 DESC, 3 DESC").fetchall()


class Retention:
    """The ingester's hourly retention pass, in a daemon thread, while it leads."""

    def __init__(self, settings: Settings, *, stopped: threading.Event | None = None,
                 on_deleted: Callable[[int], None] | None = None) -> None:
        self.settings = settings
        self._stopped = stopped or threading.Event()
        self._on_deleted = on_deleted
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (nothing when retention is off)."""
        if self.settings.quarantine_retention_days <= 0:
            return
        self._thread = threading.Thread(target=self._loop, name="quarantine-retention",
                                        daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the thread after `stopped` was set."""
        if self._thread is not None:
            self._thread.join(timeout)

    def run_once(self) -> int:
        """One pass on a connection of its own; the number of rows deleted."""
        conn = db.connect(self.settings, name="sds-ingest-retention", autocommit=True,
                          role=db.ROLE_INGEST, connect_timeout=10,
                          server={"statement_timeout": 60000})
        try:
            return retention_pass(conn, self.settings.quarantine_retention_days)
        finally:
            db.close_quietly(conn)

    def _loop(self) -> None:
        wait = RETENTION_FIRST
        while not self._stopped.wait(wait):
            wait = RETENTION_EVERY
            try:
                deleted = self.run_once()
            except psycopg.Error as exc:  # the next pass tries again; ingest goes on
                log.warning("quarantine retention failed (retrying in an hour): %s",
                            str(exc).strip() or type(exc).__name__)
                continue
            if deleted:
                log.info("quarantine retention: deleted %d rows older than %d days", deleted,
                         self.settings.quarantine_retention_days)
            if self._on_deleted is not None:
                self._on_deleted(deleted)


# The metric label of quarantine rows whose device is not registered (or not known at all):
# one label for all of them, so a flood of made-up names cannot grow the label set. Not a
# possible device name (parentheses), so it never collides with one.
UNREGISTERED = "(unregistered)"


@dataclass(slots=True)
class Counts:
    """What a quarantine write did, for metrics and logs."""

    rejections: Counter[str] = field(default_factory=Counter)  # by reason
    rows: Counter[str] = field(default_factory=Counter)  # by device label
    bytes: Counter[str] = field(default_factory=Counter)  # by device label
    requarantine_skipped: int = 0  # rows of DUP redeliveries already in quarantine


# ---- the quarantine write ---------------------------------------------------------------------

def write(
    conn: psycopg.Connection, rows: list[tuple[Message, Rejection]], messages: list[Message],
    known: set[str],
) -> Counts:
    """COPY the rejections to `quarantine`, plus one summary row per message of `messages`
    whose rejections went past the cap; `known` are the registered devices among them.

    A row carries the raw message, except the second and later rejected elements of an array:
    they carry their own element, so a message costs about its size once plus its rejected
    elements, however many rows it makes.
    """
    carried: set[int] = set()  # id() of messages whose whole payload is already on a row
    done = Counts()
    quarantined, rows_by, bytes_by = done.rejections, done.rows, done.bytes
    digests = {id(m): m.digest() for m, _ in rows} | {
        id(m): m.digest() for m in messages if m.decoded.summarised}
    # A redelivery of a message whose rows committed before a crash (its ack never went out):
    # quarantined once already, so not again.
    asked = [digests[id(m)] for m in {id(m): m for m, _ in rows}.values() if m.dup]
    asked += [digests[id(m)] for m in messages if m.dup and m.decoded.summarised]
    seen = {bytes(r[0]) for r in conn.execute(
        "SELECT sds_quarantine_seen(%s)", (asked,))} if asked else set()
    if seen:
        done.requarantine_skipped = sum(1 for m, _ in rows if digests[id(m)] in seen)
        rows = [(m, r) for m, r in rows if digests[id(m)] not in seen]
        messages = [m for m in messages if digests.get(id(m)) not in seen]
    with conn.cursor() as cur:
        with cur.copy("COPY quarantine (received_at, topic, device, reason, detail,"
                      " reading_index, payload, message_digest) FROM STDIN") as copy:

            def put(msg: Message, code: str, detail: str, index: int | None,
                    payload: bytes) -> None:
                copy.write_row((msg.received, msg.topic, msg.device, code, detail, index,
                                payload, digests[id(msg)]))
                label = msg.device if msg.device in known else UNREGISTERED
                rows_by[label] += 1
                bytes_by[label] += len(payload) + len(detail)

            for msg, rej in rows:
                payload = msg.payload
                detail = rej.detail
                if rej.index is not None and rej.element is not None:
                    if id(msg) in carried:
                        payload = rej.element
                        detail += (" (payload: this reading only; the whole message is on its"
                                   " first quarantined reading)")
                    else:
                        carried.add(id(msg))
                put(msg, rej.code, detail, rej.index, payload)
                quarantined[rej.code] += 1
            for msg in messages:
                if not msg.decoded.summarised:
                    continue
                counts = msg.decoded.summarised
                total = sum(counts.values())
                by_reason = ", ".join(f"{code} {n}" for code, n in counts.most_common())
                put(msg, SUMMARISED, f"{total} more rejected readings, not stored one row each "
                    f"(SDS_INGEST_QUARANTINE_ROWS_PER_MESSAGE = {len(msg.decoded.rejections)}):"
                    f" {by_reason}; the whole message is on its first quarantined reading",
                    None, b"")
                quarantined.update(counts)
    for (code, device), n in Counter((r.code, m.device) for m, r in rows).items():
        log.warning("quarantined %d from %s: %s", n, device, code)
    for msg in messages:
        if msg.decoded.summarised:
            log.warning("quarantined %d more from %s, summarised in one row: %s",
                        sum(msg.decoded.summarised.values()), msg.device,
                        dict(msg.decoded.summarised))
    return done


def quarantine_messages(
    conn: psycopg.Connection, messages: list[Message], *, code: str, detail: str,
) -> Counts:
    """Quarantine whole messages with one reason (e.g. refused by the database)."""
    names = sorted({m.device for m in messages if m.device})
    known = {r[0] for r in conn.execute(
        "SELECT name FROM devices WHERE name = ANY(%s)", (names,))} if names else set()
    return write(conn, [(m, Rejection(None, code, detail)) for m in messages], [], known)
