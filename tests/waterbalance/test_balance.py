"""The water balance's own rules (shared/waterbalance.py): FAO-56's tables and equations on
hand-checked numbers, roots growing by dates, and the forecast rule."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from shared import waterbalance as wb


def test_taw_and_raw_from_table_19_and_22() -> None:
    """Silt loam (theta_fc 0.29, theta_wp 0.15 mid-range), 1 m of roots: TAW = 1000 x 0.14 x
    1.0 = 140 mm (eq. 82); maize p 0.55 at ETc 5 mm/day: RAW = 77 mm (eq. 83)."""
    s = wb.Settings(wb.Soil.named("Silt Loam"), wb.Roots(1.0), wb.CROP_P["maize"])
    d = wb.step(0.0, wb.Inputs(date(2024, 6, 1), 5.0, 1.0), s)
    assert d.taw == pytest.approx(140.0)
    assert d.p == pytest.approx(0.55) and d.raw == pytest.approx(77.0)
    assert d.ks == 1.0 and d.etc_adj == pytest.approx(5.0) and d.dr == pytest.approx(5.0)


@pytest.mark.parametrize(("etc", "p"), [(5.0, 0.5), (2.0, 0.62), (10.0, 0.3), (0.0, 0.7),
                                        (-30.0, 0.8), (30.0, 0.1), (None, 0.5)])
def test_p_adjusted_to_etc_within_its_bounds(etc: float | None, p: float) -> None:
    assert wb.depletion_fraction(0.5, etc) == pytest.approx(p)


def test_ks_falls_linearly_from_raw_to_taw() -> None:
    assert wb.stress(50.0, 100.0, 50.0) == 1.0
    assert wb.stress(75.0, 100.0, 50.0) == pytest.approx(0.5)
    assert wb.stress(100.0, 100.0, 50.0) == 0.0


def test_rain_beyond_field_capacity_percolates() -> None:
    s = wb.Settings(wb.Soil(0.30, 0.10), wb.Roots(0.5), 0.5)  # TAW 100 mm
    d = wb.step(20.0, wb.Inputs(date(2024, 6, 1), 4.0, 1.0, precip=50.0), s)
    assert d.dr == 0.0 and d.dp == pytest.approx(50.0 - 4.0 - 20.0)
    # Irrigation counts like rain; a day without ET0 takes in its water only.
    d = wb.step(30.0, wb.Inputs(date(2024, 6, 2), None, 1.0, irrigation=10.0), s)
    assert d.etc is None and d.etc_adj is None and d.dr == pytest.approx(20.0)


def test_depletion_never_exceeds_taw() -> None:
    s = wb.Settings(wb.Soil(0.30, 0.10), wb.Roots(0.1), 0.5)  # TAW 20 mm
    days = wb.run([wb.Inputs(date(2024, 6, 1) + timedelta(days=i), 8.0, 1.2)
                   for i in range(30)], s)
    assert max(d.dr for d in days) <= 20.0
    assert days[-1].ks < 0.05


def test_roots_grow_linearly_between_dates() -> None:
    r = wb.Roots(0.2, 1.0, date(2024, 5, 1), date(2024, 5, 11))
    assert r.depth(date(2024, 4, 1)) == 0.2
    assert r.depth(date(2024, 5, 6)) == pytest.approx(0.6)
    assert r.depth(date(2024, 7, 1)) == 1.0
    assert wb.Roots(0.7).depth(date(2024, 7, 1)) == 0.7


def test_forecast_days_until_raw_at_the_mean_etc_of_seven_days() -> None:
    """Dr 20 mm, RAW 50 mm, mean ETc 4 mm over the last 7 days: 30 / 4 = 7.5, so Dr reaches
    RAW at the end of day 8; refill depth = Dr."""
    s = wb.Settings(wb.Soil(0.30, 0.10), wb.Roots(0.5), 0.5)
    start = date(2024, 6, 1)
    # 10 days: the first 3 at ETc 10 (outside the window), then 7 at ETc 4 minus rain.
    inputs = [wb.Inputs(start + timedelta(days=i), 10.0, 1.0, precip=10.0) for i in range(3)]
    inputs += [wb.Inputs(start + timedelta(days=3 + i), 4.0, 1.0) for i in range(7)]
    inputs[-1] = wb.Inputs(inputs[-1].day, 4.0, 1.0, precip=8.0)
    days = wb.run(inputs, s)
    assert days[-1].dr == pytest.approx(20.0)
    f = wb.forecast(days)
    assert f is not None and f.mean_etc == pytest.approx(4.0)
    assert f.days_to_raw == -(-(days[-1].raw - 20.0) // 4.0)
    assert f.refill_mm == pytest.approx(20.0)


def test_forecast_now_when_beyond_raw_and_none_without_etc() -> None:
    s = wb.Settings(wb.Soil(0.30, 0.10), wb.Roots(0.5), 0.5)
    dry = wb.run([wb.Inputs(date(2024, 6, 1), 5.0, 1.0)], s, dr0=70.0)
    assert wb.forecast(dry).days_to_raw == 0  # type: ignore[union-attr]
    unknown = wb.run([wb.Inputs(date(2024, 6, 1), None, None)], s, dr0=10.0)
    assert wb.forecast(unknown).days_to_raw is None  # type: ignore[union-attr]
    assert wb.forecast([]) is None


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        wb.Soil(0.1, 0.2)
    with pytest.raises(ValueError):
        wb.Settings(wb.Soil(0.3, 0.1), wb.Roots(1.0), 1.5)
    with pytest.raises(KeyError):
        wb.Soil.named("moon dust")
