"""Alert rules and events in words, for people: the dashboard's pages (serve/web/alertwords.py),
emails and chat messages (alerts/delivery/). Pure (no I/O).

The API speaks in codes ("tair", "<", 900, canonical units); a grower reads "Air temperature
below 0 °C for 15 min". Names and descriptions come from the column registry
(shared/columns.py), conversions from shared/units.py; the units' symbols are here, once.
"""

from __future__ import annotations

import re
from typing import Any

from shared import alertrules, units
from shared.columns import TABLES, Column

# How units read on axes, in tables and in messages (the API's codes are the X-Units labels).
UNIT_TEXT = {
    "temp": {"c": "°C", "f": "°F"},
    "pres": {"mb": "mb", "kp": "kPa"},
    "size": {"mm": "mm", "in": "in"},
    "ratio": {"pct": "%", "dec": "fraction"},
    "speed": {"mps": "m/s", "kph": "km/h", "mph": "mph"},
}

# A stored unit at the end of a registry description: "Air temperature, maximum (C)". A label
# puts the unit chosen there instead.
_STORED_UNIT = re.compile(r"\s*\([^()]*\)$")


def label(col: Column) -> str:
    """What a chart or a message calls a column: its registry description without the stored
    unit."""
    return _STORED_UNIT.sub("", col.description)


RULE_TABLES = alertrules.THRESHOLD_TABLES
OP_WORDS = {"<": "below", "<=": "at or below", ">": "above", ">=": "at or above"}
TABLE_WORDS = {"calibrated": "each 5-minute reading", "hourly": "each hour (mean, total, ...)",
               "daily": "each day (mean, total, ...)"}
# Built-in kinds: what their threshold counts, in words and unit.
BUILTIN_WORDS = {"silent": ("No reading for", "min"), "battery": ("Battery", "%"),
                 "quarantine": ("Quarantined messages in an hour", ""),
                 "depletion": ("Days until the root zone reaches RAW", "days")}


def duration(seconds: float | int | None) -> str:
    """A duration for people: "45 s", "15 min", "2 h", "1 h 30 min", "3 days"."""
    if seconds is None:
        return ""
    s = max(0, round(float(seconds)))
    if s < 60:
        return f"{s} s"
    minutes = round(s / 60)
    if minutes < 60:
        return f"{minutes} min"
    if minutes % 1440 == 0:
        days = minutes // 1440
        return f"{days} day{'' if days == 1 else 's'}"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h" + (f" {rest} min" if rest else "")


def number(value: float | None, decimals: int = 2) -> str:
    """A value without trailing zeros: 32, 0.5, -1.25."""
    if value is None:
        return ""
    text = f"{value:.{max(decimals, 0)}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def param_of(col: Column) -> str | None:
    """The unit parameter that converts `col` (temp, pres, ...), None for a fixed unit."""
    return units.param_for(col.measure) if col.measure is not None else None


def unit_text(col: Column, chosen: dict[str, str] | None) -> str:
    """How the unit of `col` reads in the `chosen` unit codes (°F, km/h, %, W/m2)."""
    param = param_of(col)
    if param is None:
        return col.unit or ""
    code = (chosen or {}).get(param) or units.DEFAULTS[param]
    return UNIT_TEXT[param].get(code, UNIT_TEXT[param][units.DEFAULTS[param]])


def rule_column(record: dict[str, Any]) -> Column | None:
    if record.get("kind") != "threshold":
        return None
    try:
        return TABLES[record["table"]].column(record["column"])
    except (KeyError, ValueError):
        return None


def rule_unit(record: dict[str, Any]) -> str:
    """The unit a rule's thresholds read in (°F for a rule written with temp=f)."""
    col = rule_column(record)
    if col is not None:
        return unit_text(col, record.get("units"))
    return BUILTIN_WORDS.get(record.get("kind", ""), ("", ""))[1]


def watches(record: dict[str, Any]) -> str:
    """What a rule watches: "Air temperature (each 5-minute reading)" or the built-in."""
    col = rule_column(record)
    if col is not None:
        return f"{label(col)} ({TABLE_WORDS.get(record['table'], record['table'])})"
    return {"silent": "Device silent", "battery": "Battery low",
            "quarantine": "Bad data (quarantine)", "depletion": "Root-zone depletion"
            }.get(record.get("kind", ""), str(record.get("kind")))


def _threshold(record: dict[str, Any], value: float) -> str:
    if record.get("kind") == "silent":  # reporting intervals of 5 minutes
        return duration(value * alertrules.REPORTING_INTERVAL_MIN * 60)
    unit = rule_unit(record)
    return number(value, 4) + (" " + unit if unit else "")


def condition_words(record: dict[str, Any], *, clear: bool = False) -> str:
    """A rule's firing (or clear) condition in words, with values and hold time:
    "below 0 °C for 15 min", "at or above 1 °C"."""
    cond = record["clear" if clear else "condition"] or {}
    held = record.get("clear_for" if clear else "for") or 0
    if record.get("kind") == "silent":
        text = ("a reading within " if clear else "no reading for more than ") \
            + _threshold(record, cond["threshold"])
    else:
        text = f"{OP_WORDS.get(cond.get('op', ''), cond.get('op', ''))} " \
            f"{_threshold(record, cond['threshold'])}"
    return text + (f" for {duration(held)}" if held else "")


def scope_words(record: dict[str, Any], location_names: dict[str, str]) -> str:
    """Where a rule looks: "device A1", "location North field", "every device"."""
    scope = record.get("scope") or {}
    if scope.get("device"):
        return f"device {scope['device']}"
    if scope.get("location"):
        return f"location {location_names.get(scope['location'], scope['location'])}"
    return "every device"


# ---- events, as messages say them ---------------------------------------------------------

_PREFIXES = {"resolved": "Resolved: "}


def event_column(event: dict[str, Any]) -> Column | None:
    """The registry column of an event's value (its rule's table), None without one."""
    rule = (event.get("body") or {}).get("rule") or {}
    table = rule.get("table") or "calibrated"
    name = event.get("column") or event.get("column_name")
    if not name or table not in TABLES:
        return None
    try:
        return TABLES[table].column(name)
    except (KeyError, ValueError):
        return None


def value_words(event: dict[str, Any], chosen: dict[str, str] | None) -> tuple[str, str]:
    """(what, value) of an event in the `chosen` unit codes (defaults: canonical): ("Air
    temperature", "28.4 °F"), a silent device's ("Device silent", "15 min"); empty strings
    when it has no value."""
    value, col = event.get("value"), event_column(event)
    rule = (event.get("body") or {}).get("rule") or {}
    what = label(col) if col is not None else watches(rule) if rule else ""
    if value is None:
        return what, ""
    if event.get("unit") == "min" and rule.get("kind") == "silent":
        return what, duration(value * 60)
    if col is not None and param_of(col):
        param = param_of(col)
        assert param is not None
        unit = units.parse_unit(param, (chosen or {}).get(param))
        shown = units.convert(value, col, unit)
        return what, f"{number(shown, units.decimals(col, unit))} {unit_text(col, chosen)}"
    return what, f"{number(value, 2)} {event.get('unit') or ''}".strip()


def event_title(event: dict[str, Any]) -> str:
    """An event's title in words, in its rule's own units (those its thresholds were written
    in): "Frost: Air temperature below 32 °F for 15 min at dev-1", "Resolved: Frost: ...",
    "Still firing: ..." for a repeat. An event without a rule (a test, a disabled channel, a
    digest) or whose rule cannot be read keeps its stored title."""
    body = event.get("body") or {}
    rule = body.get("rule") if isinstance(body, dict) else None
    kind = event.get("kind")
    if not isinstance(rule, dict) or kind not in ("firing", "resolved") or not rule.get("name"):
        return str(event.get("title") or "")
    try:
        said = condition_words(rule, clear=kind == "resolved")
    except (KeyError, TypeError, ValueError):
        return str(event.get("title") or "")
    col = rule_column(rule)
    what = label(col) if col is not None else BUILTIN_WORDS.get(rule.get("kind", ""), ("",))[0]
    if rule.get("kind") == "silent":  # "no reading for more than 30 min" says it already
        what = ""
    where = f" at {event['device']}" if event.get("device") else ""
    again = "Still firing: " if body.get("repeat") else ""
    return (f"{again}{_PREFIXES.get(kind, '')}{rule['name']}: "
            f"{(what + ' ') if what else ''}{said}{where}")


def event_lines(event: dict[str, Any]) -> list[str]:
    """The facts of an event for a message, one "Label: value" a line: the device, the value
    with its column's name in the rule's units, the time (UTC)."""
    rule = (event.get("body") or {}).get("rule") or {}
    out = []
    if event.get("device"):
        out.append(f"Device: {event['device']}")
    what, value = value_words(event, rule.get("units") if isinstance(rule, dict) else None)
    if value:
        out.append(f"{what or 'Value'}: {value}")
    at = event.get("at")
    if at:
        text = at if isinstance(at, str) else at.isoformat()
        out.append(f"At: {text[:16].replace('T', ' ')} UTC")
    return out
