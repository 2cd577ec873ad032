"""Alert rules and events in words for the dashboard's pages; pure (no I/O).

The API speaks in codes ("tair", "<", 900, canonical units); a grower reads "Air temperature
below 0 °C for 15 min". The words of rules and events are made in shared/rulewords.py (which
the deliverer's messages use too), from the column registry and shared/units.py: nothing here
is typed twice. The rule templates growers ask for (frost, heat stress, ...) live here too, as
API bodies the rules form starts from.
"""

from __future__ import annotations

from typing import Any

from shared import units
from shared.columns import TABLES
from shared.rulewords import (
    RULE_TABLES,
    condition_words,
    duration,
    event_column,
    label,
    number,
    param_of,
    rule_column,
    rule_unit,
    scope_words,
    value_words,
    watches,
)

# The words the pages take from here (shared/rulewords.py is where they are made).
__all__ = ["TEMPLATES", "chart_query", "column_choices", "duration", "event_view", "form_of",
           "rule_unit", "rule_view"]


def column_choices() -> dict[str, list[dict[str, Any]]]:
    """Per table a rule may watch, its numeric columns as the form offers them: name, label
    (registry description without the stored unit), unit parameter, fixed unit."""
    return {t: [{"name": c.name, "label": label(c), "param": param_of(c),
                 "unit": None if param_of(c) else c.unit, "description": c.description}
                for c in TABLES[t].columns if c.is_numeric and c.name != "time"]
            for t in RULE_TABLES}


def rule_view(record: dict[str, Any], location_names: dict[str, str]) -> dict[str, Any]:
    """A rule as the rules table shows it."""
    return {**record, "watches": watches(record), "where": scope_words(record, location_names),
            "fires_words": condition_words(record),
            "clears_words": condition_words(record, clear=True),
            "repeat_words": duration(record.get("repeat_interval"))}


def form_of(record: dict[str, Any]) -> dict[str, str]:
    """The rules form's fields holding `record` (to edit or duplicate it)."""
    scope = record.get("scope") or {}
    col = rule_column(record)
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

def event_view(event: dict[str, Any], chosen: dict[str, str],
               people: dict[str, str]) -> dict[str, Any]:
    """An event as the inbox shows it: its value in the user's `chosen` units with the
    column's name, the chart link's parameters, and who acknowledged it (`people`: user id to
    name)."""
    view = dict(event)
    col = event_column(event)
    view["what"], view["value_text"] = value_words(event, chosen)
    view["chart"] = chart_query(event, chosen) if col is not None else None
    by = event.get("acknowledged_by")
    view["acked_by_name"] = people.get(by, "a former member") if by else ""
    return view


def chart_query(event: dict[str, Any], chosen: dict[str, str]) -> dict[str, str] | None:
    """The device page's query showing the event's moment: its table and column, the day of
    `at`, the user's unit for the column, and the rule's threshold in that unit to draw."""
    col, at = event_column(event), event.get("at")
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
