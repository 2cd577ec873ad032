"""The FAO-56 root-zone water balance (chapter 8, single crop coefficient) as pure functions:
one day's step from yesterday's depletion, a run over days, and the forecast (FAO-56: Allen,
Pereira, Raes and Smith 1998).

Per day i (eqs. 82-88):

- TAW = 1000 (theta_fc - theta_wp) Zr (eq. 82), Zr the root depth that day (constant, or
  growing linearly between two dates);
- p = p_table + 0.04 (5 - ETc), bounded to 0.1..0.8 (Table 22 and the adjustment below it),
  ETc = Kc ET0 of the day; RAW = p TAW (eq. 83);
- Ks = (TAW - Dr[i-1]) / (TAW - RAW) when Dr[i-1] > RAW, else 1 (eq. 84), bounded to 0..1;
- ETc adj = Ks Kc ET0 (eq. 80);
- effective precipitation = the measured `precip` (no runoff: RO = 0; water beyond field
  capacity leaves as deep percolation, so a downpour cannot over-fill the root zone);
- DP = max(0, P + I - ETc adj - Dr[i-1]) (eq. 88);
- Dr = Dr[i-1] - P - I + ETc adj + DP (eq. 85), bounded to 0..TAW (eq. 86).

Capillary rise is 0 (a water table more than about 1 m below the roots). These are the
equations pyfao56 (USDA-ARS) runs with its soil evaporation switched off
(tests/waterbalance/test_reference.py holds them equal). A day without ET0 or Kc has no crop
water use in the balance (ETc and ETc adj None): it only takes in its rain and irrigation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date

# FAO-56 Table 19: typical soil water characteristics, theta_fc and theta_wp (m3/m3), the
# middle of each range the table gives.
SOILS: dict[str, tuple[float, float]] = {
    "sand": (0.12, 0.045),
    "loamy sand": (0.15, 0.065),
    "sandy loam": (0.23, 0.11),
    "loam": (0.25, 0.12),
    "silt loam": (0.29, 0.15),
    "silt": (0.32, 0.17),
    "silty clay loam": (0.335, 0.205),
    "silty clay": (0.36, 0.23),
    "clay": (0.36, 0.22),
}

# FAO-56 Table 22: the soil water depletion fraction for no stress p, for ETc about 5 mm/day.
CROP_P: dict[str, float] = {
    "alfalfa": 0.55, "apple": 0.5, "banana": 0.35, "bean": 0.45, "broccoli": 0.45,
    "cabbage": 0.45, "carrot": 0.35, "citrus": 0.5, "cotton": 0.65, "grape": 0.35,
    "wine grape": 0.45, "grass": 0.5, "lettuce": 0.3, "maize": 0.55, "olive": 0.65,
    "onion": 0.3, "pepper": 0.3, "potato": 0.35, "soybean": 0.5, "spinach": 0.2,
    "strawberry": 0.2, "sugar beet": 0.55, "tomato": 0.4, "turf cool season": 0.4,
    "turf warm season": 0.5, "wheat": 0.55,
}

P_MIN, P_MAX = 0.1, 0.8


@dataclass(frozen=True, slots=True)
class Soil:
    """Field capacity and wilting point, volumetric (m3/m3)."""

    theta_fc: float
    theta_wp: float

    @classmethod
    def named(cls, name: str) -> Soil:
        """The FAO-56 Table 19 class `name` (KeyError naming it otherwise)."""
        fc, wp = SOILS[name.strip().lower()]
        return cls(fc, wp)

    def __post_init__(self) -> None:
        if not 0 <= self.theta_wp < self.theta_fc <= 1:
            raise ValueError("soil needs 0 <= theta_wp < theta_fc <= 1")


@dataclass(frozen=True, slots=True)
class Roots:
    """Root depth (m): `start_m` until `start`, growing linearly to `end_m` at `end`
    (FAO-56 p. 279); constant when both depths are equal or no dates are given."""

    start_m: float
    end_m: float | None = None
    start: date | None = None
    end: date | None = None

    def depth(self, day: date) -> float:
        """Root depth on `day` (m)."""
        end_m = self.start_m if self.end_m is None else self.end_m
        if self.start is None or self.end is None or self.end <= self.start:
            return end_m if self.start is not None and day >= self.start else self.start_m
        if day <= self.start:
            return self.start_m
        if day >= self.end:
            return end_m
        share = (day - self.start).days / (self.end - self.start).days
        return self.start_m + (end_m - self.start_m) * share


@dataclass(frozen=True, slots=True)
class Settings:
    """A location's balance: soil, roots, Table 22 p."""

    soil: Soil
    roots: Roots
    p_table: float

    def __post_init__(self) -> None:
        if not 0 < self.p_table < 1:
            raise ValueError("p must lie between 0 and 1")


@dataclass(frozen=True, slots=True)
class Inputs:
    """One day's inputs: ET0 and Kc (None when unknown), precipitation and irrigation (mm)."""

    day: date
    et0: float | None
    kc: float | None
    precip: float | None = None
    irrigation: float = 0.0


@dataclass(frozen=True, slots=True)
class Day:
    """One day of the balance, end-of-day depletion `dr` (mm)."""

    day: date
    zr: float
    taw: float
    p: float
    raw: float
    etc: float | None
    ks: float
    etc_adj: float | None
    precip: float
    irrigation: float
    dp: float
    dr: float


def depletion_fraction(p_table: float, etc: float | None) -> float:
    """p adjusted to the day's ETc (FAO-56 Table 22 note): p + 0.04 (5 - ETc), 0.1..0.8;
    the table value when ETc is unknown."""
    if etc is None:
        return p_table
    return min(max(p_table + 0.04 * (5.0 - etc), P_MIN), P_MAX)


def stress(dr: float, taw: float, raw: float) -> float:
    """Ks (eq. 84) at depletion `dr`."""
    if dr <= raw or taw <= raw:
        return 1.0
    return min(max((taw - dr) / (taw - raw), 0.0), 1.0)


def step(dr_prev: float, inputs: Inputs, settings: Settings) -> Day:
    """One day of the balance from yesterday's end-of-day depletion `dr_prev`."""
    zr = settings.roots.depth(inputs.day)
    taw = 1000.0 * (settings.soil.theta_fc - settings.soil.theta_wp) * zr
    etc = inputs.et0 * inputs.kc if inputs.et0 is not None and inputs.kc is not None else None
    p = depletion_fraction(settings.p_table, etc)
    raw = p * taw
    dr_prev = min(max(dr_prev, 0.0), taw)  # roots that shrink (a new season) cap it
    ks = stress(dr_prev, taw, raw)
    etc_adj = ks * etc if etc is not None else None
    water = max(inputs.precip or 0.0, 0.0) + max(inputs.irrigation, 0.0)
    use = etc_adj or 0.0
    dp = max(water - use - dr_prev, 0.0)
    dr = min(max(dr_prev - water + use + dp, 0.0), taw)
    return Day(inputs.day, zr, taw, p, raw, etc, ks, etc_adj, max(inputs.precip or 0.0, 0.0),
               max(inputs.irrigation, 0.0), dp, dr)


def run(days: Iterable[Inputs], settings: Settings, dr0: float = 0.0) -> list[Day]:
    """The balance over consecutive `days`, starting from depletion `dr0` (0: the root zone
    at field capacity, as after a soaking rain or irrigation)."""
    out: list[Day] = []
    dr = dr0
    for d in days:
        out.append(step(dr, d, settings))
        dr = out[-1].dr
    return out


FORECAST_DAYS = 7  # the recent days whose mean ETc the forecast assumes


@dataclass(frozen=True, slots=True)
class Forecast:
    """When to irrigate: days until Dr reaches RAW with no rain at the recent mean ETc (0:
    now; None: no recent ETc), and the depth (mm) that refills the root zone to field
    capacity today."""

    days_to_raw: int | None
    refill_mm: float
    mean_etc: float | None


def forecast(history: Sequence[Day], window: int = FORECAST_DAYS) -> Forecast | None:
    """The forecast from the balance's last day: Dr grows by the mean ETc of the last
    `window` days with ETc (no rain, no stress before RAW); days until it exceeds that day's
    RAW, and today's refill depth Dr. None without any day."""
    if not history:
        return None
    last = history[-1]
    recent = [d.etc for d in history[-window:] if d.etc is not None]
    mean = sum(recent) / len(recent) if recent else None
    if last.dr >= last.raw:
        days: int | None = 0
    elif mean is None or mean <= 0:
        days = None
    else:
        # The first whole day at whose end Dr >= RAW.
        days = int(-(-(last.raw - last.dr) // mean))
    return Forecast(days, last.dr, mean)
