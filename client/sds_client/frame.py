"""Rows of /data as a pandas DataFrame (the `pandas` extra)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

TIMESTAMP = "timestamp with time zone"


def _zone_name(local_time: str | None) -> str | None:
    """The IANA zone of a local_time parameter, or None for an offset or seconds."""
    if not local_time:
        return None
    text = local_time.strip()
    if text[:1] in "+-" or text.lstrip("+-").isdigit():
        return None
    return text


def to_frame(rows: Sequence[Mapping[str, Any]], columns: Sequence[Mapping[str, str]], *,
             units: Mapping[str, str], local_time: str | None) -> pd.DataFrame:
    """A DataFrame indexed by `time` (UTC), timestamp columns as UTC datetimes, `local_time`
    in the asked zone (or at the asked fixed offset); units and descriptions in `attrs`."""
    kinds = {c["column_name"]: c["data_type"] for c in columns}
    frame = pd.DataFrame.from_records(list(rows))
    if frame.empty:
        names = [c["column_name"] for c in columns]
        frame = pd.DataFrame(columns=names)
    for name in frame.columns:
        if kinds.get(name) == TIMESTAMP:
            frame[name] = pd.to_datetime(frame[name], utc=True, format="ISO8601")
        elif kinds.get(name) == "real":
            frame[name] = pd.to_numeric(frame[name]).astype("float64")
    if "local_time" in frame.columns and "time" in frame.columns:
        zone = _zone_name(local_time)
        if zone is not None:
            # The same instants as `time`, shown in the zone: DST-aware, one dtype.
            frame["local_time"] = frame["time"].dt.tz_convert(zone)
        else:
            frame["local_time"] = pd.to_datetime(frame["local_time"], format="ISO8601")
    if "time" in frame.columns:
        frame = frame.set_index("time")
    frame.attrs["units"] = dict(units)
    frame.attrs["descriptions"] = {c["column_name"]: c["description"] for c in columns
                                   if c["column_name"] in frame.columns
                                   or c["column_name"] == frame.index.name}
    return frame
