"""Sync.sync() mirrors `daily` exactly across a late reading: readings rolled up by the real
rollup code, the API under gunicorn, a late reading re-aggregated (its day's update_time
moves), and the mirror built only from what each sync() returned ends equal to the server's
table; the watermark survives in a state file."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sds_client import ApiError, Client, Sync

from people import accounts
from shared import places
from testbed.apiserver import gunicorn_api
from tests.support.figures import Figures
from tests.support.readings import insert_readings, series
from tests.support.rollups import run_all

START = datetime(2024, 7, 1, 5, tzinfo=UTC)  # local midnight in Chicago (CDT)
DAYS = 5
LATE = START + timedelta(days=2, hours=13, minutes=35)
WATERMARK_MARGIN = 1.1  # rows become listable once the watermark (1 s behind) passes them


@pytest.fixture
def farm(database_url: str, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """Device L1 at a Chicago location with DAYS days of readings (one slot missing), rolled
    up; the API under gunicorn. Yields (database url, API url, API key)."""
    with psycopg.connect(database_url) as conn:
        org = accounts.create_org(conn, name="Sync Farm")
        user = accounts.create_user(conn, org=org, email="s@farm.example", password="farm-pw-1")
        loc = places.create_location(conn, org=org, loc=places.LocationInput(
            name="Field", tz_name="America/Chicago", lat=41.9, lon=-87.6, elev=180.0, kc=1.0))
        places.register_device(conn, org=org, name="L1")
        places.deploy_device(conn, device="L1", location=loc, start=START - timedelta(days=1))
        readings = series(START, START + timedelta(days=DAYS),
                          tair=lambda i, t: 15.0 + (i % 144) / 12, rh=lambda i, t: 0.6,
                          wind_speed=lambda i, t: 2.0, swdw=lambda i, t: 250.0)
        insert_readings(conn, "L1", loc, [r for r in readings if r["time"] != LATE], marks=True)
        run_all(conn)
        key = accounts.create_api_key(conn, user=user, scopes=["data:read"])["apikey"]
        conn.commit()
    with gunicorn_api(database_url, tmp_path) as base:
        yield database_url, base, key


def _server_table(client: Client) -> dict[tuple[str, str], dict[str, Any]]:
    """The server's daily table of L1, all columns, through a plain listing."""
    return {(r["device"], r["time"]): r for r in client.rows(
        "daily", device="L1", start_time="2000-01-01", end_time="2100-01-01")}


def _apply(mirror: dict[tuple[str, str], dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    for row in rows:
        mirror[(row["device"], row["time"])] = row


def test_sync_mirrors_daily_across_a_late_reading(farm: tuple[str, str, str],
                                                  tmp_path: Path, figures: Figures) -> None:
    url, base, key = farm
    state = tmp_path / "daily-L1.json"
    mirror: dict[tuple[str, str], dict[str, Any]] = {}
    with Client(base, apikey=key) as client:
        sync = client.sync("daily", device="L1", state=state)
        time.sleep(WATERMARK_MARGIN)
        first = sync.sync()
        _apply(mirror, first)
        table = _server_table(client)
        assert len(table) >= DAYS and mirror == table
        watermark = sync.watermark
        assert watermark and state.exists()

        # Nothing changed: nothing comes back, and the watermark moves on.
        assert sync.sync() == []

        # A late reading with the day's highest temperature, then the scheduler's recompute.
        with psycopg.connect(url) as conn:
            loc = conn.execute("SELECT id FROM locations WHERE name = 'Field'").fetchone()[0]
            insert_readings(conn, "L1", loc, [{"time": LATE, "tair": 45.0, "rh": 0.6,
                                               "wind_speed": 2.0, "swdw": 250.0}], marks=True)
            conn.commit()
            assert run_all(conn) == 3  # hourly, local_hourly and daily bucket of that reading
            conn.commit()
        time.sleep(WATERMARK_MARGIN)
        changed = sync.sync()
        assert [r["time"] for r in changed] == ["2024-07-03T05:00:00Z"]
        assert changed[0]["maxt"] == 45.0 and changed[0]["update_time"] > first[0]["update_time"]
        _apply(mirror, changed)
        assert mirror == _server_table(client)
        figures.record("sync.late_reading_rows", f"{len(changed)} of {len(mirror)}",
                       section="rollup",
                       title="Rows an incremental sync() of daily pulls after one late reading",
                       target="only the recomputed day",
                       source="tests/client/test_sync.py")
        with psycopg.connect(url) as conn:
            stored = conn.execute("SELECT count(*), max(maxt), max(update_time) FROM daily"
                                  " WHERE device = 'L1'").fetchone()
        assert stored is not None and stored[0] == len(mirror) and stored[1] == 45.0
        newest = max(datetime.fromisoformat(r["update_time"].replace("Z", "+00:00"))
                     for r in mirror.values())
        assert newest == stored[2]

        # A new process resumes from the state file: only later changes.
        resumed = Sync(client, "daily", device="L1", state=state)
        assert resumed.watermark == sync.watermark and resumed.sync() == []
        with pytest.raises(ValueError, match="belongs to another listing"):
            Sync(client, "daily", device="L2", state=state)


def test_sync_pandas_and_a_table_without_update_time(farm: tuple[str, str, str]) -> None:
    _url, base, key = farm
    with Client(base, apikey=key) as client:
        time.sleep(WATERMARK_MARGIN)
        frame = client.sync("hourly", device="L1", select="time,device,tair,update_time",
                            local_time="America/Chicago").sync_pandas()
        assert len(frame) == DAYS * 24 and frame.index.name == "time"
        assert str(frame["local_time"].dt.tz) == "America/Chicago"
        assert frame.attrs["units"] == {"temp": "C"}
        with pytest.raises(ApiError) as caught:
            client.sync("calibrated", device="L1").sync()
        assert caught.value.status == 400 and "no update_time" in caught.value.message
