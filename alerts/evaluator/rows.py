"""The rows that cross the evaluator's modules, typed (not `dict[str, Any]`): an event to
write (passes -> store, and the service's metrics), a changed state (passes -> store), and a
stored state and cursor (store -> passes, read with psycopg's `class_row`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from alerts.evaluator.machine import State


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An `alert_events` row to insert, its id already chosen (passes.event_id_of)."""

    id: UUID
    org_id: UUID
    kind: str  # firing | resolved
    rule_id: UUID
    device: str
    location_id: UUID | None  # the rule's location scope
    column_name: str
    value: float
    unit: str | None
    at: datetime
    title: str
    body: dict[str, Any]  # the JSON document deliveries carry (docs/alerts.md "Payload")
    channels: list[UUID] | None

    def json(self) -> dict[str, Any]:
        """The row as JSON values (the store inserts rows through jsonb_to_recordset)."""
        return {"id": str(self.id), "org_id": str(self.org_id), "kind": self.kind,
                "rule_id": str(self.rule_id), "device": self.device,
                "location_id": None if self.location_id is None else str(self.location_id),
                "column_name": self.column_name, "value": self.value, "unit": self.unit,
                "at": self.at.isoformat(), "title": self.title, "body": self.body,
                "channels": None if self.channels is None else [str(c) for c in self.channels]}


@dataclass(frozen=True, slots=True)
class StateChange:
    """A (rule, device) state to upsert, with the id of the event that fired it (None: the
    store keeps the last firing's id)."""

    rule_id: UUID
    device: str
    org_id: UUID
    state: State
    event_id: UUID | None


@dataclass(frozen=True, slots=True)
class StoredState:
    """An `alert_states` row as the evaluator reads it back."""

    rule_id: UUID
    device: str
    status: str
    since: datetime | None
    clearing_since: datetime | None
    at: datetime | None
    value: float | None

    def state(self) -> State:
        """The machine's state."""
        return State(self.status, self.since, self.clearing_since, self.at, self.value)


@dataclass(frozen=True, slots=True)
class Cursor:
    """An `alert_cursors` row: how far `source` has been read for `device` ('' : a rollup
    table's watermark)."""

    source: str
    device: str
    at: datetime
