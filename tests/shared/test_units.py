"""Unit conversion by measurement class."""

from __future__ import annotations

import pytest

from shared.columns import TABLES
from shared.errors import BadParameter
from shared.units import UNITS, convert, decimals, parse_unit

HOURLY = TABLES["hourly"]
DAILY = TABLES["daily"]


@pytest.mark.parametrize(
    ("param", "code", "column", "stored", "expected"),
    [
        ("temp", "f", "tair", 28.5, 83.3),
        ("temp", "c", "tair", 28.5, 28.5),
        ("temp", "f", "mint", -40.0, -40.0),
        ("pres", "mb", "slp", 101.325, 1013.25),
        ("pres", "kp", "slp", 101.325, 101.325),
        ("size", "in", "precip", 25.4, 1.0),
        ("ratio", "pct", "rh", 0.455, 45.5),
        ("ratio", "dec", "rh", 0.455, 0.455),
        ("speed", "kph", "wind_speed", 10.0, 36.0),
        ("speed", "mph", "wind_speed", 0.44704, 1.0),
    ],
)
def test_convert(param: str, code: str, column: str, stored: float, expected: float) -> None:
    col = HOURLY.column(column)
    assert convert(stored, col, UNITS[param][code]) == pytest.approx(expected)


def test_temperature_difference_converts_by_scale_only() -> None:
    gdd = DAILY.column("gdd")
    assert convert(10.0, gdd, UNITS["temp"]["f"]) == 18.0


def test_codes_are_case_insensitive_and_default_when_absent() -> None:
    assert parse_unit("temp", "F").label == "F"
    assert parse_unit("temp", None).label == "C"
    assert parse_unit("speed", "KPH").code == "kph"


def test_unknown_code_is_a_bad_parameter_naming_choices() -> None:
    with pytest.raises(BadParameter, match="temp: unknown unit 'k'; valid: c, f"):
        parse_unit("temp", "k")


def test_converted_values_rounded_to_declared_precision() -> None:
    col = HOURLY.column("precip")
    assert decimals(col, UNITS["size"]["in"]) == col.precision + 1
    assert convert(1.0, col, UNITS["size"]["in"]) == 0.039
    assert convert(None, col, UNITS["size"]["in"]) is None
