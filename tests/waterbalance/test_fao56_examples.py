"""FAO-56's own worked examples of the daily root-zone water balance, run through
shared/waterbalance.py (issue 35).

Source: Allen, Pereira, Raes and Smith (1998), FAO Irrigation and Drainage Paper 56,
chapter 8: Example 37 "Effect of water stress on crop evapotranspiration" (p. 168: eqs. 82,
83, 84, 81 over ten days) and Example 38 "Irrigation scheduling to avoid crop water stress"
(pp. 172-173: eqs. 82, 83, 84, 85, 88 with irrigation, rain, deep percolation and growing
roots). The published figures are asserted to the examples' own rounding (Ks to 0.01, ETc adj
and Dr to 0.1 mm in Example 37; Zr to 0.01 m and RAW, DP, Dr to 1 mm in Example 38).

Two rules of the examples differ from the service's, each asserted here as a difference of
known size (docs/waterbalance.md "FAO-56's worked examples"):

- p: both examples hold p at the value they are given (Table 22's 0.40 for tomato at
  ETc 6 mm/day; 0.6 in Example 38), while the service (like pyfao56) adjusts Table 22's p to
  the day's ETc (the note under Table 22). The examples are fed the Table 22 p whose
  adjustment gives their p on each day (`table_p`), so the day's p is theirs.
- Water timing: Example 38 takes its footnote (5)'s "irrigation and rain early in the day"
  branch (the day's water refills the root zone first, what exceeds field capacity drains,
  then the day's ET is drawn), the service the "late in the day" branch, which is eq. 88 as
  printed (DP after the day's ET, Ks from yesterday's depletion). On a day whose water
  exceeds the depletion the example's DP and Dr are larger by that day's ETc; on every other
  day the two branches are the same equations.
"""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from shared import waterbalance as wb
from tests.support.fao56 import EX37, table_p

START = date(2024, 6, 1)


def test_example_37_effect_of_water_stress() -> None:
    """TAW 160 mm (eq. 82), RAW 64 mm (eq. 83); Ks falls from day 3 (eq. 84), ETc adj = Ks
    Kc ET0 (eq. 81): every published figure of the ten days to its rounding."""
    settings = wb.Settings(wb.Soil(0.32, 0.12), wb.Roots(0.8), table_p(0.40, 1.2 * 5.0))
    days = wb.run([wb.Inputs(START + timedelta(days=i), 5.0, 1.2) for i in range(10)],
                  settings, dr0=55.0)
    dr_start = 55.0
    for day, (pub_start, pub_ks, pub_adj, pub_end) in zip(days, EX37, strict=True):
        assert day.taw == pytest.approx(160.0) and day.raw == pytest.approx(64.0)
        assert day.etc == pytest.approx(6.0)
        assert abs(dr_start - pub_start) <= 0.05 + 1e-9
        assert abs(day.ks - pub_ks) <= 0.005 + 1e-9, (day.day, day.ks)
        assert abs((day.etc_adj or 0.0) - pub_adj) <= 0.05 + 1e-9, (day.day, day.etc_adj)
        assert abs(day.dr - pub_end) <= 0.05 + 1e-9, (day.day, day.dr)
        assert day.dp == 0.0
        dr_start = day.dr


# Example 38 (Example 35's sandy loam theta_fc 0.23, theta_wp 0.10 and its ET0 and dual-Kc
# ETc; p 0.6; Zr 0.30 m on day 1 growing to 0.35 m on day 10 into subsoil at field capacity;
# depletion RAW at the start of day 1). Published columns per day: (2) ET0, (3) Zr,
# (4) RAW, (6) P-RO, (7) I, (12) ETc, (13) DP, (14) Dr end.
EX38 = [
    (4.5, 0.30, 23, 0, 40, 5.5, 17, 5), (5.0, 0.31, 24, 0, 0, 6.1, 0, 12),
    (3.9, 0.31, 24, 0, 0, 4.0, 0, 16), (4.2, 0.32, 25, 0, 0, 2.9, 0, 18),
    (4.8, 0.32, 25, 0, 0, 2.5, 0, 21), (2.7, 0.33, 26, 6, 0, 2.7, 0, 18),
    (5.8, 0.33, 26, 0, 0, 4.7, 0, 22), (5.1, 0.34, 26, 0, 0, 2.8, 0, 25),
    (4.7, 0.34, 27, 0, 0, 2.2, 0, 27), (5.2, 0.35, 27, 0, 27, 6.3, 0, 6),
]
EX38_ROOTS = wb.Roots(0.30, 0.35, START, START + timedelta(days=9))


def _ex38_step(dr_prev: float, n: int, irrigation: float | None = None) -> wb.Day:
    """Day n (0-based) of Example 38 through wb.step, with the example's p of 0.6 that day
    and its ETc (fed as Kc = ETc / ET0: the dual-Kc ETc of Example 35)."""
    et0, _, _, rain, irr, etc, _, _ = EX38[n]
    settings = wb.Settings(wb.Soil(0.23, 0.10), EX38_ROOTS, table_p(0.6, etc))
    return wb.step(dr_prev, wb.Inputs(START + timedelta(days=n), et0, etc / et0, float(rain),
                                      float(irr if irrigation is None else irrigation)),
                   settings)


def test_example_38_days_without_drainage_are_the_published_balance() -> None:
    """Days 2-9 from the published depletion at the end of day 1 (its ETc, 5.5 mm, the root
    zone being at field capacity after the irrigation): Zr, TAW = 130 Zr (eq. 82), RAW =
    78 Zr (eq. 83), Ks 1, DP 0 and Dr (eq. 85, the 6 mm rain of day 6 included) are the
    published ones. Dr is published in whole mm from unrounded ETc; the inputs are the ETc
    column to 0.1 mm, so Dr may drift by 0.05 mm a day on top of the 0.5 mm of rounding."""
    dr = EX38[0][5]
    for n in range(1, 9):
        _, zr, raw, _, _, etc, dp, dr_end = EX38[n]
        day = _ex38_step(dr, n)
        assert round(day.zr, 2) == zr, (n + 1, day.zr)
        assert day.taw == pytest.approx(130.0 * day.zr) and day.p == pytest.approx(0.6)
        assert abs(day.raw - raw) <= 0.5, (n + 1, day.raw)
        assert day.ks == 1.0 and day.etc_adj == pytest.approx(etc)
        assert day.dp == dp == 0
        assert abs(day.dr - dr_end) <= 0.5 + 0.05 * n, (n + 1, day.dr)
        dr = day.dr
    assert day.dr >= day.raw, "RAW is depleted at the end of day 9: irrigate on day 10"


def test_example_38_irrigation_days_differ_only_by_the_water_timing_rule() -> None:
    """Day 1 (40 mm on a depletion of RAW, 23.4 mm): the example drains 40 - 23.4 = 17 mm
    and ends at Dr = ETc = 5 mm (water early in the day); eq. 88 as the service runs it
    drains after the day's ET, 40 - 5.5 - 23.4 = 11.1 mm, and ends at field capacity: DP and
    Dr each smaller by the day's ETc. Day 10: the refill depth of the forecast (Dr, 27 mm)
    leaves no DP and ends at Dr = ETc = 6 mm, as published."""
    raw1 = 0.6 * 130.0 * 0.30
    day1 = _ex38_step(raw1, 0)
    etc1, pub_dp, pub_dr = EX38[0][5], EX38[0][6], EX38[0][7]
    assert day1.ks == 1.0 and day1.etc_adj == pytest.approx(etc1)
    assert day1.dp == pytest.approx(40.0 - etc1 - raw1) and day1.dr == 0.0
    assert abs(day1.dp + etc1 - pub_dp) <= 0.5 and abs(day1.dr + etc1 - pub_dr) <= 0.5
    # Days 2-9 from the example's end of day 1, then the forecast's "irrigate now, X mm".
    history = [day1]
    dr = etc1
    for n in range(1, 9):
        history.append(_ex38_step(dr, n))
        dr = history[-1].dr
    before = wb.forecast(history[:-1])  # end of day 8: Dr 25, RAW 26
    assert before is not None and before.days_to_raw == 1  # RAW reached on day 9
    now = wb.forecast(history)
    assert now is not None and now.days_to_raw == 0  # irrigate on day 10
    assert abs(now.refill_mm - EX38[9][4]) <= 0.5 + 0.05 * 8  # published net depth 27 mm
    day10 = _ex38_step(dr, 9, irrigation=now.refill_mm)
    assert day10.dp == 0.0 and abs(day10.dr - EX38[9][7]) <= 0.5
    # The example's Ks is 1 (the irrigation came first); the service's Ks is from the
    # depletion before it, 0.4 mm deeper than RAW in 18 mm of TAW - RAW here.
    assert 0.99 <= day10.ks <= 1.0
