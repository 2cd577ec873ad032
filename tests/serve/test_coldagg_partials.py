"""serve.coldagg's pure parts alone: which reading columns an aggregated page needs, UTC
bucketing as `time_bucket` does it, and the per-bucket partials each rule merges (the SQL
merge is tested against the hot page in test_cold_aggregation.py)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from serve import coldagg
from serve.aggregation import output_columns
from shared.columns import TABLES

CAL = TABLES["calibrated"]
T0 = datetime(2024, 7, 31, 23, 0, tzinfo=UTC)


Row = tuple[datetime, str, str | None, float | None, float | None]


def _table(rows: list[Row]) -> pa.Table:
    times, devices, places, tair, wd = zip(*rows, strict=True)
    return pa.table({"time": pa.array(times, pa.timestamp("us", tz="UTC")),
                     "device": pa.array(devices, pa.string()),
                     "location": pa.array(places, pa.string()),
                     "tair": pa.array(tair, pa.float32()),
                     "wind_direction": pa.array(wd, pa.float32())})


def test_reading_names_are_keys_and_the_sources_of_the_columns_asked_for() -> None:
    columns = output_columns((CAL.column("time"), CAL.column("tair"), CAL.column("precip")))
    assert coldagg.reading_names(columns) == ("time", "device", "location", "tair", "precip")


def test_partials_per_bucket_device_and_location() -> None:
    five = timedelta(minutes=5)
    rows: list[Row] = [(T0 + i * five, "D1", "L1" if i < 14 else "L2", 21.3 + i,
                        350.0 if i % 2 else 10.0) for i in range(15)]
    rows.append((T0, "D2", None, None, None))
    table = _table(rows)
    micros = table.column("time").cast(pa.int64()).to_numpy()
    hour = 3_600_000_000
    columns = tuple(c for c in output_columns((CAL.column("tair"), CAL.column("wind_direction"))))
    parts = coldagg._partials(table, columns, ((micros // hour) * hour, ["UTC"] * len(rows)))
    got = {(r["time"], r["device"], r["location"]): r for r in parts.to_pylist()}
    first = got[(T0, "D1", "L1")]
    tair = [float(np.float32(21.3 + i)) for i in range(12)]
    assert first["n"] == 12 and first["last_t"] == T0 + 11 * five
    assert first["tair__sum"] == sum(tair) and first["tair__count"] == 12
    assert first["tair_min__min"] == min(tair) and first["tair_max__max"] == max(tair)
    assert math.isclose(first["wind_direction__cos"], 12 * math.cos(math.radians(10.0)))
    assert abs(first["wind_direction__sin"]) < 1e-12  # 10 and 350 degrees cancel
    assert got[(T0 + timedelta(hours=1), "D1", "L1")]["n"] == 2
    assert got[(T0 + timedelta(hours=1), "D1", "L2")]["n"] == 1  # moved within the hour
    empty = got[(T0, "D2", None)]
    assert empty["n"] == 1 and empty["tair__sum"] is None and empty["tair__count"] == 0
    assert empty["wind_direction__sin"] is None
