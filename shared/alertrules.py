"""Alert rules (docs/alerts.md): what a rule is, how a request body becomes one, and how it is
shown back; pure (no I/O).

The one home of a rule's validation and unit handling: the API (serve/api/alerts.py), the
operator CLI (`sds alert`) and the evaluator (alerts/) all use this module. Thresholds are
stored in the stored (canonical) unit of their column (shared/columns.py) and written back in
the unit parameters the rule was created with (`temp=f` and the others, shared/units.py).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

from shared import columns, units
from shared.errors import BadRequest

KINDS = ("threshold", "silent", "battery", "quarantine", "depletion")
THRESHOLD_TABLES = ("calibrated", "hourly", "daily")
OPS = ("<", "<=", ">", ">=")
NEGATION = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
BELOW = ("<", "<=")
NAME_MAX = 120
DURATION_MAX = 366 * 86400  # a year and a day: longer pending times are mistakes
# A firing rule's reminders (docs/alerts.md "Repeat interval"): from 5 minutes (the evaluator's
# sweep is 30 s) to a week.
REPEAT_MIN, REPEAT_MAX = 300, 7 * 86400
REPORTING_INTERVAL_MIN = 5  # a device reports every 5 minutes (the calibrated grid)
THRESHOLD_MAX = 1e9  # canonical; beyond it a threshold is a typo (and could overflow a unit)
QUARANTINE_WINDOW_S = 3600  # the `quarantine` kind counts quarantined messages in an hour


@dataclass(frozen=True, slots=True)
class Builtin:
    """A built-in kind: where its value comes from and its fixed comparison."""

    source: str
    column: str
    op: str
    unit: str
    describe: str


BUILTINS = {
    "silent": Builtin("devices", "silent", ">", "min", "silent for more than {n} reporting "
                      "intervals"),
    "battery": Builtin("health", "batt_pct", "<", "%", "battery below {n} %"),
    "quarantine": Builtin("quarantine", "quarantine", ">=", "messages",
                          "{n} or more quarantined messages in an hour"),
    # The root-zone water balance (docs/waterbalance.md): the forecast's days until the
    # depletion reaches RAW; threshold 0 is "depletion beyond RAW", N "in N days or less".
    "depletion": Builtin("water_balance", "days_to_raw", "<=", "days",
                         "root-zone depletion reaches RAW in {n} days or less (0: beyond RAW)"),
}
_FIELDS = ("name", "kind", "table", "column", "scope", "condition", "for", "clear", "clear_for",
           "units", "channels", "active", "repeat_interval")
READ_ONLY = ("id", "unit", "created_at", "updated_at", "org_id", "states")


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule, thresholds canonical. Scope: `device` (a name), `location_id`, or neither
    (every device of the organisation)."""

    name: str
    kind: str
    source: str
    column: str
    op: str
    threshold: float
    clear_op: str
    clear_threshold: float
    for_seconds: int = 0
    clear_for_seconds: int = 0
    device: str | None = None
    location_id: UUID | None = None
    units: dict[str, str] = field(default_factory=dict)
    channels: tuple[UUID, ...] | None = None
    active: bool = True
    repeat_interval: int | None = None  # seconds; a firing state is announced again each
    id: UUID | None = None
    org_id: UUID | None = None

    def fires(self, value: float) -> bool:
        """True when `value` meets the firing condition."""
        return compare(value, self.op, self.threshold)

    def clears(self, value: float) -> bool:
        """True when `value` meets the clear condition."""
        return compare(value, self.clear_op, self.clear_threshold)

    @property
    def scope(self) -> dict[str, Any]:
        """The scope as the API writes it."""
        if self.device is not None:
            return {"device": self.device}
        if self.location_id is not None:
            return {"location": str(self.location_id)}
        return {"organisation": True}


def compare(value: float, op: str, threshold: float) -> bool:
    """`value op threshold` for one of OPS."""
    if op == "<":
        return value < threshold
    if op == "<=":
        return value <= threshold
    if op == ">":
        return value > threshold
    return value >= threshold


def overlap(op: str, threshold: float, clear_op: str, clear_threshold: float) -> bool:
    """True when some value would meet both the firing and the clear condition (no hysteresis
    then: the rule could fire and clear on the same value)."""
    if (op in BELOW) == (clear_op in BELOW):
        return True  # same direction: every far enough value meets both
    low_t, low_op = (threshold, op) if op in BELOW else (clear_threshold, clear_op)
    high_t, high_op = (clear_threshold, clear_op) if op in BELOW else (threshold, op)
    # The sets v < low and v > high meet when high < low, or touch at one value when equal.
    return high_t < low_t or (high_t == low_t and low_op == "<=" and high_op == ">=")


# ---- units ---------------------------------------------------------------------------------

def _column(rule_kind: str, table: str, column: str) -> columns.Column | None:
    if rule_kind != "threshold":
        return None
    return columns.table(table).column(column)


def unit_of(rule: Rule, chosen: dict[str, str] | None = None) -> units.Unit | None:
    """The unit the rule's thresholds are written in (its `units`, else the default)."""
    col = _column(rule.kind, rule.source, rule.column)
    if col is None or col.measure is None:
        return None
    param = units.param_for(col.measure)
    return units.parse_unit(param, (rule.units if chosen is None else chosen).get(param))


def canonical_unit(rule: Rule) -> str | None:
    """The stored unit of the rule's values (what an event's `value` is in)."""
    col = _column(rule.kind, rule.source, rule.column)
    if col is None:
        return BUILTINS[rule.kind].unit
    return col.unit


def to_canonical(rule: Rule, value: float, chosen: dict[str, str] | None = None) -> float:
    """A threshold written by the caller, in the canonical unit."""
    if rule.kind == "silent":
        return float(value) * REPORTING_INTERVAL_MIN
    unit = unit_of(rule, chosen)
    if unit is None:
        return float(value)
    col = _column(rule.kind, rule.source, rule.column)
    assert col is not None
    scale, offset = units.factors(col, unit)
    return (float(value) - offset) / scale


def shown(rule: Rule, value: float) -> float:
    """A canonical value in the rule's own unit, rounded like `/data` rounds it."""
    if rule.kind == "silent":
        return round(value / REPORTING_INTERVAL_MIN, 6)
    col = _column(rule.kind, rule.source, rule.column)
    unit = unit_of(rule)
    if col is None or unit is None:
        return round(value, 6)
    converted = units.convert(value, col, unit)
    assert converted is not None
    return converted


def unit_label(rule: Rule) -> str | None:
    """The unit the rule is shown in (`F`, `mb`, ... or the column's own)."""
    if rule.kind == "silent":
        return "intervals"
    unit = unit_of(rule)
    if unit is not None:
        return unit.label
    return canonical_unit(rule)


# ---- from a request body -----------------------------------------------------------------

class _Errors:
    def __init__(self) -> None:
        self.found: dict[str, list[str]] = {}

    def add(self, name: str, message: str) -> None:
        self.found.setdefault(name, []).append(message)


def _number(raw: Any) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    value = float(raw)
    return value if math.isfinite(value) else None


def _seconds(raw: Any, name: str, errs: _Errors) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw != int(raw) \
            or not 0 <= raw <= DURATION_MAX:
        errs.add(name, f"must be whole seconds from 0 to {DURATION_MAX}")
        return None
    return int(raw)


def _repeat(raw: Any, errs: _Errors) -> int | None:
    """A repeat interval: null (off) or whole seconds from REPEAT_MIN to REPEAT_MAX."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw != int(raw) \
            or not REPEAT_MIN <= raw <= REPEAT_MAX:
        errs.add("repeat_interval", f"must be null or whole seconds from {REPEAT_MIN} to "
                                    f"{REPEAT_MAX}")
        return None
    return int(raw)


def _units(raw: Any, errs: _Errors) -> dict[str, str]:
    if not isinstance(raw, dict):
        errs.add("units", "must be an object of unit parameters, e.g. {\"temp\": \"f\"}")
        return {}
    chosen: dict[str, str] = {}
    for param, code in raw.items():
        if param not in units.UNITS:
            errs.add("units", f"unknown unit parameter {param!r}; valid: "
                     + ", ".join(units.UNIT_PARAMS))
        elif not isinstance(code, str) or code.strip().lower() not in units.UNITS[param]:
            errs.add("units", f"{param}: must be one of: {', '.join(units.UNITS[param])}")
        else:
            chosen[param] = code.strip().lower()
    return chosen


def _condition(raw: Any, name: str, errs: _Errors, fixed_op: str | None
               ) -> tuple[str | None, float | None]:
    if not isinstance(raw, dict):
        errs.add(name, "must be an object {\"op\": \"<\", \"threshold\": number}")
        return None, None
    unknown = sorted(set(raw) - {"op", "threshold"})
    if unknown:
        errs.add(name, f"unknown field(s): {', '.join(map(str, unknown))}")
    op = raw.get("op", fixed_op)
    if fixed_op is not None and op != fixed_op:
        errs.add(name, f"op: this kind always compares with {fixed_op!r}")
        op = None
    elif op not in OPS:
        errs.add(name, f"op: must be one of: {', '.join(OPS)}")
        op = None
    threshold = _number(raw.get("threshold"))
    if threshold is None:
        errs.add(name, "threshold: must be a finite number")
    return op, threshold


def _scope(raw: Any, errs: _Errors) -> tuple[str | None, UUID | None] | None:
    if not isinstance(raw, dict) or len(raw) != 1:
        errs.add("scope", "must be exactly one of {\"device\": name}, {\"location\": id}, "
                 "{\"organisation\": true}")
        return None
    (key, value), = raw.items()
    if key == "device" and isinstance(value, str) and 0 < len(value) <= 64 \
            and "\x00" not in value:
        return value, None
    if key == "location" and isinstance(value, str):
        try:
            return None, UUID(value)
        except ValueError:
            errs.add("scope", "location: must be a location id (uuid)")
            return None
    if key == "organisation" and value is True:
        return None, None
    errs.add("scope", "must be exactly one of {\"device\": name}, {\"location\": id}, "
             "{\"organisation\": true}")
    return None


def _channels(raw: Any, errs: _Errors) -> tuple[UUID, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > 50:
        errs.add("channels", "must be null or a list of at most 50 channel ids")
        return None
    found = []
    for item in raw:
        try:
            found.append(UUID(item) if isinstance(item, str) else None)
        except ValueError:
            found.append(None)
    if None in found:
        errs.add("channels", "every item must be a channel id (uuid)")
        return None
    return tuple(dict.fromkeys(u for u in found if u is not None))


def _target(body: dict[str, Any], base: Rule | None, errs: _Errors) -> tuple[str, str, str]:
    """(kind, source, column) of the body, or of `base` where the body does not say."""
    kind = body.get("kind", base.kind if base else "threshold")
    if kind not in KINDS:
        errs.add("kind", f"must be one of: {', '.join(KINDS)}")
        return "threshold", "", ""
    if kind != "threshold":
        for name in ("table", "column"):
            if name in body:
                errs.add(name, f"not used by kind {kind!r}")
        return kind, BUILTINS[kind].source, BUILTINS[kind].column
    same = base is not None and base.kind == "threshold"
    table = body.get("table", base.source if same and base else None)
    column = body.get("column", base.column if same and base else None)
    if table not in THRESHOLD_TABLES:
        errs.add("table", f"must be one of: {', '.join(THRESHOLD_TABLES)}")
        return kind, "", ""
    numeric = [c.name for c in columns.table(table).columns if c.is_numeric]
    if column not in numeric:
        hint = did_you_mean(table, column)
        errs.add("column", (f"did you mean {' or '.join(repr(h) for h in hint)}? " if hint
                            else "") + f"must be a numeric column of {table}: "
                 + ", ".join(numeric))
        return kind, table, ""
    return kind, table, column


def did_you_mean(table: str, word: Any, most: int = 3) -> list[str]:
    """Numeric columns of `table` a mistyped `word` may mean: close spellings of a name
    ("tiar"), or columns whose registry description holds the word ("temperature": tair,
    tdew, ...), nearest first."""
    if not isinstance(word, str) or not word.strip():
        return []
    wanted = word.strip().lower()
    cols = [c for c in columns.table(table).columns if c.is_numeric]
    close = difflib.get_close_matches(wanted, [c.name for c in cols], n=most, cutoff=0.6)
    described = [c.name for c in cols if len(wanted) >= 3 and wanted in c.description.lower()]
    return list(dict.fromkeys(close + described))[:most]


def parse(body: dict[str, Any], *, base: Rule | None = None,
          query_units: dict[str, str] | None = None) -> Rule:
    """The rule a POST body (or, with `base`, a PATCH body on top of `base`) describes;
    BadRequest naming every rejected field. Thresholds are converted to canonical units with
    the body's `units`, else `query_units`, else (PATCH) the base's, else the defaults."""
    errs = _Errors()
    for sent in body:
        if sent in READ_ONLY:
            errs.add(sent, "read-only field")
        elif sent not in _FIELDS:
            errs.add(sent, "unknown field")
    kind, source, column = _target(body, base, errs)
    name: Any = body.get("name", base.name if base else None)
    if not isinstance(name, str) or not 0 < len(name.strip()) <= NAME_MAX \
            or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        errs.add("name", f"must be 1 to {NAME_MAX} characters without control characters")
    device, location = (base.device, base.location_id) if base else (None, None)
    if "scope" in body or base is None:
        scope = _scope(body.get("scope"), errs)
        if scope is not None:
            device, location = scope
    chosen = dict(base.units) if base else {}
    chosen.update(query_units or {})
    if "units" in body:
        chosen = _units(body["units"], errs)
    fixed = BUILTINS[kind].op if kind in BUILTINS else None
    sent_condition = "condition" in body or base is None or (base and base.kind != kind)
    if sent_condition:
        op, raw_t = _condition(body.get("condition"), "condition", errs, fixed)
    else:
        assert base is not None
        op, raw_t = base.op, shown(base, base.threshold)
    for_s = _seconds(body["for"], "for", errs) if "for" in body else \
        (base.for_seconds if base else 0)
    clear_for = _seconds(body["clear_for"], "clear_for", errs) if "clear_for" in body else \
        (base.clear_for_seconds if base else 0)
    active = body.get("active", base.active if base else True)
    if not isinstance(active, bool):
        errs.add("active", "must be true or false")
    channels = _channels(body["channels"], errs) if "channels" in body else \
        (base.channels if base else None)
    repeat = _repeat(body["repeat_interval"], errs) if "repeat_interval" in body else \
        (base.repeat_interval if base else None)
    clear_op: str | None
    clear_raw: float | None
    if body.get("clear") is not None:
        clear_op, clear_raw = _condition(body["clear"], "clear", errs, None)
    elif "clear" in body or sent_condition or base is None:
        clear_op, clear_raw = (NEGATION[op], raw_t) if op and raw_t is not None else (None, None)
    else:
        assert base is not None
        clear_op, clear_raw = base.clear_op, shown(base, base.clear_threshold)
    if kind == "silent" and raw_t is not None and (raw_t < 1 or raw_t != int(raw_t)):
        errs.add("condition", "threshold: a whole number of reporting intervals, at least 1")
    if kind == "quarantine" and raw_t is not None and (raw_t < 1 or raw_t != int(raw_t)):
        errs.add("condition", "threshold: a whole number of messages, at least 1")
    if errs.found or op is None or raw_t is None or clear_op is None or clear_raw is None:
        raise BadRequest("invalid rule: " + "; ".join(
            f"{k}: {' '.join(v)}" for k, v in sorted(errs.found.items())),
            errors={"json": errs.found})
    rule = Rule(name=name.strip(), kind=kind, source=source, column=column, op=op,
                threshold=0.0, clear_op=clear_op, clear_threshold=0.0,
                for_seconds=for_s or 0, clear_for_seconds=clear_for or 0, device=device,
                location_id=location, units={}, channels=channels, active=active,
                repeat_interval=repeat, id=base.id if base else None,
                org_id=base.org_id if base else None)
    col = _column(kind, source, column)
    kept = {p: c for p, c in chosen.items()
            if col is not None and col.measure is not None and p == units.param_for(col.measure)}
    rule = replace(rule, units=kept, threshold=to_canonical(rule, raw_t, kept),
                   clear_threshold=to_canonical(rule, clear_raw, kept))
    for name, value in (("condition", rule.threshold), ("clear", rule.clear_threshold)):
        if not abs(value) <= THRESHOLD_MAX:  # also NaN; no measured value comes near
            raise BadRequest(f"invalid rule: {name}: threshold out of range",
                             errors={"json": {name: [f"threshold: at most {THRESHOLD_MAX:g} "
                                                     "in size"]}})
    if overlap(rule.op, rule.threshold, rule.clear_op, rule.clear_threshold):
        raise BadRequest("invalid rule: clear: must not overlap the condition (no value may "
                         "meet both)", errors={"json": {"clear": [
                             "must not overlap the condition: for op '<' t use '>=' or '>' "
                             "with a threshold of at least t"]}})
    return rule


# ---- shown back ----------------------------------------------------------------------------

def _duration(seconds: int) -> str:
    if seconds % 3600 == 0 and seconds:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def describe(rule: Rule, *, clear: bool = False) -> str:
    """The condition (or the clear condition) in words, in the rule's units."""
    op, threshold = (rule.clear_op, rule.clear_threshold) if clear else (rule.op, rule.threshold)
    if rule.kind in BUILTINS and not clear:
        return BUILTINS[rule.kind].describe.format(n=_num(shown(rule, threshold)))
    label = unit_label(rule) or ""
    what = rule.column if rule.kind == "threshold" else rule.kind
    text = f"{what} {op} {_num(shown(rule, threshold))}{(' ' + label) if label else ''}"
    held = rule.clear_for_seconds if clear else rule.for_seconds
    return text + (f" for {_duration(held)}" if held else "")


def _num(value: float) -> str:
    return f"{value:g}"


def title(rule: Rule, kind: str, device: str) -> str:
    """One line for humans: "Frost: tair < 0 C for 15 min at dev-1"."""
    if kind == "resolved":
        return f"Resolved: {rule.name}: {describe(rule, clear=True)} at {device}"
    return f"{rule.name}: {describe(rule)} at {device}"


def record(rule: Rule) -> dict[str, Any]:
    """The rule as the API and the CLI show it (thresholds in the rule's units)."""
    return {
        "id": str(rule.id) if rule.id else None,
        "name": rule.name,
        "kind": rule.kind,
        "table": rule.source if rule.kind == "threshold" else None,
        "column": rule.column if rule.kind == "threshold" else None,
        "scope": rule.scope,
        "condition": {"op": rule.op, "threshold": shown(rule, rule.threshold)},
        "for": rule.for_seconds,
        "clear": {"op": rule.clear_op, "threshold": shown(rule, rule.clear_threshold)},
        "clear_for": rule.clear_for_seconds,
        "units": dict(rule.units),
        "channels": [str(c) for c in rule.channels] if rule.channels is not None else None,
        "active": rule.active,
        "repeat_interval": rule.repeat_interval,
        "unit": unit_label(rule),
        "description": describe(rule),
    }
