"""The location field rules and which rollups a change re-cuts (shared/locations.py), alone."""

from __future__ import annotations

from datetime import date

import pytest

from shared import locations
from shared.errors import BadParameter


def test_which_rollups_a_change_marks() -> None:
    assert locations.rollups_to_mark({"name", "notes", "crop", "state"}) == ()
    assert locations.rollups_to_mark({"tz_name"}) == ("local_hourly", "daily")
    for field in ("lat", "lon", "elev", "kc", "sensor_height", "kc_schedule"):
        assert locations.rollups_to_mark({field}) == ("hourly", "local_hourly", "daily")
    assert locations.rollups_to_mark({"tz_name", "elev"}) == ("hourly", "local_hourly", "daily")


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
