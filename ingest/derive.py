"""Values derived at ingest from one reading: dew point, vapour pressure, VPD, sea-level pressure.

Humidity follows FAO-56 (Allen et al. 1998, chapter 3): saturation vapour pressure e°(T)
(eq. 11), actual vapour pressure ea = e°(T) x RH (eq. 17 with a single temperature, RH as a
fraction), vapour pressure deficit e°(T) - ea, and the dew point as the inverse of eq. 11
(eq. 14, ea = e°(Tdew), solved for Tdew). All pressures are kPa, temperatures C, as stored.

Sea-level pressure reduces station pressure with the hypsometric equation of the standard
atmosphere's lapse rate (0.0065 K/m), using the reading's air temperature; without a temperature
the FAO-56 eq. 7 standard-atmosphere ratio (20 C at the station) is used. Without the location's
elevation (device not deployed, or elevation unknown) it is left empty rather than guessed.

`calibrated_inputs` builds the values of one `calibrated` row as sent plus the derived ones
computed from them; the writer's insert from its staging table rounds each to its column's
stored decimals (`shared.units.stored_rounding`, in the database: a tenth of the cost of doing
it here, per reading). `health_values` builds a `health` row rounded here (few rows). Validation
(ingest/payload.py) has already checked the values as sent; see docs/decisions.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

from shared.columns import HEALTH_INPUTS, READING_INPUTS, Column
from shared.fao56 import ES_A, ES_B, ES_C, dew_point, pressure_at, sat_vapour_pressure
from shared.units import stored_decimals

LAPSE_RATE = 0.0065  # K/m, standard atmosphere
_HYPSOMETRIC_EXP = 5.257  # g / (R_d x lapse rate)


# FAO-56 eq. 11 and its inverse live in shared/fao56.py (also used by the ET test oracle,
# tests/support/fao56_oracle.py).
saturation_vapour_pressure = sat_vapour_pressure
__all__ = ["DERIVED", "actual_vapour_pressure", "calibrated_inputs", "derive", "derive_row",
           "dew_point", "health_values", "saturation_vapour_pressure", "sea_level_pressure"]

DERIVED = ("tdew", "ea", "vpd", "slp")  # the calibrated columns computed here, in row order


def _power(col: Column) -> float:
    """10 ** the column's stored decimals: values round as round(v * p) / p, the double
    nearest a number of that many decimals, as the API rounds its conversions
    (serve/queries.py) and four times faster per row than round(v, n)."""
    return float(10 ** stored_decimals(col))


# Every reading input is a number (the row is all numbers); health carries text (fw) too.
assert all(c.is_numeric for c in READING_INPUTS)
_READING_NAMES = tuple(c.name for c in READING_INPUTS)
_HEALTH_PLACES = tuple((c.name, _power(c) if c.is_numeric else None) for c in HEALTH_INPUTS)


def _check_bounds_survive_rounding() -> None:
    # Rounding happens after the range checks: a value in range stays in range after rounding
    # only when each bound is a number of the stored precision (0..1 for rh, -60..70 for tair).
    for col in READING_INPUTS + HEALTH_INPUTS:
        if col.valid_range is not None and col.is_numeric:
            p = _power(col)
            assert all(round(b * p) / p == b for b in col.valid_range), col.name


_check_bounds_survive_rounding()


def actual_vapour_pressure(tair: float, rh: float) -> float:
    """ea in kPa from air temperature (C) and relative humidity as a fraction 0..1."""
    return sat_vapour_pressure(tair) * rh


def sea_level_pressure(p: float, elev: float, tair: float | None) -> float:
    """Station pressure `p` (kPa) at elevation `elev` (m) reduced to sea level (kPa)."""
    if tair is None:
        # FAO-56 eq. 7: P(z) = 101.3 ((293 - 0.0065 z) / 293)^5.26, so P0 = P x 101.3 / P(z).
        return p * 101.3 / pressure_at(elev)
    t_kelvin = tair + 273.15
    return p * (1.0 - LAPSE_RATE * elev / (t_kelvin + LAPSE_RATE * elev)) ** -_HYPSOMETRIC_EXP


def derive_row(
    tair: float | None, rh: float | None, p: float | None, elev: float | None,
) -> tuple[float | None, float | None, float | None, float | None]:
    """(tdew, ea, vpd, slp) of one reading; the writer's per-row form of `derive`."""
    tdew = ea = vpd = slp = None
    if tair is not None and rh is not None:
        es = ES_A * math.exp(ES_B * tair / (tair + ES_C))  # shared.fao56 eq. 11, inlined: hot path
        ea = es * rh
        vpd = es - ea
        tdew = dew_point(ea)
    if p is not None and elev is not None:
        slp = sea_level_pressure(p, elev, tair)
    return tdew, ea, vpd, slp


def derive(values: dict[str, float | str | None], elev: float | None) -> dict[str, float | None]:
    """The derived columns (tdew, ea, vpd, slp) of one reading's input `values`."""
    def number(name: str) -> float | None:
        v = values.get(name)
        return v if isinstance(v, float) else None

    tdew, ea, vpd, slp = derive_row(number("tair"), number("rh"), number("p"), elev)
    return {"tdew": tdew, "ea": ea, "vpd": vpd, "slp": slp}


def calibrated_inputs(
    values: dict[str, float | str | None], elev: float | None,
) -> tuple[float | None, ...]:
    """One reading's input fields (registry order), then `DERIVED` computed from them, all as
    sent: unrounded (the writer's insert rounds each once, to its column's stored decimals)."""
    # Every reading input is a number (payload.py made ints floats); hot path, so inlined.
    get = cast("Callable[[str], float | None]", values.get)
    return (*map(get, _READING_NAMES), *derive_row(get("tair"), get("rh"), get("p"), elev))


def health_values(values: dict[str, float | str | None]) -> tuple[float | str | None, ...]:
    """The stored values of one health report (registry order), numbers rounded to their
    column's stored decimals, text as sent."""
    out: list[float | str | None] = []
    for name, p in _HEALTH_PLACES:
        v = values.get(name)
        out.append(round(v * p) / p if p is not None and isinstance(v, float) else v)
    return tuple(out)
