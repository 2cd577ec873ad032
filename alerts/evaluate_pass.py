"""One evaluation pass: read what is new for some devices (or all), step every watching rule's
state machine, and commit the events, the changed states and the cursors in one transaction.

Sources and their cursors (docs/alerts.md "Evaluation"):
- `calibrated` and `health` (the battery kind): rows newer than the device's cursor, the
  newest reading time applied; never older than SDS_ALERT_MAX_AGE before now.
- `hourly` and `daily`: buckets rewritten since the table's update_time watermark (migration
  0080's sds_sync_watermark, so a rollup transaction that commits late is not passed over),
  not older than the device's newest bucket applied (the current bucket is re-evaluated as it
  is recomputed).
- `devices` (silent) and `quarantine`: the value now, for the devices asked about.

States live in memory while this process is the evaluator and are written when their status
changes; after a failed pass, everything is read again from the database, so memory never
holds what did not commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from alerts import evaluate_store as store
from alerts.machine import FIRING, State, Transition, step
from alerts.rules import Catalogue
from shared import alertrules
from shared.alertrules import Rule
from shared.config import Settings

log = logging.getLogger(__name__)

READING_SOURCES = ("calibrated", "health")
ROLLUP_SOURCES = ("hourly", "daily")
_RESOLUTION = {"calibrated": timedelta(minutes=5), "health": timedelta(minutes=5),
               "hourly": timedelta(hours=1), "daily": timedelta(days=1)}


@dataclass(slots=True)
class Outcome:
    """What one pass did (for logs, metrics and tests)."""

    samples: int = 0
    steps: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)


class Evaluator:
    """The evaluator's memory (rules, states, cursors) and its pass."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.catalogue = Catalogue()
        self.states: dict[tuple[UUID, str], State] = {}
        self.cursors: dict[tuple[str, str], datetime] = {}

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
            self.states = store.load_states(conn)
            self.cursors = store.load_cursors(conn)
        self.catalogue = cat

    def run(self, conn: psycopg.Connection, devices: set[str] | None, *, rollups: bool,
            guard: Callable[[psycopg.Connection], None] | None = None) -> Outcome:
        """One pass over `devices` (None: every watched device) and, with `rollups`, the
        rollup tables; committed in one transaction (`guard` runs inside it before the
        commit: a lost evaluator lock rolls the pass back). After a failure, memory is
        reloaded and the exception raised."""
        work = _Work(self, conn)
        try:
            with conn.transaction():
                now = _now(conn)
                unknown = devices - set(self.catalogue.device_org) if devices else set()
                if unknown:
                    self.catalogue.load_devices(conn)  # devices registered since the last load
                for source in READING_SOURCES:
                    work.readings(source, devices, now)
                if rollups:
                    for source in ROLLUP_SOURCES:
                        work.buckets(source, now)
                work.current("devices", devices, now,
                             lambda d: store.minutes_silent(conn, d))
                work.current("quarantine", devices, now,
                             lambda d: store.quarantined_last_hour(conn, d))
                work.commit()
                if guard is not None:
                    guard(conn)
        except BaseException:
            self.reload_quietly(conn)
            raise
        self.states.update(work.states)
        self.cursors.update(work.cursors)
        return work.outcome

    def reload_quietly(self, conn: psycopg.Connection) -> None:
        """Reload after a failure; on a broken connection, empty memory (the next start
        reloads)."""
        try:
            self.reload(conn)
        except psycopg.Error:
            self.states, self.cursors = {}, {}
            self.catalogue = Catalogue()


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
        self.states: dict[tuple[UUID, str], State] = {}
        self.dirty: dict[tuple[UUID, str], tuple[UUID, str, UUID, State, UUID | None]] = {}
        self.cursors: dict[tuple[str, str], datetime] = {}
        self.outcome = Outcome()

    def _state(self, rule: Rule, device: str) -> State:
        assert rule.id is not None
        key = (rule.id, device)
        return self.states.get(key) or self.ev.states.get(key) or State()

    def apply(self, rule: Rule, device: str, location: UUID | None, at: datetime,
              value: float | None) -> None:
        """Step one (rule, device) with one sample; queue its event and state change."""
        assert rule.id is not None and rule.org_id is not None
        key = (rule.id, device)
        before = self._state(rule, device)
        after, transition = step(rule, before, at, value)
        self.outcome.steps += 1
        self.states[key] = after
        if transition is not None or (after.status, after.since, after.clearing_since) != \
                (before.status, before.since, before.clearing_since):
            event_id = self._event(rule, device, location, transition) if transition else None
            self.dirty[key] = (rule.id, device, rule.org_id, after, event_id)

    def _event(self, rule: Rule, device: str, location: UUID | None, t: Transition) -> UUID:
        event_id = uuid.uuid4()
        record = alertrules.record(rule)
        self.outcome.events.append({
            "id": event_id, "org_id": rule.org_id, "kind": t.kind, "rule_id": rule.id,
            "device": device, "location_id": rule.location_id, "column_name": rule.column,
            "value": t.value, "unit": alertrules.canonical_unit(rule), "at": t.at,
            "title": alertrules.title(rule, t.kind, device),
            "body": {"rule": record, "state": FIRING if t.kind == "firing" else "ok",
                     "device": device,
                     "location": str(location) if location is not None else None,
                     "value_shown": alertrules.shown(rule, t.value),
                     "unit_shown": alertrules.unit_label(rule),
                     "threshold": rule.threshold if t.kind == "firing" else rule.clear_threshold},
            "channels": list(rule.channels) if rule.channels is not None else None})
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
        for device, at, location, values in store.samples(self.conn, source, cols, since):
            self.outcome.samples += 1
            for rule in self.cat.rules_for(source, device, location):
                self.apply(rule, device, location, at, values[rule.column])
            self.cursors[(source, device)] = at

    def buckets(self, source: str, now: datetime) -> None:
        """Buckets of `hourly` or `daily` rewritten since the watermark."""
        cols = self.cat.columns(source)
        if not cols:
            return
        watermark = store.sync_watermark(self.conn)  # before the read: see the module doc
        floor = now - self.max_age - _RESOLUTION[source]
        previous = self._cursor(source, "", floor)
        since = {d: self._cursor(source, d, floor) for d in self.cat.devices(source)}
        for device, at, location, values in store.samples(self.conn, source, cols, since,
                                                          watermark=previous):
            self.outcome.samples += 1
            for rule in self.cat.rules_for(source, device, location):
                self.apply(rule, device, location, at, values[rule.column])
            self.cursors[(source, device)] = at
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
            for rule in self.cat.rules_for(source, device, location):
                self.apply(rule, device, location, now, value)

    def commit(self) -> None:
        """Write the pass's events, changed states and cursors (the caller's transaction)."""
        store.insert_events(self.conn, self.outcome.events)
        store.save_states(self.conn, self.dirty.values())
        store.save_cursors(self.conn, self.cursors)
