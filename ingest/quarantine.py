"""The quarantine: the write of rejected messages and readings (`write`, from the ingester's
batch), the ingester's hourly retention, and the purge and statistics behind the operator's
`sds quarantine purge|stats` (admin/quarantine.py).

Retention (SDS_QUARANTINE_RETENTION_DAYS) runs in the leading ingester through the database
function `sds_quarantine_purge` (migration 0063): the ingester's role may only insert into
quarantine, and the function deletes by age alone, never rows younger than a day, in short
transactions. Operators purge as the database owner, with filters and without those limits.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg

from ingest.handler import Message
from ingest.payload import Rejection
from shared import db
from shared.config import Settings
from shared.quarantinecodes import SUMMARISED

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
            # The budget's bookkeeping goes with the rows it accounts for (migration 0163).
            conn.execute("SELECT sds_quarantine_ledger_purge(%s)", (keep_days,))
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
            break
    if reason is None:
        # Purging a device's rows (or everyone's) gives back the budget of the hours that began
        # before `before` (a partly purged hour included), so a repaired device's bad data is
        # kept again at once; the counts of rows not kept stay in quarantine_unkept.
        if device is None:
            conn.execute("DELETE FROM quarantine_budget WHERE hour < %(before)s", params)
        else:
            conn.execute("DELETE FROM quarantine_budget WHERE hour < %(before)s"
                         " AND device = %(device)s", params)
    return total


def stats(conn: psycopg.Connection) -> list[tuple[str | None, str, int, int, datetime,
                                                   datetime]]:
    """(device, reason, rows, payload+detail bytes, oldest, newest), largest first."""
    return conn.execute(
        "SELECT device, reason, count(*), sum(octet_length(payload) + octet_length(detail)),"
        " min(received_at), max(received_at) FROM quarantine GROUP BY device, reason"
        " ORDER BY 4 DESC, 3 DESC").fetchall()


def unkept_stats(conn: psycopg.Connection) -> list[tuple[str, str, int, int, datetime,
                                                          datetime]]:
    """Rejections not kept over a device's budget: (device, reason, rejections, bytes as
    received, first hour, last hour), most first."""
    return conn.execute(
        "SELECT device, reason, sum(rejections), sum(bytes), min(hour), max(hour)"
        " FROM quarantine_unkept GROUP BY device, reason ORDER BY 3 DESC, 4 DESC").fetchall()


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
    unkept: Counter[str] = field(default_factory=Counter)  # over budget, by device label


# ---- the quarantine write ---------------------------------------------------------------------

# What a quarantine row costs in the budget, so that the budget (a sum of costs) bounds the
# table's growth on disk. A payload over a kilobyte goes to TOAST (the row is toasted past 2 KB),
# stored in chunks of 1,996 bytes, four to an 8 KiB page, each with an index entry: 2,072 bytes
# a chunk, counted uncompressed (junk need not compress). Beyond its payload, detail and topic a
# row takes its tuple header, its other columns and entries in five indexes: ROW_OVERHEAD.
# Measured on the flood of tests/ingest/test_quarantine_budget.py (the figure "junk flood":
# disk growth against the budget spent).
ROW_OVERHEAD = 400
TOAST_INLINE = 1024  # payloads up to this are charged their size (the row stays inline)
TOAST_CHUNK, TOAST_CHUNK_COST = 1996, 2072
DETAIL_MAX = 2000  # characters of a row's detail kept (ours, but it quotes what the device sent)


@dataclass(frozen=True, slots=True)
class Budget:
    """How much of one device's bad input the quarantine keeps (docs/ingest.md "Bounded
    quarantine"). `hourly` 0: no budget; `total` 0: no bound over the window; `window_days` 0:
    the total counts every hour on record."""

    payload_max: int = 4096
    hourly: int = 1024 * 1024
    total: int = 32 * 1024 * 1024
    window_days: int = 30

    @classmethod
    def from_settings(cls, settings: Settings) -> Budget:
        """The budget of a `Settings` object."""
        return cls(payload_max=max(0, settings.ingest_quarantine_payload_max),
                   hourly=max(0, settings.ingest_quarantine_device_hourly_bytes),
                   total=max(0, settings.ingest_quarantine_device_total_bytes),
                   window_days=max(0, settings.quarantine_retention_days))


@dataclass(slots=True)
class _Row:
    """One quarantine row to write (or, over budget, to count)."""

    msg: Message
    code: str
    detail: str
    index: int | None
    payload: bytes  # in full, as received; the row keeps a prefix
    label: str  # the budget's and the metrics' device label
    summarised: Counter[str] | None = None  # a summary row: the rejections it counts


def _hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _cut(detail: str) -> str:
    if len(detail) <= DETAIL_MAX:
        return detail
    return detail[:DETAIL_MAX] + f" ... (detail cut at {DETAIL_MAX} characters)"


def cost(kept_payload: int, detail: str, topic: str) -> int:
    """A row's cost in the budget: what it takes on disk (module comment above)."""
    payload = kept_payload if kept_payload <= TOAST_INLINE else (
        -(-kept_payload // TOAST_CHUNK) * TOAST_CHUNK_COST)
    return (payload + len(detail.encode("utf-8", "surrogateescape"))
            + len(topic.encode("utf-8", "surrogateescape")) + ROW_OVERHEAD)


# Devices whose budget ran out, and the hour: the alarm line is logged once per device and hour.
_alarmed: dict[str, datetime] = {}


def write(
    conn: psycopg.Connection, rows: list[tuple[Message, Rejection]], messages: list[Message],
    known: set[str], budget: Budget | None = None,
) -> Counts:
    """COPY the rejections to `quarantine`, plus one summary row per message of `messages`
    whose rejections went past the cap; `known` are the registered devices among them.

    A row carries the raw message, except the second and later rejected elements of an array:
    they carry their own element, so a message costs about its size once plus its rejected
    elements, however many rows it makes. Only the first `budget.payload_max` bytes of that
    payload are kept, with its size and SHA-256. Rows past the device's budget (per clock hour
    and over the retention window) are not written but counted, by reason, in
    `quarantine_unkept`: they can never block the batch's readings.
    """
    budget = budget or Budget()
    carried: set[int] = set()  # id() of messages whose whole payload is already on a row
    done = Counts()
    quarantined = done.rejections
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

    def label(msg: Message) -> str:
        return msg.device if msg.device in known else UNREGISTERED

    planned: list[_Row] = []
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
        planned.append(_Row(msg, rej.code, _cut(detail), rej.index, payload, label(msg)))
        quarantined[rej.code] += 1
    for msg in messages:
        if not msg.decoded.summarised:
            continue
        counts = msg.decoded.summarised
        total = sum(counts.values())
        by_reason = ", ".join(f"{code} {n}" for code, n in counts.most_common())
        planned.append(_Row(
            msg, SUMMARISED, _cut(
                f"{total} more rejected readings, not stored one row each "
                f"(SDS_INGEST_QUARANTINE_ROWS_PER_MESSAGE = {len(msg.decoded.rejections)}):"
                f" {by_reason}; the whole message is on its first quarantined reading"),
            None, b"", label(msg), counts))
        quarantined.update(counts)
    if not planned:
        return done

    costs = [cost(min(len(r.payload), budget.payload_max), r.detail, r.msg.topic)
             for r in planned]
    keep = _within_budget(conn, planned, costs, budget)
    with conn.cursor() as cur:
        with cur.copy("COPY quarantine (received_at, topic, device, reason, detail,"
                      " reading_index, payload, message_digest, payload_bytes, payload_sha256)"
                      " FROM STDIN") as copy:
            for r, kept in zip(planned, keep, strict=True):
                if not kept:
                    continue
                stored = r.payload[:budget.payload_max]
                copy.write_row((r.msg.received, r.msg.topic, r.msg.device, r.code, r.detail,
                                r.index, stored, digests[id(r.msg)], len(r.payload),
                                hashlib.sha256(r.payload).digest()))
                done.rows[r.label] += 1
                done.bytes[r.label] += len(stored) + len(r.detail)
    unkept: Counter[tuple[str, datetime, str]] = Counter()
    unkept_bytes: Counter[tuple[str, datetime, str]] = Counter()
    for r, kept in zip(planned, keep, strict=True):
        if kept:
            continue
        hour = _hour(r.msg.received)
        for code, n in (r.summarised or Counter({r.code: 1})).items():
            unkept[(r.label, hour, code)] += n
            done.unkept[r.label] += n
        if r.summarised is None:
            unkept_bytes[(r.label, hour, r.code)] += len(r.payload)
    if unkept:
        _count_unkept(conn, unkept, unkept_bytes)
        for (name, hour, _code), _n in sorted(unkept.items()):
            if _alarmed.get(name) != hour:
                _alarmed[name] = hour
                log.error("ALARM: device %s is over its quarantine budget (%d bytes an hour, %d "
                          "in %d days): its rejections are counted in quarantine_unkept, not "
                          "kept, until the hour ends (sds quarantine stats)", name,
                          budget.hourly, budget.total, budget.window_days)
    for (code, device), n in Counter((r.code, r.msg.device) for r, kept in zip(
            planned, keep, strict=True) if kept and r.summarised is None).items():
        log.warning("quarantined %d from %s: %s", n, device, code)
    for r, kept in zip(planned, keep, strict=True):
        if kept and r.summarised is not None:
            log.warning("quarantined %d more from %s, summarised in one row: %s",
                        sum(r.summarised.values()), r.msg.device, dict(r.summarised))
    return done


def _within_budget(conn: psycopg.Connection, planned: list[_Row], costs: list[int],
                   budget: Budget) -> list[bool]:
    """Which of the planned rows fit their device's budget; books the kept ones.

    The (device, hour) rows of `quarantine_budget` are locked in sorted order for the rest of
    the transaction, so concurrent ingester shards never overspend a budget (and never
    deadlock on it). Once a device's row does not fit, none of its later rows of that hour is
    kept either.
    """
    if budget.hourly <= 0:
        return [True] * len(planned)
    keys = sorted({(r.label, _hour(r.msg.received)) for r in planned})
    used = {(d, h): int(b) for d, h, b in conn.execute(
        "INSERT INTO quarantine_budget (device, hour)"
        " SELECT * FROM unnest(%s::text[], %s::timestamptz[])"
        " ON CONFLICT (device, hour) DO UPDATE SET kept_rows = quarantine_budget.kept_rows"
        " RETURNING device, hour, kept_bytes",
        ([k[0] for k in keys], [k[1] for k in keys])).fetchall()}
    labels = sorted({k[0] for k in keys})
    in_all: dict[str, int] = {}
    if budget.total > 0:
        since = min(k[1] for k in keys) - timedelta(days=budget.window_days) \
            if budget.window_days else datetime.min.replace(tzinfo=UTC)
        in_all = {d: int(b) for d, b in conn.execute(
            "SELECT device, sum(kept_bytes) FROM quarantine_budget"
            " WHERE device = ANY(%s) AND hour > %s GROUP BY device", (labels, since))}
    over: set[tuple[str, datetime]] = set()
    booked: Counter[tuple[str, datetime]] = Counter()
    booked_rows: Counter[tuple[str, datetime]] = Counter()
    keep: list[bool] = []
    for r, c in zip(planned, costs, strict=True):
        key = (r.label, _hour(r.msg.received))
        fits = (key not in over and used.get(key, 0) + c <= budget.hourly
                and (budget.total <= 0 or in_all.get(r.label, 0) + c <= budget.total))
        if fits:
            used[key] = used.get(key, 0) + c
            in_all[r.label] = in_all.get(r.label, 0) + c
            booked[key] += c
            booked_rows[key] += 1
        else:
            over.add(key)
        keep.append(fits)
    if booked:
        ks = sorted(booked)
        conn.execute(
            "UPDATE quarantine_budget b SET kept_rows = b.kept_rows + v.n,"
            " kept_bytes = b.kept_bytes + v.bytes"
            " FROM unnest(%s::text[], %s::timestamptz[], %s::bigint[], %s::bigint[])"
            " AS v(device, hour, n, bytes) WHERE b.device = v.device AND b.hour = v.hour",
            ([k[0] for k in ks], [k[1] for k in ks], [booked_rows[k] for k in ks],
             [booked[k] for k in ks]))
    return keep


def _count_unkept(conn: psycopg.Connection, unkept: Counter[tuple[str, datetime, str]],
                  unkept_bytes: Counter[tuple[str, datetime, str]]) -> None:
    """Add rejections that were not kept to `quarantine_unkept` (sorted: no deadlock between
    shards)."""
    ks = sorted(unkept)
    conn.execute(
        "INSERT INTO quarantine_unkept AS u (device, hour, reason, rejections, bytes)"
        " SELECT * FROM unnest(%s::text[], %s::timestamptz[], %s::text[], %s::bigint[],"
        " %s::bigint[])"
        " ON CONFLICT (device, hour, reason) DO UPDATE SET"
        " rejections = u.rejections + EXCLUDED.rejections, bytes = u.bytes + EXCLUDED.bytes",
        ([k[0] for k in ks], [k[1] for k in ks], [k[2] for k in ks], [unkept[k] for k in ks],
         [unkept_bytes[k] for k in ks]))


def quarantine_messages(
    conn: psycopg.Connection, messages: list[Message], *, code: str, detail: str,
    budget: Budget | None = None,
) -> Counts:
    """Quarantine whole messages with one reason (e.g. refused by the database)."""
    names = sorted({m.device for m in messages if m.device})
    known = {r[0] for r in conn.execute(
        "SELECT name FROM devices WHERE name = ANY(%s)", (names,))} if names else set()
    return write(conn, [(m, Rejection(None, code, detail)) for m in messages], [], known, budget)
