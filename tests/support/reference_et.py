"""The reference ET libraries as the tests call them (issue 22): pyet's FAO-56 daily method,
refet's ASCE-EWRI daily method with FAO-56's clear-sky radiation, and FAO-56's hourly
equation assembled from refet's hourly terms. Inputs in the units the rollups store."""

from __future__ import annotations

import math
import warnings
from datetime import UTC, date, datetime
from typing import Any

import numpy as np
import pandas as pd
import pyet
import refet
from refet import calcs

from shared.fao56 import sat_vapour_pressure
from tests.support import fao56_oracle as et

DAILY_TOL = 0.006  # mm: the libraries' constants differ in the 4th digit, stored et has 2


def pyet_daily(*, tmax: float, tmin: float, rh_max: float, rh_min: float, u2: float,
               rs: float, lat: float, elev: float, day: date) -> float:
    """pyet's FAO-56 daily ET0 (mm) for one day."""
    idx = pd.DatetimeIndex([pd.Timestamp(day)])

    def s(v: float) -> pd.Series:
        return pd.Series([v], index=idx)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyet warns about its own unit guesses
        value = pyet.pm_fao56(s((tmax + tmin) / 2), s(u2), rs=s(rs), tmax=s(tmax),
                              tmin=s(tmin), rhmax=s(rh_max * 100), rhmin=s(rh_min * 100),
                              elevation=elev, lat=math.radians(lat)).iloc[0]
    return float(value)


def refet_daily(*, tmax: float, tmin: float, rh_max: float, rh_min: float, u2: float,
                rs: float, lat: float, elev: float, day: date) -> float:
    """refet's ASCE-EWRI daily ETo (mm) with FAO-56's Rso (the 'simple' one), not clipped."""
    ea = (sat_vapour_pressure(tmin) * rh_max + sat_vapour_pressure(tmax) * rh_min) / 2
    return float(refet.Daily(tmin=tmin, tmax=tmax, ea=ea, rs=rs, uz=u2, zw=2.0,
                             elev=float(elev), lat=float(lat),
                             doy=day.timetuple().tm_yday, method="asce", rso_type="simple",
                             input_units={"lat": "deg"}).eto()[0])


def fao56_hourly_from_refet(*, start: datetime, tair: float, rh: float, u2: float,
                            swdw: float, lat: float, lon: float, elev: float) -> float:
    """FAO-56 eq. 53 (mm) for the UTC hour from `start`, from refet's hourly terms and its
    combination equation with FAO-56's constants; night Rs/Rso and G by the documented rules
    (sun above 0.3 rad at the midpoint: measured ratio, else 0.8; G = 0.1 Rn while Ra > 0)."""
    hour = start.astimezone(UTC)
    doy = hour.timetuple().tm_yday
    es = sat_vapour_pressure(tair)
    h = refet.Hourly(tmean=tair, ea=es * rh, rs=swdw * 0.0036, uz=u2, zw=2.0,
                     elev=float(elev), lat=float(lat), lon=float(lon), doy=doy,
                     time=float(hour.hour), method="asce",
                     input_units={"lat": "deg", "lon": "deg"})
    lat_r, lon_r = math.radians(lat), math.radians(lon)
    omega = calcs.solar_hour_angle(calcs.solar_time_rad(
        lon_r, hour.hour + 0.5, calcs.seasonal_correction(doy)))
    delta = calcs.declination(doy, "asce")
    beta = math.asin(math.sin(lat_r) * math.sin(delta)
                     + math.cos(lat_r) * math.cos(delta) * math.cos(float(omega)))
    ra = _scalar(h.ra)
    rso = calcs.rso_simple(ra, elev)
    rs = swdw * 0.0036
    ratio = min(max(rs / rso, 0.3), 1.0) if beta > 0.3 and rso > 0 else et.NIGHT_RS_RSO
    rnl = _scalar(calcs.rnl_hourly(tair, es * rh, 1.35 * ratio - 0.35))
    rn = _scalar(calcs.rn_hourly(rs, rnl))
    g = 0.1 * rn if ra > 0 else 0.5 * rn
    value = calcs.etsz(rn, g, tair, u2, es - es * rh, _scalar(h.es_slope), _scalar(h.psy),
                       37.0, 0.34)
    return max(_scalar(value), 0.0)


def _scalar(value: Any) -> float:
    """refet answers with scalars or 1-element arrays."""
    return float(np.asarray(value).ravel()[0])
