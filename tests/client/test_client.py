"""sds_client against gunicorn: the three ways to authenticate, the cursor-following iterator,
DataFrames with a time index, local time and units, CSV and Parquet export through
`sds-client export`, the tqdm progress bar, and errors as ApiError."""

from __future__ import annotations

import io
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import psycopg
import pytest
from sds_client import ApiError, Client
from sds_client.cli import main as cli_main

from people import accounts
from tests.support.data_world import D4_ROWS, PASSWORD_A1, T0, World
from tests.support.readings import stepped_tair

REPO = Path(__file__).resolve().parents[2]
WINDOW = {"start_time": "2024-07-01", "end_time": "2024-07-03"}


@pytest.mark.parametrize("mode", ["apikey", "bearer", "basic"])
def test_every_auth_mode_reads_rows(api_url: str, world: World, mode: str) -> None:
    if mode == "apikey":
        client = Client(api_url, apikey=world.keys["a"])
    elif mode == "bearer":
        client = Client.login(api_url, email=PASSWORD_A1[0], password=PASSWORD_A1[1])
        assert client.transport.session.headers["Authorization"].startswith("Bearer sdst_")
    else:
        client = Client(api_url + "/api/v2/", email=PASSWORD_A1[0], password=PASSWORD_A1[1])
    with client:
        assert "daily" in client.tables()
        rows = list(client.rows("calibrated", device="D1", select="time,tair", page_size=3,
                                max_rows=3, **WINDOW))
    assert rows == [{"time": f"2024-07-01T00:{m:02d}:00Z", "tair": stepped_tair(i)}
                    for i, m in enumerate((0, 5, 10))]


def test_wrong_credentials_and_bad_parameters_raise_api_error(api_url: str,
                                                              world: World) -> None:
    with Client(api_url, email="a1@a.example", password="wrong") as client:
        with pytest.raises(ApiError) as caught:
            client.tables()
    assert caught.value.status == 401
    with Client(api_url, apikey=world.keys["a"]) as client:
        with pytest.raises(ApiError) as caught:
            list(client.rows("hourly", device="D1", select="tair,bogus"))
        assert caught.value.status == 400 and "bogus" in caught.value.message
        with pytest.raises(ApiError) as caught:
            list(client.rows("hourly", device="B1"))  # org B's device
        assert caught.value.status == 404
    with pytest.raises(ValueError, match="exactly one"):
        Client(api_url, apikey="x", token="y")


def test_iterator_follows_cursors_across_pages(api_url: str, world: World) -> None:
    with Client(api_url, apikey=world.keys["a"]) as client:
        listing = client.rows("calibrated", device="D4", select="time", page_size=1000,
                              start_time=T0, end_time=datetime(2024, 7, 31, tzinfo=UTC))
        times = [r["time"] for r in listing]
    assert listing.pages == 3
    assert len(times) == D4_ROWS == len(set(times))
    assert times == sorted(times) and times[0] == "2024-07-01T00:00:00Z"


def test_to_pandas_time_index_local_time_and_units(api_url: str, world: World) -> None:
    with Client(api_url, apikey=world.keys["a"]) as client:
        frame = client.to_pandas("hourly", device="D1", start_time="2024-07-01",
                                 end_time="2024-07-01T05:00:00Z", select="time,tair,rh,update_time",
                                 local_time="America/New_York", temp="f", page_size=4)
    assert isinstance(frame.index, pd.DatetimeIndex) and frame.index.name == "time"
    assert str(frame.index.tz) == "UTC" and len(frame) == 6
    assert frame.index[0] == pd.Timestamp("2024-07-01T00:00:00Z")
    assert str(frame["local_time"].dt.tz) == "America/New_York"
    assert frame["local_time"].iloc[0] == pd.Timestamp("2024-06-30T20:00:00-04:00")
    assert frame["tair"].dtype == "float64" and frame["tair"].iloc[0] == pytest.approx(70.34)
    assert str(frame["update_time"].dt.tz) == "UTC"
    assert frame.attrs["units"] == {"temp": "F", "ratio": "pct"}
    assert "Air temperature" in frame.attrs["descriptions"]["tair"]


def test_to_pandas_flat_offset_and_empty_listing(api_url: str, world: World) -> None:
    with Client(api_url, apikey=world.keys["a"]) as client:
        frame = client.to_pandas("hourly", device="D1", start_time="2024-07-01",
                                 end_time="2024-07-01T01:00:00Z", select="time,tair",
                                 local_time="-25200")
        empty = client.to_pandas("hourly", device="D1", start_time="2030-01-01",
                                 end_time="2030-01-02", select="time,tair")
    assert frame["local_time"].iloc[0] == pd.Timestamp("2024-06-30T17:00:00-07:00")
    assert empty.empty and empty.index.name == "time"


def test_buckets_through_the_client(api_url: str, world: World) -> None:
    """interval= pages like rows; to_pandas keeps the band and bookkeeping columns (D2 has
    no stored hourly rows: the buckets are computed from its readings)."""
    window = {"start_time": T0, "end_time": datetime(2024, 7, 1, 23, tzinfo=UTC)}
    with Client(api_url, apikey=world.keys["a"]) as client:
        listing = client.rows("calibrated", device="D2", interval="1h", select="time,tair",
                              page_size=10, **window)
        buckets = list(listing)
        frame = client.to_pandas("calibrated", device="D2", points=6, select="time,tair",
                                 temp="f", **window)
    assert listing.pages == 3 and len(buckets) == 24
    first = [stepped_tair(i) for i in range(12)]
    assert buckets[0] == {"time": "2024-07-01T00:00:00Z", "tair": round(sum(first) / 12, 2),
                          "tair_min": min(first), "tair_max": max(first), "samples": 12,
                          "expected": 12, "complete": True}
    assert len(frame) == 6 and str(frame.index.tz) == "UTC"  # 4h buckets: 23 h / 4 + 1
    assert list(frame.columns) == ["tair", "tair_min", "tair_max", "samples", "expected",
                                   "complete"]
    assert frame["samples"].tolist() == [48] * 6 and frame.attrs["units"] == {"temp": "F"}


def test_progress_bar_for_long_pulls(api_url: str, world: World,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    with Client(api_url, apikey=world.keys["a"]) as client:
        rows = list(client.rows("calibrated", device="D4", select="time", page_size=1000,
                                start_time=T0, end_time="2024-07-31", progress=True))
    assert len(rows) == D4_ROWS
    err = capsys.readouterr().err
    assert "calibrated" in err and "2500" in err and "rows" in err


def test_cli_exports_csv_and_parquet(api_url: str, world: World, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDS_URL", api_url)
    monkeypatch.setenv("SDS_APIKEY", world.keys["a"])
    csv_path, parquet_path = tmp_path / "d4.csv", tmp_path / "d1.parquet"
    assert cli_main(["export", "calibrated", "--device", "D4", "--select", "time,device,tair",
                     "--start-time", "2024-07-01", "--end-time", "2024-07-31",
                     "--format", "csv", "-o", str(csv_path), "--no-progress"]) == 0
    lines = csv_path.read_text().splitlines()
    assert lines[0] == "time,device,tair" and len(lines) == D4_ROWS + 1  # one header, 3 pages
    assert lines[1] == "2024-07-01T00:00:00+0000,D4,20"
    assert cli_main(["export", "hourly", "--device", "D1", "--start-time", "2024-07-01",
                     "--end-time", "2024-07-02T23:00:00Z", "--temp", "f", "--local-time",
                     "America/New_York", "--format", "parquet", "-o", str(parquet_path),
                     "--no-progress"]) == 0
    frame = pd.read_parquet(parquet_path)
    assert len(frame) == 48 and frame.index.name == "time"
    assert frame["tair"].iloc[0] == pytest.approx(70.34)
    assert str(frame["local_time"].dt.tz) == "America/New_York"
    monkeypatch.setenv("SDS_APIKEY", "sdsk_wrong")
    assert cli_main(["tables"]) == 1


def test_export_csv_to_a_stream(api_url: str, world: World) -> None:
    out = io.BytesIO()
    with Client(api_url, apikey=world.keys["a"]) as client:
        count = client.export_csv("hourly", out, device="D1", select="time,tair",
                                  start_time="2024-07-01", end_time="2024-07-01T02:00:00Z",
                                  page_size=2)
    assert count == 3
    assert out.getvalue().decode().splitlines() == [
        "time,tair", "2024-07-01T00:00:00+0000,21.3", "2024-07-01T01:00:00+0000,21.3",
        "2024-07-01T02:00:00+0000,21.3"]


@pytest.mark.usefixtures("processes")
def test_client_imports_without_the_servers_packages() -> None:
    """The client is its own package: it must import with flask, psycopg and the service's
    own packages unavailable."""
    probe = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'flask', 'psycopg', 'psycopg_pool', 'marshmallow',\n"
        "                'flask_smorest', 'shared', 'serve', 'ingest', 'aggregate', 'paho'}:\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import sds_client, sds_client.frame, sds_client.cli\n"
        "print('ok')\n")
    run = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_login_binds_the_token_to_the_organisation_asked(api_url: str, world: World) -> None:
    """A user of two organisations: Client.login(org=...) acts in that one, else the home."""
    with psycopg.connect(world.url) as conn:
        user = accounts.user_id(conn, PASSWORD_A1[0])
        accounts.add_membership(conn, user=user, org=world.org_b, role="viewer")
    try:
        with Client.login(api_url, email=PASSWORD_A1[0], password=PASSWORD_A1[1],
                          org=str(world.org_b)) as in_b:
            me = in_b.transport.request("GET", "/api/v2/users/me").json()
        assert (me["org_id"], me["role"]) == (str(world.org_b), "viewer")
        with Client.login(api_url, email=PASSWORD_A1[0], password=PASSWORD_A1[1]) as home:
            assert home.transport.request("GET", "/api/v2/users/me").json()["org_id"] == \
                str(world.org_a)
    finally:
        with psycopg.connect(world.url) as conn:
            conn.execute("DELETE FROM memberships WHERE user_id = %s AND org_id = %s",
                         (user, world.org_b))
