"""Unit conversion, one table per measurement class (the `temp`, `pres`, `size`, `ratio` and
`speed` query parameters).

Values are stored in C, kPa, mm, fractions 0..1 and m/s (docs/spec/reference-facts.md
decision 2). Every conversion is `stored * scale + offset`; temperature differences
(`Measure.TEMP_DELTA`, e.g. degree days) convert by scale only. The same numbers feed Python
conversion and the SQL that `serve` generates, so both agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from psycopg import sql

from shared.columns import Column, Measure
from shared.errors import BadParameter


@dataclass(frozen=True, slots=True)
class Unit:
    """One output unit of a measurement class."""

    code: str  # query-parameter code, lower case
    label: str  # as written in the X-Units header
    scale: float
    offset: float = 0.0
    extra_decimals: int = 0  # decimals beyond the column's declared precision


UNITS: dict[str, dict[str, Unit]] = {
    "temp": {
        "c": Unit("c", "C", 1.0),
        "f": Unit("f", "F", 9.0 / 5.0, 32.0),  # F = C x 9/5 + 32
    },
    "pres": {
        "mb": Unit("mb", "mb", 10.0),  # 1 kPa = 10 mb (hPa)
        "kp": Unit("kp", "kp", 1.0, extra_decimals=1),
    },
    "size": {
        "mm": Unit("mm", "mm", 1.0),
        "in": Unit("in", "in", 1.0 / 25.4, extra_decimals=1),  # 1 in = 25.4 mm exactly
    },
    "ratio": {
        "pct": Unit("pct", "pct", 100.0),
        "dec": Unit("dec", "dec", 1.0, extra_decimals=2),
    },
    "speed": {
        "mps": Unit("mps", "mps", 1.0),
        "kph": Unit("kph", "kph", 3.6),  # 1 m/s = 3.6 km/h
        "mph": Unit("mph", "mph", 3600.0 / 1609.344),  # 1 mile = 1609.344 m exactly
    },
}

DEFAULTS: dict[str, str] = {"temp": "c", "pres": "mb", "size": "mm", "ratio": "pct", "speed": "mps"}
UNIT_PARAMS: tuple[str, ...] = tuple(DEFAULTS)


def param_for(measure: Measure) -> str:
    """The query parameter that converts a measurement class."""
    return "temp" if measure is Measure.TEMP_DELTA else measure.value


def parse_unit(param: str, raw: str | None) -> Unit:
    """The unit named by `raw` for `param` (case-insensitive); the default when None."""
    choices = UNITS[param]
    if raw is None or raw == "":
        return choices[DEFAULTS[param]]
    unit = choices.get(raw.strip().lower())
    if unit is None:
        raise BadParameter(
            f"{param}: unknown unit {raw!r}; valid: {', '.join(choices)}",
            errors={param: [f"must be one of: {', '.join(choices)}"]},
        )
    return unit


def factors(col: Column, unit: Unit) -> tuple[float, float]:
    """(scale, offset) that turn the stored value of `col` into `unit`."""
    if col.measure is Measure.TEMP_DELTA:
        return unit.scale, 0.0
    return unit.scale, unit.offset


def decimals(col: Column, unit: Unit | None) -> int:
    """Decimals to round a converted value of `col` to."""
    return col.precision + (unit.extra_decimals if unit else 0)


def stored_decimals(col: Column) -> int:
    """Decimals a stored value of `col` keeps so that it shows the column's precision in its
    default unit, and no more in any unit (the API rounds every other conversion itself):
    precision + log10 of the default unit's scale (ratio stored 0..1, shown in %: +2; kPa shown
    in mb: +1)."""
    if col.measure is None:
        return col.precision
    scale = UNITS[param_for(col.measure)][DEFAULTS[param_for(col.measure)]].scale
    extra = round(math.log10(scale))
    if 10 ** extra != scale:
        raise ValueError(f"default unit of {col.name} does not scale by a power of ten")
    return col.precision + extra


def convert(value: float | None, col: Column, unit: Unit) -> float | None:
    """Convert one stored value of `col` into `unit`, rounded to the column's precision."""
    if value is None:
        return None
    scale, offset = factors(col, unit)
    return round(value * scale + offset, decimals(col, unit))


def stored_rounding(expr: sql.Composable, col: Column) -> sql.Composable:
    """SQL rounding the float8 `expr` to `col`'s stored decimals: `round(v * 10^n) / 10^n`,
    half to even (float8 round), the formula the API rounds its conversions with. Rollups
    (aggregate.statements) and readings (the ingester's insert from its staging table) are
    rounded by this one expression when written; text columns pass through."""
    if not col.is_numeric:
        return expr
    power = sql.Literal(float(10 ** stored_decimals(col)))
    return sql.SQL("(round({} * {}) / {})").format(expr, power, power)


# Keys a `/schemas/{table}` record carries only when asked for (`?include=precision,unit`):
# the interface spec's record is exactly column_name, data_type, description, and published
# clients assert those three names (issue 30 item 6.1).
EXTRA_KEYS = ("precision", "unit")


def describe(col: Column, include: Iterable[str] = ()) -> dict[str, str | int | None]:
    """The `/schemas/{table}` record of a registry column: column_name, data_type and
    description, then those of EXTRA_KEYS named in `include`, in EXTRA_KEYS order:
    `precision` (decimals of a value served in `unit`; None for non-numeric columns) and
    `unit` (the unit served without unit parameters, spelt as in the X-Units header; None
    when the column has none)."""
    record: dict[str, str | int | None] = {
        "column_name": col.name, "data_type": col.dtype, "description": col.description}
    wanted = set(include)
    numeric = col.is_numeric
    if "precision" in wanted:
        record["precision"] = decimals(col, None) if numeric else None
    if "unit" in wanted:
        unit = col.unit
        if col.measure is not None:
            unit = UNITS[param_for(col.measure)][DEFAULTS[param_for(col.measure)]].label
        record["unit"] = unit if numeric else None
    return record
