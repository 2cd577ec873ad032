"""ETag and If-None-Match -> 304 (issue 13): /schemas, and /data pages whose whole window lies
before the late-data horizon; never on pages that can still change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
from flask.testing import FlaskClient

from serve import caching
from shared import places
from tests.support.data_world import World
from tests.support.readings import insert_readings, series

SETTLED = {"device": "D1", "start_time": "2024-07-01", "end_time": "2024-07-01T12:00:00Z",
           "limit": "50"}


def _get(client: FlaskClient, world: World, path: str, query: dict[str, str] | None = None,
         **headers: str):  # type: ignore[no-untyped-def]
    return client.get(path, query_string=query or {}, headers=world.headers(**headers))


def test_settled_pages_revalidate_to_304(client: FlaskClient, world: World) -> None:
    for accept in ("application/json", "text/csv"):
        first = _get(client, world, "/api/v2/data/calibrated", SETTLED, Accept=accept)
        assert first.status_code == 200 and "Transfer-Encoding" not in first.headers
        etag = first.headers["ETag"]
        assert etag.startswith('"') and first.headers["Cache-Control"] == "private, no-cache"
        assert first.headers["X-Cursor-Next"]
        again = _get(client, world, "/api/v2/data/calibrated", SETTLED, Accept=accept,
                     **{"If-None-Match": etag})
        assert again.status_code == 304 and again.data == b""
        assert again.headers["ETag"] == etag
        # What a client needs to go on paging is there without the body.
        assert again.headers["X-Cursor-Next"] == first.headers["X-Cursor-Next"]
        # The edge marks the ETag weak when it gzips; If-None-Match compares weakly.
        weak = _get(client, world, "/api/v2/data/calibrated", SETTLED, Accept=accept,
                    **{"If-None-Match": "W/" + etag})
        assert weak.status_code == 304
        other = _get(client, world, "/api/v2/data/calibrated", SETTLED, Accept=accept,
                     **{"If-None-Match": '"something-else"'})
        assert other.status_code == 200 and other.data == first.data
    json_tag = _get(client, world, "/api/v2/data/calibrated", SETTLED).headers["ETag"]
    csv_tag = _get(client, world, "/api/v2/data/calibrated", SETTLED,
                   Accept="text/csv").headers["ETag"]
    f_tag = _get(client, world, "/api/v2/data/calibrated", {**SETTLED, "temp": "f"}
                 ).headers["ETag"]
    assert len({json_tag, csv_tag, f_tag}) == 3


def test_pages_that_can_change_have_no_etag(client: FlaskClient, world: World) -> None:
    # No end_time: the window ends now, inside the horizon; the page is streamed as before.
    recent = _get(client, world, "/api/v2/data/calibrated",
                  {"device": "D4", "start_time": "2024-07-01", "limit": "5"})
    assert recent.status_code == 200 and "ETag" not in recent.headers
    # An end just inside the horizon (400 days) is not settled either.
    edge = (datetime.now(UTC) - timedelta(days=399)).strftime("%Y-%m-%dT%H:%M:%SZ")
    near = _get(client, world, "/api/v2/data/calibrated",
                {"device": "D1", "start_time": "2024-07-01", "end_time": edge, "limit": "5"})
    assert near.status_code == 200 and "ETag" not in near.headers


def test_settled_uses_the_horizon_with_a_margin() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert caching.settled(now - timedelta(days=403), 400, now=now)
    assert not caching.settled(now - timedelta(days=401), 400, now=now)
    assert not caching.settled(now, 400, now=now)


def test_changed_rows_change_the_etag(client: FlaskClient, world: World) -> None:
    """The ETag is of the bytes: rows removed (a retention run) or recomputed (a backfill)
    behind a settled page give a new one, never a stale 304."""
    with psycopg.connect(world.url) as conn:
        places.register_device(conn, org=world.org_a, name="D7")
        insert_readings(conn, "D7", None, series(datetime(2024, 7, 1, tzinfo=UTC), n=10,
                                                 tair=10))
        conn.commit()
    query = {"device": "D7", "start_time": "2024-07-01", "end_time": "2024-07-02"}
    etag = _get(client, world, "/api/v2/data/calibrated", query).headers["ETag"]
    with psycopg.connect(world.url) as conn:
        conn.execute("DELETE FROM calibrated WHERE device = 'D7' AND time = '2024-07-01'")
        conn.commit()
    after = _get(client, world, "/api/v2/data/calibrated", query, **{"If-None-Match": etag})
    assert after.status_code == 200 and len(after.get_json()) == 9
    assert after.headers["ETag"] != etag


def test_schemas_revalidate_to_304(client: FlaskClient, world: World) -> None:
    for path in ("/api/v2/schemas", "/api/v2/schemas/hourly"):
        first = _get(client, world, path)
        assert first.status_code == 200 and first.headers["Cache-Control"] == "private, no-cache"
        again = _get(client, world, path, **{"If-None-Match": first.headers["ETag"]})
        assert again.status_code == 304 and again.data == b""
    # Credentials are still checked first: no 304 (nor 200) without them.
    assert client.get("/api/v2/schemas", headers={
        "If-None-Match": first.headers["ETag"]}).status_code == 401
