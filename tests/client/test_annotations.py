"""sds_client's annotations against gunicorn: create on a device and on a location, list as
records and as a DataFrame (filters, several pages), delete, and errors as ApiError."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest
from sds_client import ApiError, Client

from tests.support.data_world import PASSWORD_A1, World


def test_create_list_as_dataframe_and_delete(api_url: str, world: World) -> None:
    with Client(api_url, email=PASSWORD_A1[0], password=PASSWORD_A1[1]) as api:
        frost = api.create_annotation("frost damage on the lower rows", device="D1",
                                      start_time=datetime(2024, 7, 1, 4, tzinfo=UTC),
                                      end_time="2024-07-01T07:00:00Z", tags=["frost"])
        assert frost["device"] == "D1" and frost["author"] == PASSWORD_A1[0]
        visit = api.create_annotation("sensor cleaned", location=str(world.ny),
                                      start_time="2024-07-01T12:00:00Z", tags=["visit"])
        more = [api.create_annotation(f"note {i}", device="D1",
                                      start_time=f"2024-07-02T{i:02d}:00:00Z")
                for i in range(5)]

        frame = api.annotations_pandas(device="D1", page_size=2)  # three pages of two
        assert list(frame["id"]) == [frost["id"]] + [m["id"] for m in more]
        assert isinstance(frame["start_time"].dtype, pd.DatetimeTZDtype)
        assert str(frame["start_time"].dt.tz) == "UTC"
        assert frame.loc[0, "end_time"] == pd.Timestamp("2024-07-01T07:00:00Z")
        assert frame["end_time"].isna().sum() == 5  # instants
        assert frame.loc[0, "tags"] == ["frost"]

        assert [a["id"] for a in api.annotations(location=str(world.ny))] == [visit["id"]]
        assert [a["id"] for a in api.annotations(tags=["frost"])] == [frost["id"]]
        window = api.annotations(device="D1", start_time="2024-07-01T06:00:00Z",
                                 end_time=datetime(2024, 7, 2, 0, 30, tzinfo=UTC))
        assert [a["id"] for a in window] == [frost["id"], more[0]["id"]]
        empty = api.annotations_pandas(device="D2")
        assert empty.empty and "start_time" in empty.columns

        api.delete_annotation(visit["id"])
        assert api.annotations(location=str(world.ny)) == []
        with pytest.raises(ApiError) as caught:
            api.create_annotation("x" * 2001, device="D1", start_time="2024-07-01")
        assert caught.value.status == 400 and "text" in caught.value.message
        with pytest.raises(TypeError):
            api.create_annotation("no subject", start_time="2024-07-01")
