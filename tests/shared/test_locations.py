"""The location field rules and which rollups a change re-cuts (shared/locations.py), alone."""

from __future__ import annotations

from datetime import date

import pytest

from shared import locations
from shared.errors import BadParameter


def test_which_rollups_a_change_marks() -> None:
    assert locations.rollups_to_mark({"name", "notes", "crop", "state"}) == ()
    assert locations.rollups_to_mark({"tz_name"}) == ("local_hourly", "daily")
    for field in ("lat", "lon", "elev", "sensor_height"):
        assert locations.rollups_to_mark({field}) == ("hourly", "local_hourly", "daily")
    assert locations.rollups_to_mark({"tz_name", "elev"}) == ("hourly", "local_hourly", "daily")
    # Crop coefficients feed only the daily crop columns (issue 34).
    assert locations.rollups_to_mark({"kc"}) == ("daily",)
    assert locations.rollups_to_mark({"kc_schedule", "notes"}) == ("daily",)
    assert locations.rollups_to_mark({"kc", "tz_name"}) == ("local_hourly", "daily")


def test_the_days_a_kc_change_changes() -> None:
    d = date
    entry = [(d(2026, 11, 20), 1.1)]
    # A new schedule entry: from its date on.
    assert locations.kc_changed_days(None, [], None, entry) == (d(2026, 11, 20), None)
    # A new default kc, with a schedule: only the days before the first entry.
    assert locations.kc_changed_days(0.8, entry, 0.9, entry) == (None, d(2026, 11, 20))
    # Without a schedule: every day.
    assert locations.kc_changed_days(0.8, [], 0.9, []) == (None, None)
    # An entry moved later: the days between the two starts.
    assert locations.kc_changed_days(
        None, entry, None, [(d(2026, 11, 25), 1.1)]) == (d(2026, 11, 20), d(2026, 11, 25))
    # An unchanged coefficient (float32 storage rounding aside): no day.
    assert locations.kc_changed_days(0.8999999761581421, entry, 0.9, entry) is None


def test_field_rules_pure() -> None:
    locations.check_field("elev", -430.0)  # the Dead Sea shore
    locations.check_field("kc", None)
    with pytest.raises(BadParameter, match="kc"):
        locations.check_field("kc", 3.5)
    with pytest.raises(BadParameter, match="lat"):
        locations.check_field("lat", True)
    with pytest.raises(BadParameter, match="sensor_height"):
        locations.check_field("sensor_height", None)
    with pytest.raises(BadParameter, match="kc_schedule"):
        locations.check_schedule([(date(2026, 1, 1), 1.0)] * 2)
