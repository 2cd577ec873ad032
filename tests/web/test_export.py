"""Export any span from the browser (issue 26): the device page's "Export whole range (CSV)"
follows the API's cursor through every CSV page of the chosen range, with progress, and saves
one file with the header once: 60 days of 5-minute readings (17,281 rows) are more than one
download link holds (the API's largest page). "Export whole range (Parquet)" follows the JSON
pages and writes a typed Parquet file, read back here with pyarrow and checked row by row
against the API's own JSON pages (values, nulls, UTC and local times)."""

from __future__ import annotations

import csv
import io
import json
import math
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from serve.args import MAX_LIMIT
from shared import places
from testbed.browser import console_errors, wait_for
from tests.support.browsing import chart_drawn, downloaded, sign_in
from tests.support.dashboard import END, World
from tests.support.readings import insert_readings, series, sine_of_time

DAYS = 60
ROWS = DAYS * 288 + 1


@pytest.fixture(scope="module")
def long(world: World) -> str:
    """Device E1 at North field with 60 days of 5-minute readings up to END."""
    with psycopg.connect(world.url) as conn:
        places.register_device(conn, org=world.org_a, name="E1")
        places.deploy_device(conn, device="E1", location=world.north,
                               start=END - timedelta(days=100))
        insert_readings(conn, "E1", world.north, series(
            END - timedelta(days=60), n=60 * 288 + 1, tair=sine_of_time(15, 8, 13751.0), rh=0.6))
        conn.commit()
    return "E1"


def test_export_follows_the_cursor_through_the_whole_range(
        server: str, browser: WebDriver, long: str, tmp_path: Path) -> None:
    assert ROWS > MAX_LIMIT  # more than one page, more than the download link holds
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/devices/{long}?table=calibrated&span=90"
                f"&end={END.date().isoformat()}&cols=tair,rh&temp=f&tz=UTC")
    chart_drawn(browser, "chart", loads=1)
    browser.find_element(By.ID, "export").click()
    wait_for(browser, "window.sdsDashboard.exported !== undefined", timeout=60)
    exported = browser.execute_script("return window.sdsDashboard.exported")
    assert exported["rows"] == ROWS
    assert f"Exported {ROWS:,} rows" in browser.find_element(By.ID, "export-status").text
    saved = downloaded(tmp_path / "downloads", "csv")
    assert saved.name == exported["name"] and saved.name.startswith("calibrated_E1_")
    table = list(csv.reader(io.StringIO(saved.read_text())))
    assert table[0] == ["time", "tair", "rh", "local_time"]
    body = table[1:]
    assert len(body) == ROWS and ["time", "tair", "rh", "local_time"] not in body
    times = [r[0] for r in body]
    assert times == sorted(times) and len(set(times)) == ROWS  # no row twice, none lost
    assert max(float(r[1]) for r in body) > 70  # Fahrenheit, as chosen
    assert console_errors(browser) == []


PARQUET_DAYS = 40
PARQUET_ROWS = PARQUET_DAYS * 288 + 1


@pytest.fixture(scope="module")
def gappy(world: World) -> str:
    """Device E2 at North field (America/Chicago) with 40 days of 5-minute readings up to END
    (all in Central Standard Time), some of them missing a value: tair every 7th row, rh every
    11th (never both, so no row is all nulls)."""
    with psycopg.connect(world.url) as conn:
        places.register_device(conn, org=world.org_a, name="E2")
        places.deploy_device(conn, device="E2", location=world.north,
                               start=END - timedelta(days=100))
        insert_readings(conn, "E2", world.north, series(
            END - timedelta(minutes=5 * (PARQUET_ROWS - 1)), n=PARQUET_ROWS,
            tair=lambda i, _t: None if i % 7 == 3 else 15 + 8 * math.sin(i / 47.0),
            rh=lambda i, _t: None if i % 11 == 5 else 0.5 + 0.3 * math.cos(i / 31.0)))
        conn.commit()
    return "E2"


def api_rows(server: str, browser: WebDriver, url: str) -> list[dict[str, Any]]:
    """Every row of a JSON `/data` URL, through X-Cursor-Next, read with the browser's cookies
    (the same user the page exported as), independently of the page's script."""
    cookie = "; ".join(f"{c['name']}={c['value']}" for c in browser.get_cookies())
    rows: list[dict[str, Any]] = []
    following: str | None = url
    while following:
        request = urllib.request.Request(server + following, headers={
            "Cookie": cookie, "Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:  # nosec B310: test server
            rows.extend(json.load(answer))
            cursor = answer.headers.get("X-Cursor-Next")
        following = f"{url}&cursor={quote(cursor)}" if cursor else None
    return rows


def wall_clock(local: str) -> datetime:
    """The wall-clock time of the API's local time string (2026-03-08T01:00:00-0600)."""
    return datetime.strptime(local, "%Y-%m-%dT%H:%M:%S%z").replace(tzinfo=None)


def test_parquet_export_is_typed_and_equals_the_api_rows(
        server: str, browser: WebDriver, gappy: str, tmp_path: Path) -> None:
    assert PARQUET_ROWS > MAX_LIMIT  # two pages, so two row groups
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/devices/{gappy}?table=calibrated&span=90"
                f"&end={END.date().isoformat()}&cols=tair,rh&temp=f&tz=America/Chicago")
    chart_drawn(browser, "chart", loads=1)
    browser.find_element(By.ID, "export-parquet").click()
    wait_for(browser, "window.sdsDashboard.exported !== undefined", timeout=90)
    exported = browser.execute_script("return window.sdsDashboard.exported")
    assert exported["rows"] == PARQUET_ROWS and exported["format"] == "parquet"
    status = browser.find_element(By.ID, "export-status").text
    assert f"Exported {PARQUET_ROWS:,} rows" in status
    saved = downloaded(tmp_path / "downloads", "parquet")
    assert saved.name == exported["name"] == "calibrated_E2_2025-12-08_2026-03-08.parquet"
    assert saved.stat().st_size == exported["bytes"]

    parquet = pq.ParquetFile(saved)
    table = parquet.read()
    assert table.schema.field("time").type == pa.timestamp("ms", tz="UTC")
    assert table.schema.field("device").type == pa.string()
    assert table.schema.field("tair").type == pa.float64()
    assert table.schema.field("rh").type == pa.float64()
    assert table.schema.field("local_time").type == pa.timestamp("ms")  # wall clock, no zone
    assert table.column_names == ["time", "device", "tair", "rh", "local_time"]
    assert not table.schema.field("time").nullable and table.schema.field("tair").nullable
    # One row group per API page: written as the pages came, not assembled at the end.
    assert parquet.metadata.num_row_groups == -(-PARQUET_ROWS // MAX_LIMIT)
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    # The API's X-Units of the pages (temperature F, humidity pct), and the zone asked for.
    assert meta["sds.units"] == "F,pct" and meta["sds.local_time_zone"] == "America/Chicago"

    # The page's own request (kept in the file), asked again here page by page as JSON.
    source = meta["sds.source"]
    query = parse_qs(urlsplit(source).query)
    assert query["device"] == ["E2"] and query["temp"] == ["f"]
    assert query["select"] == ["time,device,tair,rh"] and "format" not in query
    expected = api_rows(server, browser, source)
    got = table.to_pylist()
    assert len(got) == len(expected) == PARQUET_ROWS
    for row, want in zip(got, expected, strict=True):
        assert row["time"] == datetime.fromisoformat(want["time"].replace("Z", "+00:00"))
        assert row["device"] == want["device"] == "E2"
        assert row["tair"] == want["tair"] and row["rh"] == want["rh"]  # exact, None for null
        assert row["local_time"] == wall_clock(want["local_time"])
    assert got[-1]["time"] == END
    # The nulls the fixture left, each in its row (0 is the oldest).
    assert [i for i, r in enumerate(got) if r["tair"] is None] == [
        i for i in range(PARQUET_ROWS) if i % 7 == 3]
    assert [i for i, r in enumerate(got) if r["rh"] is None] == [
        i for i in range(PARQUET_ROWS) if i % 11 == 5]
    assert max(r["tair"] for r in got if r["tair"] is not None) > 70  # Fahrenheit, as chosen
    # The local column is Chicago's wall clock (CST, UTC-6, until 2026-03-08 08:00 UTC).
    offsets = {r["time"] - r["local_time"].replace(tzinfo=UTC) for r in got}
    assert offsets == {timedelta(hours=6)}
    assert console_errors(browser) == []
