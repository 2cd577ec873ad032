"""Values derived at ingest from one reading: dew point, vapour pressure, VPD, sea-level pressure.

Humidity follows FAO-56 (Allen et al. 1998, chapter 3): saturation vapour pressure e°(T)
(eq. 11), actual vapour pressure ea = e°(T) x RH (eq. 17 with a single temperature, RH as a
fraction), vapour pressure deficit e°(T) - ea, and the dew point as the inverse of eq. 11
(eq. 14, ea = e°(Tdew), solved for Tdew). All pressures are kPa, temperatures C, as stored.

Sea-level pressure reduces station pressure with the hypsometric equation of the standard
atmosphere's lapse rate (0.0065 K/m), using the reading's air temperature; without a temperature
the FAO-56 eq. 7 standard-atmosphere ratio (20 C at the station) is used. Without the location's
elevation (device not deployed, or elevation unknown) it is left empty rather than guessed.
"""

from __future__ import annotations

import math

from shared.fao56 import ES_A, ES_B, ES_C, dew_point, pressure_at, sat_vapour_pressure

LAPSE_RATE = 0.0065  # K/m, standard atmosphere
_HYPSOMETRIC_EXP = 5.257  # g / (R_d x lapse rate)


# FAO-56 eq. 11 and its inverse live in shared/fao56.py (also used by aggregate/et.py).
saturation_vapour_pressure = sat_vapour_pressure
__all__ = ["dew_point", "saturation_vapour_pressure", "actual_vapour_pressure", "derive",
           "derive_row", "sea_level_pressure"]


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
