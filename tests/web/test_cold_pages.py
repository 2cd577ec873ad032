"""The dashboard over the cold tier: once every reading of a device moved to Parquet files
(a retired device, a demo's history), its page still shows its newest reading and ends its
charts' default range there (serve.coldtier.latest_time), so does the compare page, and the
chart's and the exports' requests (plain CSV pages, JSON pages for Parquet, `points=`
buckets) answer as they did hot."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from aggregate import coldmove
from tests.support.dashboard import World, sign_in

CHART = {"device": "A1", "start_time": "2026-03-01T00:00:00Z", "end_time": "2026-03-08T00:00:00Z"}


@pytest.fixture(scope="module")
def app_overrides(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The app reads a cold tier of its own."""
    return {"cold_path": str(tmp_path_factory.mktemp("coldweb"))}


def _page(client: FlaskClient) -> dict[str, Any]:
    html = client.get("/dashboard/devices/A1").get_data(as_text=True)
    end = re.search(r'"end": "([^"]+)"', html)
    compared = re.search(r'"end": "([^"]+)"', client.get("/dashboard/compare").get_data(
        as_text=True))
    newest = re.search(r"<dt>Newest reading \(UTC\)</dt><dd>([^<]+)</dd>", html)
    asks = {
        "csv": client.get("/api/v2/data/calibrated", query_string={**CHART, "limit": 10000},
                          headers={"Accept": "text/csv"}),
        "json": client.get("/api/v2/data/calibrated",
                           query_string={**CHART, "limit": 10000, "select": "device,time,tair"}),
        "chart": client.get("/api/v2/data/calibrated",
                            query_string={**CHART, "points": 300, "select": "time,tair,rh"}),
    }
    return {"end": end and end.group(1), "newest": newest and newest.group(1),
            "compare_end": compared and compared.group(1),
            **{k: (v.status_code, v.get_data()) for k, v in asks.items()}}


def test_a_device_all_cold_keeps_its_page(client: FlaskClient, world: World,
                                          app_overrides: dict[str, Any]) -> None:
    sign_in(client, "user@a.example")
    hot = _page(client)
    with psycopg.connect(world.url, autocommit=True) as conn:
        # Every month of the world's readings (the newest are written at the wall clock's now).
        moved = coldmove.move(conn, hot_days=1, cold_path=app_overrides["cold_path"],
                              now=datetime.now(UTC) + timedelta(days=62))
        left = conn.execute("SELECT count(*) FROM calibrated c JOIN devices d ON d.name ="
                            " c.device WHERE d.org_id = %s", (world.org_a,)).fetchone()
    assert moved and left == (0,)
    cold = _page(client)
    assert hot["end"] == "2026-03-08T00:00:00Z" and hot["newest"] == "2026-03-08 00:00"
    assert hot["compare_end"] is not None
    assert hot["chart"][0] == 200 and len(hot["csv"][1]) > 10000
    assert cold == hot
