"""The FAO-56 humidity and atmosphere equations (Allen et al., 1998, chapter 3), written once.

Ingest derives dew point, vapour pressure and VPD with them (ingest/derive.py), the rollups'
reference evapotranspiration builds on them (the oracle tests/support/fao56_oracle.py), and
the SQL twin of that (migration 0061) is held equal to that oracle by a property test. Units
as stored: C, kPa, relative humidity as a fraction 0..1, m/s, metres.
"""

from __future__ import annotations

import math
from functools import lru_cache

# e°(T) = 0.6108 exp(17.27 T / (T + 237.3)) (eq. 11): the constants, shared by the inverse.
ES_A, ES_B, ES_C = 0.6108, 17.27, 237.3


def sat_vapour_pressure(t: float) -> float:
    """e°(T) in kPa at air temperature `t` C (eq. 11)."""
    return ES_A * math.exp(ES_B * t / (t + ES_C))


def vapour_slope(t: float, es: float | None = None) -> float:
    """Slope of the saturation vapour pressure curve at `t` C, kPa/C (eq. 13); `es` is e°(t)
    when already known."""
    return 4098 * (sat_vapour_pressure(t) if es is None else es) / (t + ES_C) ** 2


def dew_point(ea: float) -> float | None:
    """Dew point in C at which e°(Tdew) = ea (eq. 11 inverted, cf. eq. 14); None when ea <= 0."""
    if ea <= 0:
        return None
    x = math.log(ea / ES_A)
    return ES_C * x / (ES_B - x)


@lru_cache(maxsize=1024)
def pressure_at(elevation: float) -> float:
    """Atmospheric pressure (kPa) at `elevation` m (eq. 7)."""
    return 101.3 * float(((293 - 0.0065 * elevation) / 293) ** 5.26)


def psychrometric(pressure: float) -> float:
    """Psychrometric constant gamma (kPa/C) at `pressure` kPa (eq. 8)."""
    return 0.665e-3 * pressure


def wind_at_2m(speed: float, height: float) -> float:
    """Wind speed at 2 m from `speed` measured at `height` m (eq. 47)."""
    if abs(height - 2.0) < 1e-9:
        return speed
    return speed * 4.87 / math.log(67.8 * height - 5.42)
