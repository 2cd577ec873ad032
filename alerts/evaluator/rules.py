"""The evaluator's view of the rules: every active rule of every organisation, and which rules
watch which device (scope: one device, one location, or every device of the organisation).

Loaded at start, again when the API announces a change (NOTIFY `sds_alert_rules`) and on each
sweep; the rule model itself (validation, units, titles) is shared/alertrules.py.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

import psycopg

from shared import alertstore
from shared.alertrules import Rule

_RULES_SQL = (f"SELECT {alertstore.COLUMNS}{alertstore.FROM}"
              " WHERE r.active AND (r.device_id IS NULL OR d.id IS NOT NULL)"
              " ORDER BY r.created_at, r.id")
COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
# Each device's organisation and the location it stands at now (for the kinds whose values
# carry no location: silent and quarantine).
_DEVICES_SQL = """
SELECT d.name, d.org_id,
       (SELECT dp.location_id FROM deployments dp
        WHERE dp.device_id = d.id AND dp.during @> now() LIMIT 1)
FROM devices d
"""


@dataclass(slots=True)
class Catalogue:
    """Active rules by source table, and the devices they may watch."""

    rules: dict[UUID, Rule] = field(default_factory=dict)
    versions: dict[UUID, object] = field(default_factory=dict)  # rule id -> updated_at
    # rule id's int -> (comparison, threshold) of its firing condition, for the evaluator's
    # loop (keyed by the int: a UUID's hash is a Python call, an int's is not)
    firing: dict[int, tuple[Callable[[float, float], bool], float]] = field(
        default_factory=dict)
    # rule id's int -> (comparison, threshold) of its clear condition
    clearing: dict[int, tuple[Callable[[float, float], bool], float]] = field(
        default_factory=dict)
    by_source: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))
    device_org: dict[str, UUID] = field(default_factory=dict)
    device_location: dict[str, UUID | None] = field(default_factory=dict)
    # (source, device, location id's int): a UUID's hash is a Python call, an int's is not
    _watching: dict[tuple[str, str, int | None], list[Rule]] = field(default_factory=dict)
    # Device names heard of (in NOTIFYs) but not registered when the devices were last read:
    # not read again for them before the next sweep's reload.
    unknown: set[str] = field(default_factory=set)

    @classmethod
    def load(cls, conn: psycopg.Connection) -> Catalogue:
        """Every active rule and every device, read now."""
        cat = cls()
        for row in conn.execute(_RULES_SQL):
            rule, _created, updated = alertstore.rule_of(row)
            assert rule.id is not None
            cat.rules[rule.id] = rule
            cat.versions[rule.id] = updated
            cat.firing[rule.id.int] = (COMPARISONS[rule.op], rule.threshold)
            cat.clearing[rule.id.int] = (COMPARISONS[rule.clear_op], rule.clear_threshold)
            cat.by_source[rule.source].append(rule)
        cat.load_devices(conn)
        return cat

    def load_devices(self, conn: psycopg.Connection) -> None:
        """Refresh the devices' organisations and current locations."""
        self.device_org.clear()
        self.device_location.clear()
        self._watching.clear()
        for name, org, location in conn.execute(_DEVICES_SQL):
            self.device_org[name] = org
            self.device_location[name] = location

    def columns(self, source: str) -> list[str]:
        """The columns of `source` that some rule reads, in a stable order."""
        return sorted({r.column for r in self.by_source.get(source, ())})

    def watches(self, rule: Rule, device: str, location: UUID | None) -> bool:
        """True when `rule` applies to a value of `device` measured at `location`."""
        if self.device_org.get(device) != rule.org_id:
            return False  # another organisation's device (or an unknown one)
        if rule.device is not None:
            return rule.device == device
        if rule.location_id is not None:
            return location == rule.location_id
        return True

    def rules_for(self, source: str, device: str, location: UUID | None) -> list[Rule]:
        """The rules of `source` that watch this device's value at `location` (remembered
        until the devices are read again)."""
        key = (source, device, None if location is None else location.int)
        found = self._watching.get(key)
        if found is None:
            found = self._watching[key] = [r for r in self.by_source.get(source, ())
                                           if self.watches(r, device, location)]
        return found

    def devices(self, source: str) -> list[str]:
        """Every device some rule of `source` may watch (for sweeps), sorted."""
        orgs = {r.org_id for r in self.by_source.get(source, ())}
        return sorted(d for d, org in self.device_org.items() if org in orgs)
