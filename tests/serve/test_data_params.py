"""GET /data additions of issue 15: several devices in one request, `format`, the
unknown-parameter policy (near misses are a 400, the rest named in X-Ignored-Parameters), and
`updated_since` with its watermark (X-Updated-Since-Next), against the seeded world."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from shared import places
from tests.support.apps import close_app, make_app
from tests.support.data_world import T0, World, csv_rows, error, get, rows
from tests.support.databases import as_role

HOUR = {"start_time": "2024-07-01T00:00:00Z", "end_time": "2024-07-01T01:00:00Z"}


# ---- several devices ---------------------------------------------------------------------

def test_comma_list_interleaves_devices_by_time(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "calibrated", device="D1,D2", select="time,device", **HOUR))
    assert len(got) == 2 * 13
    assert [(r["time"], r["device"]) for r in got] == sorted(
        (r["time"], r["device"]) for r in got)
    assert [r["device"] for r in got[:4]] == ["D1", "D2", "D1", "D2"]


def test_repeated_device_equals_the_comma_list(client: FlaskClient, world: World) -> None:
    comma = rows(get(client, world, "calibrated", device="D2,D1", **HOUR))
    repeated = client.get("/api/v2/data/calibrated", headers=world.headers(), query_string=[
        ("device", "D1"), ("device", "D2"), ("start_time", HOUR["start_time"]),
        ("end_time", HOUR["end_time"])])
    assert rows(repeated) == comma
    # One name (also repeated, or with an empty part) is the one-device listing, unchanged.
    single = rows(get(client, world, "calibrated", device="D1", **HOUR))
    assert rows(get(client, world, "calibrated", device="D1,D1,", **HOUR)) == single


def test_one_cursor_pages_the_interleaved_listing(client: FlaskClient, world: World) -> None:
    whole = rows(get(client, world, "calibrated", device="D1,D2", order="desc", **HOUR))
    paged: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"device": "D1,D2", "order": "desc", "limit": 5, **HOUR}
        if cursor:
            params["cursor"] = cursor
        answer = get(client, world, "calibrated", **params)
        paged += rows(answer)
        cursor = answer.headers.get("X-Cursor-Next")
        if not cursor:
            break
    assert paged == whole
    # The cursor belongs to this pair of devices (in any order), not to one of them.
    first = get(client, world, "calibrated", device="D1,D2", limit=5, **HOUR)
    token = first.headers["X-Cursor-Next"]
    assert rows(get(client, world, "calibrated", device="D2,D1", limit=5, cursor=token, **HOUR))
    error(get(client, world, "calibrated", device="D1", limit=5, cursor=token, **HOUR), 400)


def test_another_orgs_device_in_the_list_is_the_same_404(client: FlaskClient,
                                                         world: World) -> None:
    alone = error(get(client, world, "calibrated", device="B1"), 404)
    listed = error(get(client, world, "calibrated", device="D1,B1", **HOUR), 404)
    unknown = error(get(client, world, "calibrated", device="D1,NOPE", **HOUR), 404)
    assert listed == alone
    assert unknown["message"] == "unknown device 'NOPE'"
    assert listed["errors"] == unknown["errors"] == {"device": ["unknown device"]}
    error(get(client, world, "calibrated", who="b", device="B1,D2", **HOUR), 404)
    csv_answer = get(client, world, "calibrated", accept="text/csv", device="D2,B1", **HOUR)
    assert error(csv_answer, 404) == alone


def test_devices_with_a_location_and_as_csv(client: FlaskClient, world: World) -> None:
    day2 = {"start_time": "2024-07-02T00:00:00Z", "end_time": "2024-07-02T00:10:00Z"}
    # On day 2 D1 stands at LA: only D2's rows are at NY.
    at_ny = rows(get(client, world, "calibrated", device="D1,D2", location=str(world.ny),
                     select="time,device", **day2))
    assert {r["device"] for r in at_ny} == {"D2"} and len(at_ny) == 3
    lines = csv_rows(get(client, world, "calibrated", accept="text/csv", device="D1,D2",
                         select="time,device,tair", **day2))
    assert lines[0] == ["time", "device", "tair"] and len(lines) == 7
    assert [x[1] for x in lines[1:3]] == ["D1", "D2"]


def test_too_many_devices_is_400(client: FlaskClient, world: World) -> None:
    body = error(get(client, world, "calibrated",
                     device=",".join(f"X{i}" for i in range(101))), 400)
    assert body["message"].startswith("device: at most 100 devices")


# ---- format ------------------------------------------------------------------------------

def test_format_csv_wins_over_accept_and_names_a_file(client: FlaskClient, world: World) -> None:
    answer = get(client, world, "hourly", accept="application/json", device="D1",
                 format="csv", select="time,tair", **HOUR)
    assert answer.content_type == "text/csv; charset=utf-8"
    assert answer.headers["Content-Disposition"] == (
        'attachment; filename="hourly_D1_2024-07-01_2024-07-01.csv"')
    assert csv_rows(answer)[0] == ["time", "tair"]
    answer = get(client, world, "hourly", accept="text/csv", device="D1", format="JSON", **HOUR)
    assert answer.content_type == "application/json" and "Content-Disposition" not in (
        answer.headers)
    body = error(get(client, world, "hourly", device="D1", format="xml"), 400)
    assert body["message"] == "format: must be csv or json"


@pytest.mark.parametrize(("window", "name"), [
    ({}, "hourly_D1.csv"),  # was the default window's dates (100 days) for a 24-row answer
    ({"start_time": "2024-07-01"}, "hourly_D1_from-2024-07-01.csv"),
    ({"end_time": "2024-07-02T12:00:00Z"}, "hourly_D1_to-2024-07-02.csv"),
    ({"start_time": "2024-07-01", "end_time": "2024-07-02T12:00:00Z"},
     "hourly_D1_2024-07-01_2024-07-02.csv"),
])
def test_csv_file_name_names_only_the_bounds_the_request_gave(
        client: FlaskClient, world: World, window: dict[str, str], name: str) -> None:
    answer = get(client, world, "hourly", device="D1", format="csv", order="desc", limit="24",
                 **window)
    assert answer.status_code == 200 and answer.get_data(as_text=True).startswith("time,")
    assert answer.headers["Content-Disposition"] == f'attachment; filename="{name}"'


# ---- unknown parameters ------------------------------------------------------------------

@pytest.mark.parametrize(("sent", "meant"), [
    ("temperature", "temp"), ("strat_time", "start_time"), ("startTime", "start_time"),
    ("from", "start_time"), ("devices", "device"), ("Select", "select"), ("limt", "limit"),
])
def test_near_miss_is_400_with_the_name_meant(client: FlaskClient, world: World, sent: str,
                                              meant: str) -> None:
    where = {"location": str(world.ny)} if meant == "device" else {"device": "D1"}
    body = error(get(client, world, "hourly", **where, **{sent: "f"}), 400)
    assert body["message"].startswith(f"{sent}: unknown parameter, did you mean {meant}?")
    assert body["errors"] == {sent: [f"unknown parameter; did you mean {meant}?"]}


def test_several_near_misses_in_one_answer(client: FlaskClient, world: World) -> None:
    body = error(get(client, world, "hourly", device="D1", temperature="f", pressure="kp"), 400)
    assert set(body["errors"]) == {"temperature", "pressure"}


def test_near_miss_beside_the_parameter_meant_is_only_ignored(client: FlaskClient,
                                                              world: World) -> None:
    answer = get(client, world, "hourly", device="D1", temp="f", temperature="f", **HOUR)
    assert answer.status_code == 200
    assert answer.headers["X-Ignored-Parameters"] == "temperature"


@pytest.mark.parametrize(("sent", "meant"), [
    ("start_date", "start_time"), ("end_date", "end_time"), ("sort_by", "order"),
    ("per_page", "limit"), ("columns", "select"), ("output_format", "format"),
    ("startDate", "start_time"), ("Per-Page", "limit"),
    ("units", "temp, pres, size, ratio or speed"),
])
def test_other_apis_names_are_400_with_the_name_meant(client: FlaskClient, world: World,
                                                      sent: str, meant: str) -> None:
    # Each of these once answered 200 with the default window (docs/api.md alias table).
    body = error(get(client, world, "hourly", device="D1", **{sent: "2024-07-01"}), 400)
    assert body["message"].startswith(f"{sent}: unknown parameter, did you mean {meant}?")
    assert body["errors"] == {sent: [f"unknown parameter; did you mean {meant}?"]}


def test_other_apis_names_beside_the_parameter_meant_are_only_ignored(
        client: FlaskClient, world: World) -> None:
    answer = get(client, world, "hourly", device="D1", per_page="5", limit="5", units="f",
                 temp="f", start_date="2024-07-01", **HOUR)
    assert answer.status_code == 200
    assert answer.headers["X-Ignored-Parameters"] == "per_page, units, start_date"


def test_real_clients_extra_parameters_are_ignored_and_named(client: FlaskClient,
                                                             world: World) -> None:
    plain = get(client, world, "hourly", device="D1", **HOUR)
    assert "X-Ignored-Parameters" not in plain.headers
    extra = get(client, world, "hourly", device="D1", order_by="time", sortBy="time", page="2",
                vol="m3m3", **HOUR)
    assert rows(extra) == rows(plain)
    assert extra.headers["X-Ignored-Parameters"] == "order_by, sortBy, page, vol"
    assert "X-Ignored-Parameters" in extra.headers["Access-Control-Expose-Headers"]


def test_odd_parameter_names_are_counted_not_echoed(client: FlaskClient, world: World) -> None:
    answer = client.get("/api/v2/data/hourly?device=D1&%3Cscript%3E=1&zzz=2",
                        headers=world.headers())
    assert answer.status_code == 200
    assert answer.headers["X-Ignored-Parameters"] == "zzz, (1 other)"


# ---- updated_since -----------------------------------------------------------------------

@pytest.fixture
def stamped(database_url: str):  # type: ignore[no-untyped-def]
    """A world of its own: D1's 6 hourly rows with update_times an hour apart (the last one
    in the future), and an API key; yields (url, key, update_times)."""
    now = datetime.now(UTC).replace(microsecond=0)
    stamps = [now - timedelta(hours=5 - h) for h in range(5)] + [now + timedelta(hours=1)]
    with psycopg.connect(database_url) as conn:
        org = accounts.create_org(conn, name="Org S")
        user = accounts.create_user(conn, org=org, email="s@s.example", password="s-password")
        places.register_device(conn, org=org, name="D1")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO hourly (time, device, tair, create_time, update_time)"
                " VALUES (%s, 'D1', %s, %s, %s)",
                [(T0 + timedelta(hours=h), 20.0 + h, stamps[h], stamps[h]) for h in range(6)])
        key = accounts.create_api_key(conn, user=user, scopes=["data:read"])["apikey"]
    app = make_app(database_url)
    try:
        yield app.test_client(), {"Authorization": f"Apikey {key}"}, stamps, database_url
    finally:
        close_app(app)


def _since(client: FlaskClient, headers: dict[str, str], since: datetime | str,
           **params: Any):  # type: ignore[no-untyped-def]
    text = since if isinstance(since, str) else since.isoformat()
    return client.get("/api/v2/data/hourly", headers=headers,
                      query_string={"device": "D1", "updated_since": text,
                                    "select": "time,tair,update_time", **params})


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_updated_since_returns_changed_rows_and_a_watermark(stamped) -> None:  # type: ignore[no-untyped-def]
    client, headers, stamps, _ = stamped
    answer = _since(client, headers, stamps[2])
    got = rows(answer)
    # At or after stamps[2], and before the watermark (now - 1 s): the future row waits.
    assert [r["tair"] for r in got] == [22.0, 23.0, 24.0]
    watermark = _instant(answer.headers["X-Updated-Since-Next"])
    assert stamps[4] < watermark < datetime.now(UTC)
    # No start_time: 2024 rows are included although far outside the table's default window.
    assert got[0]["time"] == "2024-07-01T02:00:00Z"
    # Nothing changed since the watermark (the future row is still ahead of it).
    assert rows(_since(client, headers, answer.headers["X-Updated-Since-Next"])) == []


def test_updated_since_pages_share_one_watermark(stamped) -> None:  # type: ignore[no-untyped-def]
    client, headers, stamps, _ = stamped
    first = _since(client, headers, stamps[0], limit=2)
    assert len(rows(first)) == 2
    time.sleep(1.1)  # a later watermark would be later than this
    second = _since(client, headers, stamps[0], limit=2, cursor=first.headers["X-Cursor-Next"])
    assert len(rows(second)) == 2
    assert second.headers["X-Updated-Since-Next"] == first.headers["X-Updated-Since-Next"]
    third = _since(client, headers, stamps[0], limit=2, cursor=second.headers["X-Cursor-Next"])
    assert len(rows(third)) == 1 and "X-Cursor-Next" not in third.headers
    # The cursor is bound to updated_since.
    other = _since(client, headers, stamps[1], limit=2, cursor=first.headers["X-Cursor-Next"])
    assert other.status_code == 400 and "updated_since" in other.get_json()["message"]
    plain = client.get("/api/v2/data/hourly", headers=headers, query_string={
        "device": "D1", "limit": 2, "cursor": first.headers["X-Cursor-Next"]})
    assert plain.status_code == 400


def test_watermark_waits_for_a_running_transaction(stamped) -> None:  # type: ignore[no-untyped-def]
    """A transaction that started earlier may still commit rows stamped with its start: the
    watermark stays before it until it ends."""
    client, headers, stamps, url = stamped
    with psycopg.connect(url) as writer:
        started = writer.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        time.sleep(1.5)
        held = _instant(_since(client, headers, stamps[0]).headers["X-Updated-Since-Next"])
        assert held <= started - timedelta(seconds=1)
        writer.rollback()
    free = _instant(_since(client, headers, stamps[0]).headers["X-Updated-Since-Next"])
    assert free > started


def test_updated_since_on_a_table_without_update_time_is_400(client: FlaskClient,
                                                             world: World) -> None:
    body = error(get(client, world, "calibrated", device="D1", updated_since="2024-01-01"), 400)
    assert body["message"].startswith("updated_since: table calibrated has no update_time")
    assert "hourly, local_hourly, daily" in body["message"]


def test_updated_since_as_csv_and_with_several_devices(client: FlaskClient,
                                                       world: World) -> None:
    answer = get(client, world, "hourly", accept="text/csv", device="D1,D3",
                 updated_since="2000-01-01", select="time,device")
    lines = csv_rows(answer)
    assert len(lines) == 1 + 48 + 4 and "X-Updated-Since-Next" in answer.headers


def test_concurrent_watermarks_never_pass_a_running_writer(stamped) -> None:  # type: ignore[no-untyped-def]
    """Requests racing a writer that commits rows stamped with its start: every row a
    reader's watermark has passed is in that reader's listing or an earlier one."""
    client, headers, stamps, url = stamped
    stop = threading.Event()

    def writer() -> None:
        with psycopg.connect(url) as conn:
            hour = 100
            while not stop.is_set():
                conn.execute("INSERT INTO hourly (time, device, tair) VALUES (%s, 'D1', 1)",
                             (T0 + timedelta(hours=hour),))
                time.sleep(0.05)  # the row is stamped now() = start, committed later
                conn.commit()
                hour += 1

    thread = threading.Thread(target=writer)
    thread.start()
    seen: set[str] = set()
    since = "2000-01-01T00:00:00Z"
    try:
        for _ in range(15):
            answer = _since(client, headers, since, select="time")
            seen |= {r["time"] for r in rows(answer)}
            since = answer.headers["X-Updated-Since-Next"]
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join()
    with psycopg.connect(url) as conn:
        passed = {r[0].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for r in conn.execute(
            "SELECT time FROM hourly WHERE update_time < %s", (_instant(since),))}
    assert passed <= seen


def test_watermark_refuses_when_other_sessions_are_hidden(stamped) -> None:  # type: ignore[no-untyped-def]
    """Owned by a role that cannot see another role's session, the watermark function
    raises (naming the fix) rather than answer a watermark that could pass that session's
    rows; with pg_read_all_stats it answers again."""
    client, headers, stamps, url = stamped
    tag = uuid.uuid4().hex[:8]
    owner, other = f"wm_owner_{tag}", f"wm_other_{tag}"
    # The operator's steps, as the cluster's superuser (the tests' own URL is the login role's).
    with psycopg.connect(as_role(url, "postgres"), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {owner} NOLOGIN")
        admin.execute(f"CREATE ROLE {other} LOGIN PASSWORD 'other-pw'")
        admin.execute(f"GRANT CONNECT ON DATABASE {admin.info.dbname} TO {other}")
        admin.execute(f"ALTER FUNCTION sds_sync_watermark() OWNER TO {owner}")
        try:
            with psycopg.connect(as_role(url, f"{other}:other-pw")) as hidden:
                hidden.execute("SELECT 1")  # a session the owner may not look into
                answer = _since(client, headers, stamps[0])
                assert answer.status_code == 500
                admin.execute(f"GRANT pg_read_all_stats TO {owner}")
                assert _since(client, headers, stamps[0]).status_code == 200
        finally:
            admin.execute("ALTER FUNCTION sds_sync_watermark() OWNER TO sds")
            admin.execute(f"REVOKE CONNECT ON DATABASE {admin.info.dbname} FROM {other}")
            admin.execute(f"DROP ROLE {other}")
            admin.execute(f"DROP ROLE {owner}")
