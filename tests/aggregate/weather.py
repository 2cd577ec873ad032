"""Generated weather for the reference ET tests: 5-minute readings of one local day at a
place, clear or overcast, with a diurnal cycle of temperature, humidity and wind.

Short-wave radiation is the clear-sky flux of each 5-minute slot (FAO-56 eq. 37 on the slot's
extraterrestrial radiation) times `sky` (the day's Rs/Rso): 0.15 is a heavy overcast, 0.95 a
clear day. Temperature peaks at 15 h local solar time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from shared.timeutil import zone
from tests.support import fao56_oracle as et

FIVE = timedelta(minutes=5)


@dataclass(frozen=True)
class Place:
    """Where and when: coordinates, zone, elevation, the local date and the sky."""

    name: str
    lat: float
    lon: float
    tz: str
    elev: float
    day: date
    sky: float  # Rs/Rso of every daylight slot
    tmean: float = 17.0
    tamp: float = 4.6
    rh_mean: float = 0.74

    def location_fields(self) -> dict[str, Any]:
        """Keyword arguments of tests.support.rollups.make_location."""
        return {"lat": self.lat, "lon": self.lon, "elev": self.elev}

    def day_bounds(self) -> tuple[datetime, datetime]:
        """[local midnight, next local midnight) of the day, as aware datetimes."""
        tz = zone(self.tz)
        start = datetime.combine(self.day, time(), tz)
        end = datetime.combine(self.day + timedelta(days=1), time(), tz)
        return start, end


def reading(place: Place, t: datetime) -> dict[str, Any]:
    """The 5-minute reading of `place` starting at `t` (aware)."""
    ra, _sun = et.period_geometry(t, t + FIVE, place.lat, place.lon)
    rso = et.clear_sky(ra, place.elev)  # MJ/m2 over 5 minutes
    swdw = place.sky * rso * 1e6 / FIVE.total_seconds()
    solar_hour = (t.timestamp() / 3600 + place.lon / 15) % 24
    wave = math.sin(2 * math.pi * (solar_hour - 9) / 24)  # +1 at 15 h, -1 at 03 h
    return {"time": t, "tair": round(place.tmean + place.tamp * wave, 3),
            "rh": round(min(1.0, max(0.05, place.rh_mean - 0.12 * wave)), 4),
            "wind_speed": round(2.0 + 0.6 * wave, 3), "swdw": round(swdw, 2)}


def day_readings(place: Place, until: datetime | None = None) -> list[dict[str, Any]]:
    """Every reading of the local day (up to `until`, for a partial day)."""
    start, end = (b.astimezone(UTC) for b in place.day_bounds())  # step in UTC, not wall time
    end = min(end, until) if until is not None else end
    out, t = [], start
    while t < end:
        out.append(reading(place, t))
        t += FIVE
    return out
