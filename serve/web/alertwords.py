"""Alert rules and events in words for the dashboard's pages; pure (no I/O).

The API speaks in codes ("tair", "<", 900, canonical units); a grower reads "Air temperature
below 0 °C for 15 min". Names, units and descriptions come from the column registry
(shared/columns.py) through serve/web/charts.py, conversions from shared/units.py: nothing here
is typed twice. The rule templates growers ask for (frost, heat stress, ...) live here too, as
API bodies the rules form starts from.
"""

from __future__ import annotations

from typing import Any

from serve.web.charts import UNIT_TEXT, label
from shared import alertrules, units
from shared.columns import TABLES, Column

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


def column_choices() -> dict[str, list[dict[str, Any]]]:
    """Per table a rule may watch, its numeric columns as the form offers them: name, label
    (registry description without the stored unit), unit parameter, fixed unit."""
    return {t: [{"name": c.name, "label": label(c), "param": param_of(c),
                 "unit": None if param_of(c) else c.unit, "description": c.description}
                for c in TABLES[t].columns if c.is_numeric and c.name != "time"]
            for t in RULE_TABLES}


def _rule_column(record: dict[str, Any]) -> Column | None:
    if record.get("kind") != "threshold":
        return None
    try:
        return TABLES[record["table"]].column(record["column"])
    except (KeyError, ValueError):
        return None


def rule_unit(record: dict[str, Any]) -> str:
    """The unit a rule's thresholds read in (°F for a rule written with temp=f)."""
    col = _rule_column(record)
    if col is not None:
        return unit_text(col, record.get("units"))
    return BUILTIN_WORDS.get(record.get("kind", ""), ("", ""))[1]


def watches(record: dict[str, Any]) -> str:
    """What a rule watches: "Air temperature (each 5-minute reading)" or the built-in."""
    col = _rule_column(record)
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


def rule_view(record: dict[str, Any], location_names: dict[str, str]) -> dict[str, Any]:
    """A rule as the rules table shows it."""
    return {**record, "watches": watches(record), "where": scope_words(record, location_names),
            "fires_words": condition_words(record),
            "clears_words": condition_words(record, clear=True),
            "repeat_words": duration(record.get("repeat_interval"))}


def form_of(record: dict[str, Any]) -> dict[str, str]:
    """The rules form's fields holding `record` (to edit or duplicate it)."""
    scope = record.get("scope") or {}
    col = _rule_column(record)
    param = param_of(col) if col is not None else None
    unit = (record.get("units") or {}).get(param, units.DEFAULTS[param]) if param else ""
    form = {"name": record["name"], "kind": record["kind"], "table": record.get("table") or "",
            "column": record.get("column") or "",
            "scope": "device" if scope.get("device") else
            ("location" if scope.get("location") else "organisation"),
            "device": scope.get("device", ""), "location": scope.get("location", ""),
            "op": record["condition"]["op"],
            "threshold": number(record["condition"]["threshold"], 6),
            "unit": unit, "for_minutes": number((record.get("for") or 0) / 60, 4),
            "clear_for_minutes": number((record.get("clear_for") or 0) / 60, 4),
            "repeat_minutes": number(record["repeat_interval"] / 60, 4)
            if record.get("repeat_interval") else ""}
    clear = record.get("clear") or {}
    if clear:
        form.update(clear_op=clear["op"], clear_threshold=number(clear["threshold"], 6))
    return form


# ---- templates -----------------------------------------------------------------------------

# What growers ask for, as the rules form's fields (thresholds in the units named by `unit`).
# Each is a valid rule once a device or location is chosen (tests/web/test_alert_rules_pages.py
# creates every one through the API); the grower adjusts the numbers.
TEMPLATES: dict[str, dict[str, Any]] = {
    "frost": {"title": "Frost", "hint": "air temperature below 0 °C for 15 minutes; clears at "
              "1 °C", "form": {"name": "Frost", "kind": "threshold", "table": "calibrated",
                               "column": "tair", "op": "<", "threshold": "0", "unit": "c",
                               "for_minutes": "15", "clear_op": ">=", "clear_threshold": "1"}},
    "heat": {"title": "Heat stress", "hint": "hourly mean air temperature above 35 °C; clears "
             "at 32 °C", "form": {"name": "Heat stress", "kind": "threshold", "table": "hourly",
                                  "column": "tair", "op": ">", "threshold": "35", "unit": "c",
                                  "for_minutes": "0", "clear_op": "<=",
                                  "clear_threshold": "32"}},
    "rain": {"title": "Heavy rain", "hint": "more than 25 mm of rain in a day",
             "form": {"name": "Heavy rain", "kind": "threshold", "table": "daily",
                      "column": "precip", "op": ">", "threshold": "25", "unit": "mm",
                      "for_minutes": "0", "clear_op": "<=", "clear_threshold": "25"}},
    "wind": {"title": "Too windy to spray", "hint": "wind above 15 km/h for 10 minutes; clears "
             "below 10 km/h", "form": {"name": "Too windy to spray", "kind": "threshold",
                                       "table": "calibrated", "column": "wind_speed", "op": ">",
                                       "threshold": "15", "unit": "kph", "for_minutes": "10",
                                       "clear_op": "<", "clear_threshold": "10"}},
    "silent": {"title": "Device silent", "hint": "no reading for more than 30 minutes",
               "form": {"name": "Device silent", "kind": "silent", "threshold": "6",
                        "for_minutes": "0"}},
    "battery": {"title": "Battery low", "hint": "battery below 20 %; clears at 30 %",
                "form": {"name": "Battery low", "kind": "battery", "threshold": "20",
                         "for_minutes": "0", "clear_op": ">=", "clear_threshold": "30"}},
}


# ---- events --------------------------------------------------------------------------------

def _event_column(event: dict[str, Any]) -> Column | None:
    rule = (event.get("body") or {}).get("rule") or {}
    table = rule.get("table") or "calibrated"
    name = event.get("column")
    if not name or table not in TABLES:
        return None
    try:
        return TABLES[table].column(name)
    except (KeyError, ValueError):
        return None


def event_view(event: dict[str, Any], chosen: dict[str, str],
               people: dict[str, str]) -> dict[str, Any]:
    """An event as the inbox shows it: its value in the user's `chosen` units with the
    column's name, the chart link's parameters, and who acknowledged it (`people`: user id to
    name)."""
    view = dict(event)
    value, col = event.get("value"), _event_column(event)
    rule = (event.get("body") or {}).get("rule") or {}
    view["what"] = label(col) if col is not None else watches(rule) if rule else ""
    view["value_text"] = ""
    if value is not None and event.get("unit") == "min" and rule.get("kind") == "silent":
        view["value_text"] = duration(value * 60)
    elif value is not None and col is not None and param_of(col):
        param = param_of(col)
        assert param is not None
        unit = units.parse_unit(param, chosen.get(param))
        shown = units.convert(value, col, unit)
        view["value_text"] = f"{number(shown, units.decimals(col, unit))} {unit_text(col, chosen)}"
    elif value is not None:
        view["value_text"] = f"{number(value, 2)} {event.get('unit') or ''}".strip()
    view["chart"] = chart_query(event, chosen) if col is not None else None
    by = event.get("acknowledged_by")
    view["acked_by_name"] = people.get(by, "a former member") if by else ""
    return view


def chart_query(event: dict[str, Any], chosen: dict[str, str]) -> dict[str, str] | None:
    """The device page's query showing the event's moment: its table and column, the day of
    `at`, the user's unit for the column, and the rule's threshold in that unit to draw."""
    col, at = _event_column(event), event.get("at")
    rule = (event.get("body") or {}).get("rule") or {}
    if col is None or not at or not event.get("device"):
        return None
    table = rule.get("table") or "calibrated"
    query = {"table": table, "cols": col.name, "span": "1" if table != "daily" else "7",
             "end": at[:10], "at": at[:19] + "Z"}  # the API's stamps are UTC
    param = param_of(col)
    if param:
        query[param] = chosen.get(param) or units.DEFAULTS[param]
    cond = rule.get("condition") or {}
    if isinstance(cond.get("threshold"), int | float):
        threshold = float(cond["threshold"])
        if param:  # the rule's units -> canonical -> the chart's units
            rule_unit_ = units.parse_unit(param, (rule.get("units") or {}).get(param))
            scale, offset = units.factors(col, rule_unit_)
            canonical = (threshold - offset) / scale
            shown = units.convert(canonical, col, units.parse_unit(param, query[param]))
            threshold = shown if shown is not None else threshold
        query["threshold"] = number(threshold, 6)
    return query
