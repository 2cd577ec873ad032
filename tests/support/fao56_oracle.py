"""Reference evapotranspiration by FAO-56 Penman-Monteith (Allen et al., 1998), pure functions.

`daily_et` is the daily method (eq. 6) with net long-wave radiation from Rs/Rso (eq. 39);
`period_et` is the hourly method (eq. 53) for any period of about an hour, with the day/night
soil heat flux rules (G = 0.1 Rn by day, 0.5 Rn at night). Inputs are in the units the rollups
store: C, relative humidity as a fraction 0..1, wind in m/s at `height` metres (adjusted to 2 m
by eq. 47), short-wave radiation in MJ/m2 (day) or W/m2 (period mean).

This is the reference implementation: the rollups compute the same equations in SQL
(migration 0061, `sds_fao56_period_et` and `sds_fao56_daily_et`), held equal to these functions
within 0.001 mm by tests/aggregate/test_et_sql.py.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from functools import lru_cache

# The humidity and atmosphere equations are shared with ingest (one home: shared/fao56.py).
from shared.fao56 import (  # noqa: F401  (re-exported: et.sat_vapour_pressure etc.)
    pressure_at,
    psychrometric,
    sat_vapour_pressure,
    vapour_slope,
    wind_at_2m,
)

SOLAR_CONSTANT = 0.0820  # Gsc, MJ m-2 min-1
STEFAN_BOLTZMANN_DAY = 4.903e-9  # MJ K-4 m-2 day-1
STEFAN_BOLTZMANN_HOUR = 2.043e-10  # MJ K-4 m-2 h-1
ALBEDO = 0.23  # grass reference crop
# Rs/Rso used for night periods, when no radiation is measured. FAO-56 says to take the ratio
# of 2-3 hours before sunset; a rollup bucket is computed from its own readings only (a late
# reading marks its own buckets, never the night after it), so the arid-climate value of
# FAO-56 Example 19 (0.8; 0.4-0.6 in humid climates) stands in. It is also the daily ratio of a
# polar night (Rso = 0, the ratio undefined). docs/aggregate.md gives the size of the error.
NIGHT_RS_RSO = 0.8
# ASCE-EWRI (2005) eq. 18: Rs/Rso within 0.3..1.0. Below 0.26 the cloudiness factor of FAO-56
# eq. 39 (1.35 Rs/Rso - 0.35) turns negative and net long-wave radiation becomes a gain.
RS_RSO_MIN, RS_RSO_MAX = 0.3, 1.0
# Below this solar elevation (rad) Rs/Rso is unreliable (ASCE-EWRI 2005); use NIGHT_RS_RSO.
MIN_SUN_ELEVATION = 0.3
W_TO_MJ_PER_HOUR = 3600 / 1e6


def _inverse_distance(doy: int) -> float:
    return 1 + 0.033 * math.cos(2 * math.pi / 365 * doy)  # eq. 23


def _declination(doy: int) -> float:
    return 0.409 * math.sin(2 * math.pi / 365 * doy - 1.39)  # eq. 24


def daily_extraterrestrial(lat: float, doy: int) -> float:
    """Ra (MJ/m2/day) at latitude `lat` degrees on day of year `doy` (eq. 21)."""
    phi = math.radians(lat)
    dr, decl = _inverse_distance(doy), _declination(doy)
    ws = math.acos(max(-1.0, min(1.0, -math.tan(phi) * math.tan(decl))))  # eq. 25
    return (24 * 60 / math.pi) * SOLAR_CONSTANT * dr * (
        ws * math.sin(phi) * math.sin(decl) + math.cos(phi) * math.cos(decl) * math.sin(ws))


def clear_sky(ra: float, elevation: float) -> float:
    """Rso from Ra and elevation (eq. 37)."""
    return (0.75 + 2e-5 * elevation) * ra


def cloudiness_ratio(rs: float, rso: float, fallback: float = NIGHT_RS_RSO) -> float:
    """Rs/Rso bounded to 0.3..1.0 (ASCE-EWRI eq. 18); with Rso = 0 (no sun) the bound 1.0
    when some radiation was measured anyway (polar twilight: Rs/Rso is +infinity, bounded, as
    pyet and refet take it), `fallback` when none was (0/0, undefined)."""
    if rso <= 0:
        return RS_RSO_MAX if rs > 0 else fallback
    return max(RS_RSO_MIN, min(rs / rso, RS_RSO_MAX))


def daily_et(
    *, tmax: float, tmin: float, rh_max: float, rh_min: float, wind: float, height: float,
    rs: float, lat: float, elevation: float, doy: int, pressure: float | None = None,
) -> float:
    """Daily reference ET0 (mm/day) by FAO-56 eq. 6 (G = 0 for a day).

    `rh_max`/`rh_min` are fractions 0..1, `wind` the mean speed (m/s) at `height` m, `rs` the
    measured short-wave energy of the day (MJ/m2). ea from RHmax and RHmin (eq. 17); net
    long-wave radiation from Tmax, Tmin, ea and Rs/Rso (eq. 39), the ratio bounded to 0.3..1.0
    (`cloudiness_ratio`); a polar night (Rso = 0) takes NIGHT_RS_RSO, or 1.0 when its
    pyranometer read some twilight (Rs > 0). A polar day needs
    nothing special: the sunset hour angle is pi (eq. 25 clipped).
    """
    tmean = (tmax + tmin) / 2
    p = pressure if pressure is not None else pressure_at(elevation)
    gamma = psychrometric(p)
    u2 = wind_at_2m(wind, height)
    e_tmax, e_tmin = sat_vapour_pressure(tmax), sat_vapour_pressure(tmin)
    es = (e_tmax + e_tmin) / 2
    ea = (e_tmin * rh_max + e_tmax * rh_min) / 2
    delta = vapour_slope(tmean)
    rso = clear_sky(daily_extraterrestrial(lat, doy), elevation)
    ratio = cloudiness_ratio(rs, rso)
    rns = (1 - ALBEDO) * rs
    rnl = (STEFAN_BOLTZMANN_DAY * ((tmax + 273.16) ** 4 + (tmin + 273.16) ** 4) / 2
           * (0.34 - 0.14 * math.sqrt(max(ea, 0.0))) * (1.35 * ratio - 0.35))
    rn = rns - rnl
    et0 = (0.408 * delta * rn + gamma * 900 / (tmean + 273) * u2 * (es - ea)) / (
        delta + gamma * (1 + 0.34 * u2))
    return max(et0, 0.0)


def _seasonal_correction(doy: int) -> float:
    b = 2 * math.pi * (doy - 81) / 364  # eq. 33
    return 0.1645 * math.sin(2 * b) - 0.1255 * math.cos(b) - 0.025 * math.sin(b)  # eq. 32


@lru_cache(maxsize=65536)
def period_geometry(
    start: datetime, end: datetime, lat: float, lon: float
) -> tuple[float, float]:
    """(Ra in MJ/m2 over the period, solar elevation at its midpoint in rad), eqs. 28-33.

    Times are UTC, so the solar time angle uses Lz = 0 and Lm = -lon (lon east positive).
    Polar night: the sunset hour angle is 0 and Ra is 0 all day; polar day: it is pi and no
    period is clipped.
    """
    mid = start.astimezone(UTC) + (end - start) / 2
    hours = (end - start).total_seconds() / 3600
    doy = mid.timetuple().tm_yday
    phi = math.radians(lat)
    dr, decl = _inverse_distance(doy), _declination(doy)
    t = mid.hour + mid.minute / 60 + mid.second / 3600
    omega = math.pi / 12 * ((t + lon / 15 + _seasonal_correction(doy)) - 12)  # eq. 31
    omega = math.remainder(omega, 2 * math.pi)
    ws = math.acos(max(-1.0, min(1.0, -math.tan(phi) * math.tan(decl))))
    w1, w2 = omega - math.pi * hours / 24, omega + math.pi * hours / 24  # eqs. 29-30
    if ws < math.pi:
        # Clipped to sunrise/sunset. A polar day (ws = pi) has none: an hour across solar
        # midnight keeps both halves (clipping at +-pi dropped the half past midnight).
        w1, w2 = max(w1, -ws), min(w2, ws)
    ra = 0.0
    if w2 > w1:
        ra = (12 * 60 / math.pi) * SOLAR_CONSTANT * dr * (
            (w2 - w1) * math.sin(phi) * math.sin(decl)
            + math.cos(phi) * math.cos(decl) * (math.sin(w2) - math.sin(w1)))
        ra = max(ra, 0.0)
    elevation = math.asin(max(-1.0, min(1.0, math.sin(phi) * math.sin(decl)
                                        + math.cos(phi) * math.cos(decl) * math.cos(omega))))
    return ra, elevation


def period_et(
    *, start: datetime, end: datetime, tair: float, rh: float, wind: float, height: float,
    swdw: float, lat: float, lon: float, elevation: float, pressure: float | None = None,
    night_ratio: float = NIGHT_RS_RSO,
) -> float:
    """Reference ET0 (mm) over `[start, end)` (about an hour) by FAO-56 hourly eq. 53.

    `tair` (C), `rh` (0..1), `wind` (m/s at `height` m) and `swdw` (W/m2) are period means.
    Soil heat flux G = 0.1 Rn while the sun is up, 0.5 Rn at night (eqs. 45-46); "up" means
    Ra > 0 over the period, i.e. any part of it lies between sunrise and sunset. Rs/Rso comes
    from the period when the sun is higher than MIN_SUN_ELEVATION, else `night_ratio`. A
    period other than one hour (30/45-minute or 1.5-hour local hours) gets the hourly rate x
    its length. Negative results (dew) are reported as 0.
    """
    hours = (end - start).total_seconds() / 3600
    if hours <= 0:
        raise ValueError("period must have a positive length")
    ra_period, sun = period_geometry(start, end, lat, lon)
    ra = ra_period / hours  # MJ/m2/h
    rs = swdw * W_TO_MJ_PER_HOUR  # MJ/m2/h from the mean flux
    rso = clear_sky(ra, elevation)
    if sun > MIN_SUN_ELEVATION and rso > 0:
        ratio = cloudiness_ratio(rs, rso)
    else:
        ratio = night_ratio
    p = pressure if pressure is not None else pressure_at(elevation)
    gamma = psychrometric(p)
    u2 = wind_at_2m(wind, height)
    es = sat_vapour_pressure(tair)
    ea = es * rh
    rnl = (STEFAN_BOLTZMANN_HOUR * (tair + 273.16) ** 4
           * (0.34 - 0.14 * math.sqrt(max(ea, 0.0))) * (1.35 * ratio - 0.35))
    rn = (1 - ALBEDO) * rs - rnl
    g = 0.1 * rn if ra > 0 else 0.5 * rn
    delta = vapour_slope(tair, es)
    rate = (0.408 * delta * (rn - g) + gamma * 37 / (tair + 273) * u2 * (es - ea)) / (
        delta + gamma * (1 + 0.34 * u2))
    return max(rate, 0.0) * hours
