"""The root-zone water balance (shared/waterbalance.py) against pyfao56 (USDA-ARS), the
reference implementation of FAO-56 chapter 8: the same ET0, Kc, rain, soil, roots and
irrigation give the same Dr, Ks and ETc adj every day (issue 35).

pyfao56 runs FAO-56's dual coefficient method (Kcb + Ke); with the evaporation layer of depth
Ze = 0 its total evaporable water is 0, Ke is 0 every day and it runs the single coefficient
balance this service serves, with our Kc given as its daily Kcb (an Update), roots constant
(Zrini = Zrmax) or growing over its development stage, theta0 = theta_fc (Dr starts at 0),
p adjusted to ETc as FAO-56 says (cons_p False), no runoff.
"""

from __future__ import annotations

import math
import random
import warnings
from datetime import date, timedelta

import pandas as pd
import pyfao56
import pytest

from shared import waterbalance as wb

TOL = 1e-6  # mm: the same arithmetic in the same order


def _key(d: date) -> str:
    return f"{d.year:04d}-{d.timetuple().tm_yday:03d}"


def _pyfao56(days: list[wb.Inputs], settings: wb.Settings) -> pd.DataFrame:
    """pyfao56's daily output for `days` (consecutive), single-coefficient configured."""
    # pyfao56 grows roots with its trapezoid Kcb: linearly over the development stage, from
    # day Lini to day Lini + Ldev; our Roots grow linearly between two dates: the same dates.
    roots = settings.roots
    lini, ldev = 10, 10
    if roots.start is not None and roots.end is not None:
        lini = (roots.start - days[0].day).days
        ldev = (roots.end - roots.start).days
    par = pyfao56.Parameters(thetaFC=settings.soil.theta_fc, thetaWP=settings.soil.theta_wp,
                             theta0=settings.soil.theta_fc, Zrini=roots.start_m,
                             Zrmax=roots.start_m if roots.end_m is None else roots.end_m,
                             pbase=settings.p_table, Ze=0.0, REW=1.0,
                             Kcbini=0.3, Kcbmid=1.0, Kcbend=0.5, Lini=lini, Ldev=ldev,
                             Lmid=200, Lend=10, hini=0.05, hmax=1.0)
    wth = pyfao56.Weather()
    wth.wndht, wth.z, wth.lat, wth.rfcrp = 2.0, 100.0, 40.0, "S"
    upd = pyfao56.Update()
    irr = pyfao56.Irrigation()
    for d in days:
        wth.wdata.loc[_key(d.day)] = {"Srad": math.nan, "Tmax": 25.0, "Tmin": 12.0,
                                      "Vapr": math.nan, "Tdew": math.nan, "RHmax": 80.0,
                                      "RHmin": 40.0, "Wndsp": 2.0, "Rain": d.precip or 0.0,
                                      "ETref": d.et0, "MorP": "M"}
        upd.udata.loc[_key(d.day)] = {"Kcb": d.kc, "h": 0.5, "fc": math.nan}
        if d.irrigation:
            irr.addevent(d.day.year, d.day.timetuple().tm_yday, d.irrigation, 1.0)
    model = pyfao56.Model(_key(days[0].day), _key(days[-1].day), par, wth, irr=irr, upd=upd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas' future warnings inside pyfao56
        model.run()
    return model.odata


def _season(seed: int, n: int = 120) -> list[wb.Inputs]:
    """A generated season: ET0 2-8 mm, a kc schedule rising 0.3 -> 1.15 -> 0.6, showers and
    storms, irrigation events of 10-40 mm, and two dry spells deep into stress."""
    rnd = random.Random(seed)
    start = date(2024, 4, 1)
    out = []
    for i in range(n):
        kc = 0.3 if i < 20 else 0.3 + 0.85 * min(1.0, (i - 20) / 30) if i < 80 else max(
            0.6, 1.15 - 0.55 * (i - 80) / 30)
        # Dry spells of a few weeks (days 30-60 and 90-110 without rain or irrigation).
        dry = 30 <= i < 60 or 90 <= i < 110
        rain = 0.0 if dry else rnd.choice([0.0] * 6 + [rnd.uniform(0.2, 4), rnd.uniform(5, 60)])
        irrigation = 0.0 if dry else rnd.choice([0.0] * 9 + [rnd.uniform(10, 40)])
        out.append(wb.Inputs(start + timedelta(days=i), round(rnd.uniform(2, 8), 2),
                             round(kc, 3), round(rain, 1), round(irrigation, 1)))
    return out


CASES = [
    ("sandy_loam_tomato", wb.Settings(wb.Soil.named("sandy loam"), wb.Roots(0.6),
                                      wb.CROP_P["tomato"]), 1),
    ("clay_maize", wb.Settings(wb.Soil.named("clay"), wb.Roots(1.2), wb.CROP_P["maize"]), 2),
    ("sand_lettuce", wb.Settings(wb.Soil.named("sand"), wb.Roots(0.3), wb.CROP_P["lettuce"]),
     3),
    ("measured_soil_cotton", wb.Settings(wb.Soil(0.31, 0.14), wb.Roots(1.0),
                                         wb.CROP_P["cotton"]), 4),
    # Roots growing from 0.15 m to 1.0 m between days 15 and 75 of the season.
    ("loam_maize_growing_roots", wb.Settings(
        wb.Soil.named("loam"), wb.Roots(0.15, 1.0, date(2024, 4, 16), date(2024, 6, 15)),
        wb.CROP_P["maize"]), 5),
]


@pytest.mark.parametrize(("name", "settings", "seed"), CASES, ids=[c[0] for c in CASES])
def test_daily_balance_equals_pyfao56(name: str, settings: wb.Settings, seed: int) -> None:
    days = _season(seed)
    ours = wb.run(days, settings)
    ref = _pyfao56(days, settings)
    assert len(ref) == len(ours)
    stressed = 0
    for d, r in zip(ours, (row for _k, row in ref.iterrows()), strict=True):
        assert r["Ke"] == 0.0, "pyfao56's soil evaporation is off"
        assert d.zr == pytest.approx(r["Zr"], abs=TOL), d.day
        assert d.taw == pytest.approx(r["TAW"], abs=TOL), d.day
        assert d.p == pytest.approx(r["p"], abs=TOL), d.day
        assert d.raw == pytest.approx(r["RAW"], abs=TOL), d.day
        assert d.ks == pytest.approx(r["Ks"], abs=TOL), d.day
        assert d.etc_adj == pytest.approx(r["ETa"], abs=TOL), d.day
        assert d.dp == pytest.approx(r["DP"], abs=TOL), d.day
        assert d.dr == pytest.approx(r["Dr"], abs=TOL), d.day
        stressed += d.ks < 1
    # The seasons reach the stressed part of the curve and refill (not all days at Dr 0).
    assert stressed > 5, name
    assert any(d.dp > 0 for d in ours), name
    if settings.roots.end is not None:  # the roots grew, day by day, as pyfao56's did
        assert ours[0].zr == 0.15 and ours[-1].zr == 1.0
        assert len({round(d.zr, 6) for d in ours}) > 50
