"""Rules from request bodies (shared/alertrules.py): thresholds in any accepted unit are stored
canonical and shown back in the caller's unit; every bad field is named; built-in kinds."""

from __future__ import annotations

import pytest

from shared import alertrules
from shared.errors import BadRequest


def body(**extra: object) -> dict[str, object]:
    return {"name": "Frost", "table": "calibrated", "column": "tair",
            "scope": {"device": "dev-1"}, "condition": {"op": "<", "threshold": 32}} | extra


def test_fahrenheit_threshold_is_stored_in_celsius_and_shown_back_in_fahrenheit() -> None:
    rule = alertrules.parse(body(units={"temp": "f"},
                                 clear={"op": ">=", "threshold": 33.8}))
    assert rule.threshold == pytest.approx(0.0) and rule.clear_threshold == pytest.approx(1.0)
    shown = alertrules.record(rule)
    assert shown["condition"] == {"op": "<", "threshold": 32.0}
    assert shown["clear"]["threshold"] == pytest.approx(33.8)
    assert shown["unit"] == "F" and shown["units"] == {"temp": "f"}


def test_query_units_apply_when_the_body_names_none() -> None:
    rule = alertrules.parse(body(), query_units={"temp": "f"})
    assert rule.threshold == pytest.approx(0.0)


@pytest.mark.parametrize(("table", "column", "units", "sent", "stored"), [
    ("calibrated", "rh", {}, 30, 0.30),  # default ratio unit: percent
    ("calibrated", "rh", {"ratio": "dec"}, 0.3, 0.30),
    ("calibrated", "p", {}, 1013, 101.3),  # default pressure unit: mb
    ("calibrated", "p", {"pres": "kp"}, 101.3, 101.3),
    ("daily", "precip", {"size": "in"}, 1, 25.4),
    ("calibrated", "wind_speed", {"speed": "kph"}, 36, 10.0),
    ("calibrated", "wind_speed", {"speed": "mph"}, 22.369362920544, 10.0),
    ("daily", "gdd", {"temp": "f"}, 18, 10.0),  # a temperature difference: scale only
    ("daily", "crop_water_demand", {}, -5, -5.0),
])
def test_thresholds_are_stored_canonical(table: str, column: str, units: dict[str, str],
                                         sent: float, stored: float) -> None:
    rule = alertrules.parse(body(table=table, column=column, units=units,
                                 condition={"op": ">", "threshold": sent}))
    assert rule.threshold == pytest.approx(stored)
    assert alertrules.record(rule)["condition"]["threshold"] == pytest.approx(sent, rel=1e-3)


def test_default_clear_is_the_negated_condition() -> None:
    rule = alertrules.parse(body(condition={"op": ">", "threshold": 25}, table="daily",
                                 column="precip"))
    assert (rule.clear_op, rule.clear_threshold) == ("<=", 25.0)


def test_every_bad_field_is_named() -> None:
    with pytest.raises(BadRequest) as err:
        alertrules.parse({"name": "", "kind": "threshold", "table": "nope", "scope": {},
                          "condition": {"op": "=", "threshold": "x"}, "for": -1,
                          "units": {"temp": "k"}, "channels": ["not-a-uuid"], "active": "yes",
                          "id": "x", "colour": "red"})
    errors = err.value.errors["json"]  # type: ignore[index]
    assert set(errors) == {"name", "table", "scope", "condition", "for", "units", "channels",
                           "active", "id", "colour"}


def test_a_text_column_or_unknown_column_is_refused() -> None:
    for column in ("wind_heading", "nope", "time"):
        with pytest.raises(BadRequest) as err:
            alertrules.parse(body(table="hourly", column=column))
        assert "column" in err.value.errors["json"]  # type: ignore[index]


def test_overlapping_clear_condition_is_refused() -> None:
    with pytest.raises(BadRequest) as err:
        alertrules.parse(body(units={"temp": "c"}, condition={"op": "<", "threshold": 0},
                              clear={"op": ">=", "threshold": -1}))
    assert "clear" in err.value.errors["json"]  # type: ignore[index]
    with pytest.raises(BadRequest):
        alertrules.parse(body(units={"temp": "c"}, condition={"op": "<=", "threshold": 0},
                              clear={"op": ">=", "threshold": 0}))
    with pytest.raises(BadRequest):
        alertrules.parse(body(units={"temp": "c"}, condition={"op": "<", "threshold": 0},
                              clear={"op": "<", "threshold": 5}))
    ok = alertrules.parse(body(units={"temp": "c"}, condition={"op": "<", "threshold": 0},
                               clear={"op": ">=", "threshold": 0}))
    assert ok.clear_threshold == 0


def test_overlap_is_exact() -> None:
    assert not alertrules.overlap("<", 0, ">=", 0)
    assert not alertrules.overlap("<=", 0, ">", 0)
    assert alertrules.overlap("<=", 0, ">=", 0)
    assert not alertrules.overlap(">", 10, "<=", 10)
    assert alertrules.overlap(">", 10, "<=", 11)


def test_builtin_kinds() -> None:
    silent = alertrules.parse({"name": "Dead station", "kind": "silent",
                               "scope": {"organisation": True}, "condition": {"threshold": 3}})
    assert (silent.source, silent.op, silent.threshold) == ("devices", ">", 15.0)
    assert silent.fires(16) and not silent.fires(15) and silent.clears(5)
    assert alertrules.record(silent)["condition"] == {"op": ">", "threshold": 3.0}
    battery = alertrules.parse({"name": "Battery", "kind": "battery",
                                "scope": {"device": "dev-1"}, "condition": {"threshold": 20},
                                "clear": {"op": ">=", "threshold": 30}})
    assert (battery.source, battery.column, battery.op, battery.threshold) == (
        "health", "batt_pct", "<", 20.0)
    assert battery.fires(19.9) and not battery.clears(25) and battery.clears(30)
    burst = alertrules.parse({"name": "Bad data", "kind": "quarantine",
                              "scope": {"organisation": True}, "condition": {"threshold": 10}})
    assert (burst.source, burst.op, burst.threshold) == ("quarantine", ">=", 10.0)
    assert burst.fires(10) and burst.clears(9)
    with pytest.raises(BadRequest) as err:
        alertrules.parse({"name": "x", "kind": "battery", "scope": {"device": "d"},
                          "condition": {"op": ">", "threshold": 20}, "table": "daily"})
    assert set(err.value.errors["json"]) == {"condition", "table"}  # type: ignore[index]


def test_title_reads_in_the_rule_units() -> None:
    rule = alertrules.parse(body(units={"temp": "f"}, **{"for": 900}))
    assert alertrules.title(rule, "firing", "dev-1") == \
        "Frost: tair < 32 F for 15 min at dev-1"
    assert alertrules.title(rule, "resolved", "dev-1") == \
        "Resolved: Frost: tair >= 32 F at dev-1"


def test_patch_keeps_what_is_not_sent() -> None:
    base = alertrules.parse(body(units={"temp": "f"}, **{"for": 900}))
    changed = alertrules.parse({"name": "Hard frost"}, base=base)
    assert (changed.threshold, changed.for_seconds, changed.units) == (
        pytest.approx(0.0), 900, {"temp": "f"})
    moved = alertrules.parse({"condition": {"op": "<", "threshold": 28.4}}, base=base)
    assert moved.threshold == pytest.approx(-2.0) and moved.clear_threshold == pytest.approx(-2.0)
