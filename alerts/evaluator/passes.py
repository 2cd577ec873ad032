"""One evaluation pass: read what is new for some devices (or all), step every watching rule's
state machine, and commit the events, the changed states and the cursors in one transaction.

Sources and their cursors (docs/alerts.md "Evaluation"):
- `calibrated` and `health` (the battery kind): rows newer than the device's cursor, the
  newest reading time applied; never older than SDS_ALERT_MAX_AGE before now.
- `hourly`, `daily` and `water_balance` (the depletion kind): buckets rewritten since the
  table's update_time watermark (migration 0080's sds_sync_watermark, so a rollup
  transaction that commits late is not passed over), not older than the device's newest
  bucket applied (the current bucket is re-evaluated as it is recomputed).
- `devices` (silent) and `quarantine`: the value now, for the devices asked about.

States live in memory while this process is the evaluator and are written when their status
changes; after a failed pass, everything is read again from the database, so memory never
holds what did not commit.

Cursors are written at most every `cursor_every` seconds (the service: CURSOR_EVERY), with
the pass that is due or by `flush` when idle and at a clean stop, not with every pass: they
were an upsert of about one row per reading, the size of the ingest's own writes. A restart
(even SIGKILL) or a new leader then reads again from the stored cursors the readings of the
last seconds, whose transitions already committed with their states: the state machine
ignores a sample older than the newest one its state applied and applies that newest one
again without a second transition (shared/alertmachine.py), and a sample after it but
already evaluated changed nothing that was written (a state is written whenever its status,
`since` or `clearing_since` changes; what `at` and `value` alone do does not decide a later
transition), so the same input gives the same transitions; an event written again keeps its
id (event_id_of) and is stored once. Cursors written later than their states are never
ahead of what committed: the write-ahead log replays commits in order.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from alerts.evaluator import store
from alerts.evaluator.machine import FIRING, OK, State, Transition, advance
from alerts.evaluator.rows import NewEvent, StateChange
from alerts.evaluator.rules import Catalogue
from shared import alertrules
from shared.alertrules import Rule
from shared.config import Settings

log = logging.getLogger(__name__)

READING_SOURCES = ("calibrated", "health")
ROLLUP_SOURCES = ("hourly", "daily", "water_balance")
_RESOLUTION = {"calibrated": timedelta(minutes=5), "health": timedelta(minutes=5),
               "hourly": timedelta(hours=1), "daily": timedelta(days=1),
               "water_balance": timedelta(days=1)}


@dataclass(slots=True)
class Outcome:
    """What one pass did (for logs, metrics and tests)."""

    samples: int = 0
    steps: int = 0
    events: list[NewEvent] = field(default_factory=list)
    # Seconds spent reading and stepping, writing (and checking the lock), committing.
    seconds: dict[str, float] = field(default_factory=dict)


class Evaluator:
    """The evaluator's memory (rules, states, cursors) and its pass."""

    def __init__(self, settings: Settings, *, cursor_every: float = 0.0) -> None:
        self.settings = settings
        # Seconds between writes of the cursors (0: with every pass).
        self.cursor_every = cursor_every
        self.catalogue = Catalogue()
        # (rule id's int, device) -> state: an int hashes in C, a UUID's hash is a Python call
        # (a pass looks states up for every rule of every device it reads).
        self.states: dict[tuple[int, str], State] = {}
        self.cursors: dict[tuple[str, str], datetime] = {}
        # Cursors of committed passes not written yet, and when they were last written.
        self.unsaved: dict[tuple[str, str], datetime] = {}
        self.saved_at = time.monotonic()

    def reload(self, conn: psycopg.Connection) -> None:
        """Read rules, states and cursors again (at start, after a failed pass, when rules
        changed); the states of rules whose condition changed since the last load are
        dropped, so they start again from ok."""
        old = self.catalogue.versions
        with conn.transaction():
            cat = Catalogue.load(conn)
            changed = [rid for rid, version in cat.versions.items()
                       if rid in old and old[rid] != version]
            store.forget_rules(conn, changed)
            self.states = {(rule.int, device): state for (rule, device), state
                           in store.load_states(conn).items()}
            # Cursors not written yet are ahead of the stored ones (cursors only advance).
            self.cursors = store.load_cursors(conn) | self.unsaved
        self.catalogue = cat

    def run(self, conn: psycopg.Connection, devices: set[str] | None, *, rollups: bool,
            guard: Callable[[psycopg.Connection], None] | None = None) -> Outcome:
        """One pass over `devices` (None: every watched device) and, with `rollups`, the
        rollup tables; committed in one transaction (`guard` runs inside it before the
        commit: a lost evaluator lock rolls the pass back). After a failure, memory is
        reloaded and the exception raised."""
        work = _Work(self, conn)
        times = work.outcome.seconds
        started = time.monotonic()
        try:
            with conn.transaction():
                now = _now(conn)
                cat = self.catalogue
                if devices and devices - cat.device_org.keys() - cat.unknown:
                    cat.load_devices(conn)  # devices registered since the last load
                    cat.unknown |= devices - cat.device_org.keys()
                for source in READING_SOURCES:
                    work.readings(source, devices, now)
                if rollups:
                    for source in ROLLUP_SOURCES:
                        work.buckets(source, now)
                work.current("devices", devices, now,
                             lambda d: store.minutes_silent(conn, d))
                work.current("quarantine", devices, now,
                             lambda d: store.quarantined_last_hour(conn, d))
                times["read_step"] = time.monotonic() - started
                work.commit()
                due = self.cursors_due()
                if due:
                    store.save_cursors(conn, self.unsaved | work.cursors)
                if guard is not None:
                    guard(conn)
                times["write"] = time.monotonic() - started - times["read_step"]
            times["commit"] = time.monotonic() - started - times["read_step"] - times["write"]
        except BaseException:
            self.reload_quietly(conn)
            raise
        self.states.update(work.states)
        self.cursors.update(work.cursors)
        if due:
            self.unsaved = {}
            self.saved_at = time.monotonic()
        else:
            self.unsaved.update(work.cursors)
        return work.outcome

    def cursors_due(self) -> bool:
        """Whether the cursors are to be written now (with this pass, or by `flush`)."""
        return time.monotonic() - self.saved_at >= self.cursor_every

    def flush(self, conn: psycopg.Connection,
              guard: Callable[[psycopg.Connection], None] | None = None) -> None:
        """Write the cursors not written yet, in a transaction of their own (`guard` inside:
        a process that lost the lock writes nothing)."""
        if self.unsaved:
            with conn.transaction():
                store.save_cursors(conn, self.unsaved)
                if guard is not None:
                    guard(conn)
            self.unsaved = {}
        self.saved_at = time.monotonic()

    def reload_quietly(self, conn: psycopg.Connection) -> None:
        """Reload after a failure; on a broken connection, empty memory (the next start
        reloads)."""
        try:
            self.reload(conn)
        except psycopg.Error:
            self.states, self.cursors, self.unsaved = {}, {}, {}
            self.catalogue = Catalogue()


# The namespace of event ids (uuid5): an event's id is a function of what it records.
EVENT_NAMESPACE = UUID("5d0c1e0a-24a1-4e8e-9a53-0e2c3a1b7f24")


def event_id_of(rule_id: UUID, version: object, device: str, t: Transition) -> UUID:
    """The id of the event of transition `t`: the same whenever the same rule (at the same
    version) makes the same transition on the same sample. An evaluation written again (its
    first commit lost in a database crash after the deliverer saw it) therefore carries the
    same id, and a delivery of it the same webhook-id."""
    return uuid.uuid5(EVENT_NAMESPACE, f"{rule_id}/{version}/{device}/{t.kind}/{t.at.isoformat()}")


def _now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


class _Work:
    """The changes of one pass, applied to memory only after its commit."""

    def __init__(self, ev: Evaluator, conn: psycopg.Connection) -> None:
        self.ev = ev
        self.conn = conn
        self.cat = ev.catalogue
        self.max_age = timedelta(seconds=ev.settings.alert_max_age)
        self.states: dict[tuple[int, str], State] = {}
        self.dirty: dict[tuple[int, str], StateChange] = {}
        self.cursors: dict[tuple[str, str], datetime] = {}
        # Each rule's record and units, made once a pass: (record, canonical unit, unit label).
        self.records: dict[int, tuple[dict[str, Any], str | None, str | None]] = {}
        self.outcome = Outcome()

    def _state(self, rule: Rule, device: str) -> State:
        assert rule.id is not None
        key = (rule.id.int, device)
        return self.states.get(key) or self.ev.states.get(key) or State()

    def apply(self, rule: Rule, device: str, location: UUID | None,
              samples: list[tuple[datetime, float | None]]) -> None:
        """Step one (rule, device) through samples in time order; queue its events and its
        state change."""
        assert rule.id is not None and rule.org_id is not None
        key = (rule.id.int, device)
        before = self._state(rule, device)
        after, transitions = advance(rule, before, samples)
        self.outcome.steps += len(samples)
        if after is before and not transitions:
            return
        self.states[key] = after
        event_id = None
        for t in transitions:
            event_id = self._event(rule, device, location, t)
        if transitions or (after.status, after.since, after.clearing_since) != \
                (before.status, before.since, before.clearing_since):
            # The firing event's id is kept with the state (None after a resolve: the
            # store keeps the last firing's id).
            fired = event_id if after.status == FIRING else None
            self.dirty[key] = StateChange(rule.id, device, rule.org_id, after, fired)

    def _group(self, source: str,
               rows: Iterator[tuple[str, datetime, UUID | None, dict[str, float | None]]]
               ) -> None:
        """Feed rows (in device, time order) to the rules watching them, one run of rows of
        the same device and location at a time; advance each device's cursor."""
        run: list[tuple[datetime, dict[str, float | None]]] = []
        key: tuple[str, UUID | None] | None = None
        for device, at, location, values in rows:
            self.outcome.samples += 1
            if key is not None and key != (device, location):
                self._feed(source, key, run)
                run = []
            key = (device, location)
            run.append((at, values))
            self.cursors[(source, device)] = at
        if key is not None:
            self._feed(source, key, run)

    def _feed(self, source: str, key: tuple[str, UUID | None],
              run: list[tuple[datetime, dict[str, float | None]]]) -> None:
        device, location = key
        # Locals: this loop runs for every rule of every device a pass reads.
        mine, theirs = self.states.get, self.ev.states.get
        firing, clearing = self.cat.firing, self.cat.clearing
        single = run[0][1] if len(run) == 1 else None  # a live pass: mostly one reading
        for rule in self.cat.rules_for(source, device, location):
            column = rule.column
            rid = rule.id.int  # type: ignore[union-attr]  # loaded rules have ids
            state = mine((rid, device)) or theirs((rid, device))
            # The common cases, made cheap: a rule that is ok stays ok unless some value
            # meets its condition, and a firing rule not clearing stays firing unless some
            # value meets its clear condition; then nothing changes and nothing is written.
            # (The time and value such a state holds are not brought up to date: the cursors
            # order the input, so no older sample can follow.)
            if state is None or state.status == OK:
                compare, threshold = firing[rid]
            elif state.status == FIRING and state.clearing_since is None:
                compare, threshold = clearing[rid]
            else:
                compare = None
            if compare is not None:
                if single is not None:
                    v = single[column]
                    quiet = v is None or not compare(v, threshold)
                else:
                    quiet = not any(v is not None and compare(v, threshold)
                                    for v in (values[column] for _at, values in run))
                if quiet:
                    self.outcome.steps += len(run)
                    continue
            self.apply(rule, device, location, [(at, values[column]) for at, values in run])

    def _event(self, rule: Rule, device: str, location: UUID | None, t: Transition) -> UUID:
        assert rule.id is not None and rule.org_id is not None
        event_id = event_id_of(rule.id, self.cat.versions.get(rule.id), device, t)
        made = self.records.get(rule.id.int)
        if made is None:
            made = self.records[rule.id.int] = (
                alertrules.record(rule) | {"id": str(rule.id)}, alertrules.canonical_unit(rule),
                alertrules.unit_label(rule))
        record, unit, label = made
        self.outcome.events.append(NewEvent(
            id=event_id, org_id=rule.org_id, kind=t.kind, rule_id=rule.id, device=device,
            location_id=rule.location_id, column_name=rule.column, value=t.value,
            unit=unit, at=t.at,
            title=alertrules.title(rule, t.kind, device),
            body={"rule": record, "state": FIRING if t.kind == "firing" else "ok",
                  "device": device,
                  "location": str(location) if location is not None else None,
                  "value_shown": alertrules.shown(rule, t.value),
                  "unit_shown": label,
                  "threshold": rule.threshold if t.kind == "firing" else rule.clear_threshold},
            channels=list(rule.channels) if rule.channels is not None else None))
        return event_id

    def _cursor(self, source: str, device: str, floor: datetime) -> datetime:
        key = (source, device)
        found = self.cursors.get(key) or self.ev.cursors.get(key)
        return max(found, floor) if found is not None else floor

    def readings(self, source: str, devices: set[str] | None, now: datetime) -> None:
        """Rows of `calibrated` or `health` newer than each device's cursor."""
        cols = self.cat.columns(source)
        if not cols:
            return
        watched = self.cat.devices(source)
        chosen = watched if devices is None else [d for d in watched if d in devices]
        floor = now - self.max_age
        since = {d: self._cursor(source, d, floor) for d in chosen}
        self._group(source, store.samples(self.conn, source, cols, since))

    def buckets(self, source: str, now: datetime) -> None:
        """Buckets of `hourly` or `daily` rewritten since the watermark."""
        cols = self.cat.columns(source)
        if not cols:
            return
        watermark = store.sync_watermark(self.conn)  # before the read: see the module doc
        floor = now - self.max_age - _RESOLUTION[source]
        previous = self._cursor(source, "", floor)
        since = {d: self._cursor(source, d, floor) for d in self.cat.devices(source)}
        self._group(source, store.samples(self.conn, source, cols, since, watermark=previous))
        self.cursors[(source, "")] = max(watermark, previous)

    def current(self, source: str, devices: set[str] | None, now: datetime,
                read: Callable[[list[str]], dict[str, float]]) -> None:
        """The built-in kinds measured now (silent, quarantine) for the devices asked."""
        if not self.cat.by_source.get(source):
            return
        watched = self.cat.devices(source)
        chosen = watched if devices is None else [d for d in watched if d in devices]
        if not chosen:
            return
        for device, value in read(chosen).items():
            location = self.cat.device_location.get(device)
            self.outcome.samples += 1
            for rule in self.cat.rules_for(source, device, location):
                self.apply(rule, device, location, [(now, value)])

    def commit(self) -> None:
        """Write the pass's events and changed states (the caller's transaction; the cursors
        go with it when due: Evaluator.run)."""
        store.insert_events(self.conn, self.outcome.events)
        store.save_states(self.conn, self.dirty.values())
