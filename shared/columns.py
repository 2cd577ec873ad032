"""The column registry: the single source of every served table and column.

Each data table is a tuple of `Column` records: name, SQL type, stored unit, measurement class
(which unit parameter converts it), rollup rule (how it is computed from the 5-minute
`calibrated` rows), output precision and the description served by `/api/v2/schemas/{table}`.
The SQL migrations, `select=` validation, unit conversion, rollup SQL and ingest validation all
read this module; a test asserts the database columns equal it.

Stored units (docs/spec/reference-facts.md decision 2): temperature C, pressure kPa,
precipitation mm, ratios as fractions 0..1, speed m/s. Descriptions name the default *output*
unit (C, mb, mm, %, m/s), since that is what a client sees without unit parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum


class Measure(StrEnum):
    """Measurement class; each maps to one unit query parameter (temp_delta shares `temp`)."""

    TEMP = "temp"
    TEMP_DELTA = "temp_delta"
    PRES = "pres"
    SIZE = "size"
    RATIO = "ratio"
    SPEED = "speed"


class Rollup(StrEnum):
    """How a rollup column is computed from its `source` column in `calibrated`."""

    KEY = "key"  # time, device, location: identity of the row
    INPUT = "input"  # sent by the device (calibrated / health only)
    DERIVED = "derived"  # computed at ingest from other inputs of the same reading
    MEAN = "mean"
    MIN = "min"
    MAX = "max"
    SUM = "sum"
    CIRCULAR_MEAN = "circular_mean"  # wind direction: mean of unit vectors
    COMPASS = "compass"  # 16-point heading of the circular mean direction
    MAX_RATE = "max_rate"  # largest 5-minute amount, as a rate per hour
    TIME_OF_MAX = "time_of_max"
    TIME_OF_MIN = "time_of_min"
    AT_MAX_OF = "at_max_of"  # value of `source` at the time of the maximum of `param`
    AT_MIN_OF = "at_min_of"  # value of `source` at the time of the minimum of `param`
    ENERGY = "energy"  # sum of flux x 300 s / 1e6 (MJ/m2 from W/m2, mol/m2 from umol/m2/s)
    HOURS_ABOVE = "hours_above"  # 5-minute slots with source > param, in hours
    HOURS_WITH_ANY = "hours_with_any"  # distinct clock hours with source > 0
    GDD = "gdd"  # max(0, (max + min) / 2 - base), base in `param`
    ET = "et"  # FAO-56 Penman-Monteith reference evapotranspiration
    ETC = "etc"  # et x kc
    KC = "kc"  # crop coefficient in force for the bucket
    WATER_BALANCE = "water_balance"  # precip - etc
    ROOT_ZONE = "root_zone"  # FAO-56 root-zone water balance of the day (shared/waterbalance.py)
    SAMPLE_PCT = "sample_pct"  # readings present / 5-minute slots in the bucket
    LOW_QUALITY = "low_quality"  # sample_pct below the configured share
    CREATE_TIME = "create_time"
    UPDATE_TIME = "update_time"


@dataclass(frozen=True, slots=True)
class Column:
    """One served column of one table."""

    name: str
    dtype: str  # SQL type as created and as served in `data_type`
    description: str
    unit: str | None = None  # stored unit
    measure: Measure | None = None
    rollup: Rollup = Rollup.INPUT
    source: str | None = None  # calibrated column a rollup reads
    param: float | str | None = None  # threshold, base temperature, or companion column
    precision: int = 2  # decimals after unit conversion
    valid_range: tuple[float, float] | None = None  # plausible range, stored units (ingest)

    @property
    def is_numeric(self) -> bool:
        """True for float columns (those that get unit conversion and rounding)."""
        return self.dtype in ("real", "double precision")


@dataclass(frozen=True, slots=True)
class Table:
    """A served data table: its columns, time basis and the default window and row cap."""

    name: str
    description: str
    columns: tuple[Column, ...]
    resolution: timedelta
    default_window: timedelta  # docs/spec/reference-facts.md decision 3
    row_cap: int  # default page size without `limit`

    def column(self, name: str) -> Column:
        """The column called `name`; KeyError when the table has none."""
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(name)

    @property
    def column_names(self) -> tuple[str, ...]:
        """Column names in registry (and database) order."""
        return tuple(c.name for c in self.columns)


TS = "timestamp with time zone"


def _keys(time_desc: str) -> tuple[Column, ...]:
    return (
        Column("time", TS, time_desc, rollup=Rollup.KEY),
        Column("device", "text", "Device name", rollup=Rollup.KEY),
        Column("location", "uuid", "Location id where the device stood", rollup=Rollup.KEY),
    )


_T, _P, _S, _R, _V = Measure.TEMP, Measure.PRES, Measure.SIZE, Measure.RATIO, Measure.SPEED

CALIBRATED = _keys("Time of the 5-minute reading (UTC)") + (
    Column("tair", "real", "Air temperature (C)", "C", _T, valid_range=(-60, 70)),
    Column("rh", "real", "Relative humidity (%)", "ratio", _R, valid_range=(0, 1)),
    Column("p", "real", "Station pressure (mb)", "kPa", _P, valid_range=(30, 110), precision=2),
    Column("precip", "real", "Precipitation (mm)", "mm", _S, valid_range=(0, 100)),
    Column("swdw", "real", "Downwelling short-wave radiation (W/m2)", "W/m2",
           valid_range=(0, 2000), precision=1),
    Column("swuw", "real", "Upwelling short-wave radiation (W/m2)", "W/m2",
           valid_range=(0, 2000), precision=1),
    Column("lwdw", "real", "Downwelling long-wave radiation (W/m2)", "W/m2",
           valid_range=(0, 1000), precision=1),
    Column("lwuw", "real", "Upwelling long-wave radiation (W/m2)", "W/m2",
           valid_range=(0, 1000), precision=1),
    Column("pardw", "real", "Downwelling photosynthetically active radiation (umol/m2/s)",
           "umol/m2/s", valid_range=(0, 3000), precision=1),
    Column("paruw", "real", "Upwelling photosynthetically active radiation (umol/m2/s)",
           "umol/m2/s", valid_range=(0, 3000), precision=1),
    Column("wind_speed", "real", "Wind speed (m/s)", "m/s", _V, valid_range=(0, 75)),
    Column("wind_gust", "real", "Wind gust (m/s)", "m/s", _V, valid_range=(0, 100)),
    Column("wind_direction", "real", "Wind direction, degrees clockwise from north", "deg",
           valid_range=(0, 360), precision=1),
    Column("tabove", "real", "Sky temperature, upward-looking infrared (C)", "C", _T,
           valid_range=(-100, 70)),
    Column("tbelow", "real", "Canopy temperature, downward-looking infrared (C)", "C", _T,
           valid_range=(-60, 80)),
    Column("lfw", "real", "Leaf wetness, minutes wet in the interval", "min",
           valid_range=(0, 5), precision=1),
    Column("tdew", "real", "Dew point temperature (C)", "C", _T, Rollup.DERIVED),
    Column("ea", "real", "Actual vapour pressure (mb)", "kPa", _P, Rollup.DERIVED, precision=3),
    Column("vpd", "real", "Vapour pressure deficit (mb)", "kPa", _P, Rollup.DERIVED,
           precision=3),
    Column("slp", "real", "Sea-level pressure (mb)", "kPa", _P, Rollup.DERIVED),
)

_HOURLY_VALUES = (
    Column("tair", "real", "Air temperature, mean (C)", "C", _T, Rollup.MEAN, "tair"),
    Column("maxt", "real", "Air temperature, maximum (C)", "C", _T, Rollup.MAX, "tair"),
    Column("mint", "real", "Air temperature, minimum (C)", "C", _T, Rollup.MIN, "tair"),
    Column("rh", "real", "Relative humidity, mean (%)", "ratio", _R, Rollup.MEAN, "rh"),
    Column("max_rh", "real", "Relative humidity, maximum (%)", "ratio", _R, Rollup.MAX, "rh"),
    Column("min_rh", "real", "Relative humidity, minimum (%)", "ratio", _R, Rollup.MIN, "rh"),
    Column("tdew", "real", "Dew point temperature, mean (C)", "C", _T, Rollup.MEAN, "tdew"),
    Column("max_tdew", "real", "Dew point temperature, maximum (C)", "C", _T, Rollup.MAX,
           "tdew"),
    Column("ea", "real", "Actual vapour pressure, mean (mb)", "kPa", _P, Rollup.MEAN, "ea",
           precision=3),
    Column("vpd", "real", "Vapour pressure deficit, mean (mb)", "kPa", _P, Rollup.MEAN, "vpd",
           precision=3),
    Column("slp", "real", "Sea-level pressure, mean (mb)", "kPa", _P, Rollup.MEAN, "slp"),
    Column("p", "real", "Station pressure, mean (mb)", "kPa", _P, Rollup.MEAN, "p"),
    Column("precip", "real", "Precipitation, total (mm)", "mm", _S, Rollup.SUM, "precip"),
    Column("prate", "real", "Precipitation rate, highest 5-minute rate (mm/h)", "mm/h", _S,
           Rollup.MAX_RATE, "precip"),
    Column("et", "real", "Reference evapotranspiration, FAO-56 hourly Penman-Monteith (mm)",
           "mm", _S, Rollup.ET),
    Column("etc", "real", "Crop evapotranspiration, et x kc (mm)", "mm", _S, Rollup.ETC),
    Column("swdw", "real", "Downwelling short-wave radiation, mean (W/m2)", "W/m2", None,
           Rollup.MEAN, "swdw", precision=1),
    Column("swuw", "real", "Upwelling short-wave radiation, mean (W/m2)", "W/m2", None,
           Rollup.MEAN, "swuw", precision=1),
    Column("lwdw", "real", "Downwelling long-wave radiation, mean (W/m2)", "W/m2", None,
           Rollup.MEAN, "lwdw", precision=1),
    Column("lwuw", "real", "Upwelling long-wave radiation, mean (W/m2)", "W/m2", None,
           Rollup.MEAN, "lwuw", precision=1),
    Column("pardw", "real", "Downwelling PAR, mean (umol/m2/s)", "umol/m2/s", None,
           Rollup.MEAN, "pardw", precision=1),
    Column("paruw", "real", "Upwelling PAR, mean (umol/m2/s)", "umol/m2/s", None,
           Rollup.MEAN, "paruw", precision=1),
    Column("tabove", "real", "Sky temperature, mean (C)", "C", _T, Rollup.MEAN, "tabove"),
    Column("tbelow", "real", "Canopy temperature, mean (C)", "C", _T, Rollup.MEAN, "tbelow"),
    Column("lfw", "real", "Leaf wetness, minutes wet in the hour", "min", None, Rollup.SUM,
           "lfw", precision=1),
    Column("wind_speed", "real", "Wind speed, mean (m/s)", "m/s", _V, Rollup.MEAN,
           "wind_speed"),
    Column("wind_speed_max", "real", "Wind speed, highest gust (m/s)", "m/s", _V, Rollup.MAX,
           "wind_gust"),
    Column("wind_speed_min", "real", "Wind speed, lowest 5-minute mean (m/s)", "m/s", _V,
           Rollup.MIN, "wind_speed"),
    Column("wind_direction", "real", "Wind direction, circular mean (degrees from north)",
           "deg", None, Rollup.CIRCULAR_MEAN, "wind_direction", precision=1),
    Column("wind_heading", "text", "Wind heading, 16-point compass of the mean direction",
           None, None, Rollup.COMPASS, "wind_direction"),
)


def _bookkeeping(expected: str) -> tuple[Column, ...]:
    return (
        Column("sample_pct", "real", f"Share of {expected} 5-minute readings present (%)",
               "ratio", _R, Rollup.SAMPLE_PCT, precision=1),
        Column("low_quality", "boolean", "True when sample_pct is below the quality threshold",
               rollup=Rollup.LOW_QUALITY),
        Column("create_time", TS, "When this row was first computed (UTC)",
               rollup=Rollup.CREATE_TIME),
        Column("update_time", TS, "When this row was last recomputed (UTC)",
               rollup=Rollup.UPDATE_TIME),
    )


HOURLY = _keys("Start of the UTC hour") + _HOURLY_VALUES + _bookkeeping("the hour's 12")
LOCAL_HOURLY = (
    _keys("Start of the device-local hour, as a UTC instant")
    + _HOURLY_VALUES
    + _bookkeeping("the local hour's")
)

DAILY = _keys("Start of the device-local day (local midnight, or the first valid instant), "
              "as a UTC instant") + (
    Column("meant", "real", "Air temperature, mean (C)", "C", _T, Rollup.MEAN, "tair"),
    Column("maxt", "real", "Air temperature, maximum (C)", "C", _T, Rollup.MAX, "tair"),
    Column("mint", "real", "Air temperature, minimum (C)", "C", _T, Rollup.MIN, "tair"),
    Column("maxt_time", TS, "Time of the maximum air temperature (UTC)", None, None,
           Rollup.TIME_OF_MAX, "tair"),
    Column("mint_time", TS, "Time of the minimum air temperature (UTC)", None, None,
           Rollup.TIME_OF_MIN, "tair"),
    Column("mean_rh", "real", "Relative humidity, mean (%)", "ratio", _R, Rollup.MEAN, "rh"),
    Column("max_rh", "real", "Relative humidity, maximum (%)", "ratio", _R, Rollup.MAX, "rh"),
    Column("min_rh", "real", "Relative humidity, minimum (%)", "ratio", _R, Rollup.MIN, "rh"),
    Column("rh_at_maxt", "real", "Relative humidity at the time of maximum temperature (%)",
           "ratio", _R, Rollup.AT_MAX_OF, "rh", "tair"),
    Column("rh_at_mint", "real", "Relative humidity at the time of minimum temperature (%)",
           "ratio", _R, Rollup.AT_MIN_OF, "rh", "tair"),
    Column("slp", "real", "Sea-level pressure, mean (mb)", "kPa", _P, Rollup.MEAN, "slp"),
    Column("tdew", "real", "Dew point temperature, mean (C)", "C", _T, Rollup.MEAN, "tdew"),
    Column("max_tdew", "real", "Dew point temperature, maximum (C)", "C", _T, Rollup.MAX,
           "tdew"),
    Column("tdew_at_mint", "real", "Dew point at the time of minimum temperature (C)", "C", _T,
           Rollup.AT_MIN_OF, "tdew", "tair"),
    Column("ea", "real", "Actual vapour pressure, mean (mb)", "kPa", _P, Rollup.MEAN, "ea",
           precision=3),
    Column("vpd", "real", "Vapour pressure deficit, mean (mb)", "kPa", _P, Rollup.MEAN, "vpd",
           precision=3),
    Column("et", "real", "Reference evapotranspiration, FAO-56 daily Penman-Monteith (mm/day); "
           "while low_quality, the sum of the hours measured so far (mm)", "mm", _S, Rollup.ET),
    Column("etc", "real", "Crop evapotranspiration, et x kc (mm/day)", "mm", _S, Rollup.ETC),
    Column("kc", "real", "Crop coefficient in force for the day", None, None, Rollup.KC,
           precision=3),
    Column("crop_water_demand", "real", "Crop water demand, precip - etc (mm/day)", "mm", _S,
           Rollup.WATER_BALANCE),
    Column("precip", "real", "Precipitation, total (mm/day)", "mm", _S, Rollup.SUM, "precip"),
    Column("precip_hours", "real", "Hours with precipitation (h)", "h", None,
           Rollup.HOURS_WITH_ANY, "precip", precision=0),
    Column("swdw", "real", "Downwelling short-wave energy (MJ/m2/day)", "MJ/m2", None,
           Rollup.ENERGY, "swdw", precision=3),
    Column("dli", "real", "Daily light integral (mol/m2/day)", "mol/m2", None, Rollup.ENERGY,
           "pardw", precision=3),
    Column("sunshine_duration", "real",
           "Sunshine duration, hours with short-wave radiation above 120 W/m2 (h)", "h", None,
           Rollup.HOURS_ABOVE, "swdw", 120.0, precision=2),
    Column("mean_tbelow", "real", "Canopy temperature, mean (C)", "C", _T, Rollup.MEAN,
           "tbelow"),
    Column("wind_speed", "real", "Wind speed, mean (m/s)", "m/s", _V, Rollup.MEAN,
           "wind_speed"),
    Column("wind_speed_max", "real", "Wind speed, highest gust (m/s)", "m/s", _V, Rollup.MAX,
           "wind_gust"),
    Column("wind_speed_min", "real", "Wind speed, lowest 5-minute mean (m/s)", "m/s", _V,
           Rollup.MIN, "wind_speed"),
    Column("wind_direction", "real", "Wind direction, circular mean (degrees from north)",
           "deg", None, Rollup.CIRCULAR_MEAN, "wind_direction", precision=1),
    Column("gdd", "real", "Growing degree days, base 10 C (C day)", "C day",
           Measure.TEMP_DELTA, Rollup.GDD, "tair", 10.0),
    Column("heat_stress_hours", "real", "Hours with air temperature above 30 C (h)", "h", None,
           Rollup.HOURS_ABOVE, "tair", 30.0),
    Column("lfw", "real", "Leaf wetness, hours wet in the day (h)", "h", None, Rollup.SUM,
           "lfw", precision=2),
) + _bookkeeping("the local day's")

_RZ = Rollup.ROOT_ZONE
WATER_BALANCE = _keys("Start of the device-local day (local midnight, or the first valid "
                      "instant), as a UTC instant") + (
    Column("et", "real", "Reference evapotranspiration of the day, the daily row's et (mm)",
           "mm", _S, _RZ),
    Column("kc", "real", "Crop coefficient in force for the day", None, None, _RZ,
           precision=3),
    Column("etc", "real", "Crop evapotranspiration without water stress, et x kc (mm)", "mm",
           _S, _RZ),
    Column("precip", "real", "Precipitation, all of it effective (no runoff) (mm)", "mm", _S,
           _RZ),
    Column("irrigation", "real", "Irrigation applied, the location's events of the day (mm)",
           "mm", _S, _RZ),
    Column("root_depth", "real", "Root depth Zr (m)", "m", None, _RZ, precision=3),
    Column("taw", "real", "Total available water in the root zone, TAW (FAO-56 eq. 82) (mm)",
           "mm", _S, _RZ),
    Column("p", "real", "Depletion fraction p for no stress, adjusted to etc (FAO-56 Table 22)",
           None, None, _RZ, precision=3),
    Column("raw", "real", "Readily available water, RAW = p x TAW (FAO-56 eq. 83) (mm)", "mm",
           _S, _RZ),
    Column("ks", "real", "Water stress coefficient Ks (FAO-56 eq. 84), 1 without stress",
           None, None, _RZ, precision=3),
    Column("etc_adj", "real", "Crop evapotranspiration under water stress, ks x etc (mm)",
           "mm", _S, _RZ),
    Column("deep_percolation", "real", "Water drained below the roots, DP (FAO-56 eq. 88) (mm)",
           "mm", _S, _RZ),
    Column("depletion", "real", "Root-zone depletion Dr at the end of the day (FAO-56 eq. 85), "
           "0 at field capacity (mm)", "mm", _S, _RZ),
    Column("days_to_raw", "real", "Days until the depletion reaches RAW with no rain, at the "
           "mean etc of the last 7 days (0: at or beyond RAW now)", "d", None, _RZ, precision=0),
) + _bookkeeping("the day's")

HEALTH = _keys("Time of the health report (UTC)") + (
    Column("batt_pct", "real", "Battery charge (%)", "%", valid_range=(0, 100), precision=1),
    Column("batt_volt", "real", "Battery voltage (V)", "V", valid_range=(0, 30), precision=3),
    Column("rssi", "real", "Radio signal strength (dBm)", "dBm", valid_range=(-150, 0),
           precision=0),
    Column("sys_temp", "real", "System (logger board) temperature (C)", "C", _T,
           valid_range=(-60, 100)),
    Column("fw", "text", "Firmware version reported", None),
)

_DAY = timedelta(days=1)
TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table("calibrated", "5-minute readings as received, with derived humidity and pressure",
              CALIBRATED, timedelta(minutes=5), 7 * _DAY, 2050),
        Table("hourly", "UTC hourly rollups of calibrated", HOURLY, timedelta(hours=1),
              100 * _DAY, 2400),
        Table("local_hourly", "Device-local hourly rollups of calibrated", LOCAL_HOURLY,
              timedelta(hours=1), 100 * _DAY, 2400),
        Table("daily", "Device-local daily rollups with evapotranspiration and crop water demand",
              DAILY, _DAY, 730 * _DAY, 730),
        Table("health", "Device health reports", HEALTH, timedelta(minutes=5), 7 * _DAY, 2050),
        Table("water_balance", "FAO-56 root-zone water balance per device-local day, at "
              "locations with soil and root settings", WATER_BALANCE, _DAY, 730 * _DAY, 730),
    )
}

ROLLUP_TABLES = ("hourly", "local_hourly", "daily")

# Columns a device may send in a reading, and the derived ones computed at ingest.
READING_INPUTS = tuple(c for c in CALIBRATED if c.rollup is Rollup.INPUT)
HEALTH_INPUTS = tuple(c for c in HEALTH if c.rollup is Rollup.INPUT)


def table(name: str) -> Table:
    """The table called `name`; KeyError when there is none."""
    return TABLES[name]


def reading_rule(name: str) -> Rollup:
    """How the calibrated column `name` aggregates over a span of readings (`/data`'s
    `interval=`): the rule of the hourly column rolled up from it under the same name, else of
    the one hourly column rolled up from it (wind_gust: the hour's highest gust)."""
    rolled = [c for c in HOURLY if c.source == name]
    same = [c for c in rolled if c.name == name]
    if same:
        return same[0].rollup
    if len(rolled) == 1:
        return rolled[0].rollup
    raise KeyError(f"no single hourly rule rolls up calibrated column {name}")
