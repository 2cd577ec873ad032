"""Pages wholly in cold months, written by serve.coldpage without PostgreSQL: each formatting
rule equals PostgreSQL's over many values (float32 text read back as float8, every unit
conversion's rounding, float8out's text, COPY's quoting, sds_iso_time), and whole answers of
readings with rough values (random float32 digits, tiny, huge, negative zero, NaN, infinities,
NULLs) are byte-identical before and after their month moves cold, JSON and CSV, for every
parameter family, with the no-SQL path taken; a late reading in a cold month sends its pages
back through SQL, which shows it."""

from __future__ import annotations

import json
import random
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import psycopg
import pyarrow as pa
import pytest
from flask.testing import FlaskClient
from psycopg import sql

from aggregate import coldmove
from people import accounts
from serve import coldpage, queries
from shared import places, spreadsheet, units
from shared.columns import TABLES
from tests.support.readings import MEASURED, insert_readings, series

CALIBRATED = TABLES["calibrated"]
JULY = datetime(2024, 7, 1, tzinfo=UTC)
AUGUST = datetime(2024, 8, 1, tzinfo=UTC)
IN_JULY = {"start_time": "2024-07-01T00:00:00Z", "end_time": "2024-07-31T23:59:59Z"}


def _float32s(n: int, seed: int) -> list[float]:
    """Random float32 bit patterns (every exponent), sensor-like values, and the edge cases."""
    rng = random.Random(seed)
    bits = [struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0] for _ in range(n)]
    plain = [float(np.float32(rng.uniform(-60, 1100))) for _ in range(n)]
    small = [float(np.float32(rng.uniform(-1, 1) * 10 ** rng.randint(-9, -3))) for _ in range(n)]
    edges = [0.0, -0.0, 21.3, 1e-4, 9.999999e-5, 1e15, 1e16, 3.4028235e38, -3.4028235e38,
             1.4e-45, 1.1754944e-38, 123456790.0, float("inf"), float("-inf"), float("nan")]
    return [float(np.float32(v)) for v in bits + plain + small + edges]


def _same(a: list[float | None], b: list[float | None]) -> bool:
    """Equal as doubles, bit for bit (NaN equal to NaN, -0.0 apart from 0.0)."""
    pack = [None if v is None else struct.pack("<d", v) for v in a]
    return pack == [None if v is None else struct.pack("<d", v) for v in b]


def test_float32_text_read_back_as_float8_equals_postgresqls(conn: psycopg.Connection) -> None:
    values = _float32s(20000, 1)
    got = coldpage.float8(pa.array(values, pa.float32())).to_pylist()
    want = [r[0] for r in conn.execute(
        "SELECT x::text::float8 FROM unnest(%s::float8[]::real[]) WITH ORDINALITY AS u(x, i)"
        " ORDER BY i", (values,))]
    bad = [(v, g, w) for v, g, w in zip(values, got, want, strict=True) if not _same([g], [w])]
    assert not bad, (len(bad), bad[:8])


@pytest.mark.parametrize("param", sorted(units.UNITS))
def test_unit_conversions_round_as_postgresql(conn: psycopg.Connection, param: str) -> None:
    values = [*_float32s(3000, 2), None]
    stored = coldpage.float8(pa.array(values, pa.float32()))
    for col in (c for c in CALIBRATED.columns if c.measure is not None
                and units.param_for(c.measure) == param):
        for unit in units.UNITS[param].values():
            got = coldpage.converted(stored, col, unit).to_pylist()
            expr = queries.column_expr(col, unit)
            want = [r[0] for r in conn.execute(sql.SQL(
                "SELECT {} FROM unnest(%s::float8[]::real[]) WITH ORDINALITY AS t({}, i)"
                " ORDER BY i").format(expr, sql.Identifier(col.name)), (values,))]
            assert _same(got, want), (col.name, unit.label)


def test_numbers_as_copy_writes_them(conn: psycopg.Connection) -> None:
    rng = random.Random(3)
    doubles = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
               for _ in range(5000)]
    doubles += [v * 10 ** e for v in (1.0, 1.5, 1.234567890123456, 7.0) for e in range(-8, 22)]
    doubles += [-v for v in doubles] + [float(v) for v in _float32s(2000, 4)] + [0.0, -0.0]
    got = coldpage.csv_numbers(pa.array([*doubles, None], pa.float64())).to_pylist()
    with conn.cursor() as cur, cur.copy(
            "COPY (SELECT x FROM unnest(%s::float8[]) WITH ORDINALITY AS u(x, i) ORDER BY i)"
            " TO STDOUT (FORMAT csv)", ([*doubles, None],)) as copy:
        want = b"".join(bytes(b) for b in copy).decode().split("\n")[:-1]
    assert got == want


@pytest.mark.parametrize(("name", "param", "label"), [
    ("tair", "temp", "c"), ("tair", "temp", "f"), ("rh", "ratio", "pct"), ("swdw", None, None),
    ("wind_speed", "speed", "kph"), ("p", "pres", "kp")])
def test_columns_written_as_json_and_copy_write_them(conn: psycopg.Connection, name: str,
                                                      param: str | None,
                                                      label: str | None) -> None:
    col = CALIBRATED.column(name)
    unit = units.UNITS[param][label] if param and label else None
    values = [*_float32s(4000, 5), None, 1048576.0, 2097153.0, 16777217.0]
    arr = pa.array(values, pa.float32())
    expr = queries.column_expr(col, unit)
    stmt = sql.SQL("SELECT {} FROM unnest(%s::float8[]::real[]) WITH ORDINALITY AS t({}, i)"
                   " ORDER BY i").format(expr, sql.Identifier(col.name))
    sent = [r[0] for r in conn.execute(stmt, (values,))]
    assert coldpage.numbers(arr, col, unit, json=True).to_pylist() == [
        orjson.dumps(v).decode() for v in sent]
    copy_stmt = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(stmt)
    with conn.cursor() as cur, cur.copy(copy_stmt, (values,)) as copy:
        want = b"".join(bytes(b) for b in copy).decode().split("\n")[:-1]
    assert coldpage.numbers(arr, col, unit, json=False).to_pylist() == want


def test_text_fields_and_times_as_copy_writes_them(conn: psycopg.Connection) -> None:
    texts = ["D1", "", "a,b", 'q"x', "two\nlines", "cr\r", "=1+2", "-3", "@x", "\\.", " sp",
             "'q", None]
    times = [JULY, JULY + timedelta(microseconds=250), datetime(1999, 12, 31, 23, 59, 59,
                                                                 tzinfo=UTC)]
    got = coldpage.csv_texts(pa.array(texts, pa.string()), guard=True).to_pylist()
    alone = coldpage.csv_texts(pa.array(texts, pa.string()), guard=False, alone=True)
    for expr, fields, ones in ((spreadsheet.text_expr(sql.SQL("t.d")), got, ", 1"),
                               (sql.SQL("t.d"), alone.to_pylist(), "")):
        stmt = sql.SQL("COPY (SELECT {}{} FROM unnest(%s::text[]) WITH ORDINALITY AS t(d, i)"
                       " ORDER BY i) TO STDOUT (FORMAT csv)").format(expr, sql.SQL(ones))
        with conn.cursor() as cur, cur.copy(stmt, (texts,)) as copy:
            want = b"".join(bytes(b) for b in copy).decode()
        lines = "".join(f"{f}{',1' if ones else ''}\n" for f in fields)
        assert lines.split("\n") == want.split("\n")
    iso = [r[0] for r in conn.execute(
        "SELECT sds_iso_time(t, interval '0') FROM unnest(%s::timestamptz[])"
        " WITH ORDINALITY AS u(t, i) ORDER BY i", (times,))]
    stamps = pa.array(times, pa.timestamp("us", tz="UTC"))
    assert coldpage._csv_time(stamps).to_pylist() == iso
    assert coldpage._csv_time(stamps.filter([True, False, True])).to_pylist() == [iso[0], iso[2]]


# ---- whole answers ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cold_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's cold tier directory."""
    return tmp_path_factory.mktemp("coldpage")


@pytest.fixture(scope="module")
def app_overrides(cold_dir: Path) -> dict[str, Any]:
    """The app reads the module's cold tier."""
    return {"cold_path": str(cold_dir)}


def _rough(seed: int) -> dict[str, Any]:
    """Each measured column: rough float32 values, with NULLs and the edge cases."""
    def column(k: int) -> Any:
        rng = random.Random(seed * 100 + k)
        pool = _float32s(50, seed * 100 + k)
        return lambda i, _t: None if i % 17 == k % 17 else (
            pool[i // 5 % len(pool)] if i % 5 == 0 else float(np.float32(rng.gauss(20, 15))))
    return {name: column(k) for k, name in enumerate(MEASURED)}


@dataclass
class ColdWorld:
    """The module's database, API keys (o: the organisation's, t: teams-only) and location."""

    url: str
    keys: dict[str, str]
    loc: str


@pytest.fixture(scope="module")
def world(module_db: str, cold_dir: Path) -> ColdWorld:
    """Org O: devices R1 (at L, Pacific/Chatham) and R2 (at L, then none), and -R3 (a name
    CSV must guard), rough readings through July 2024 and into August; a teams-only member t
    whose team holds R2 only."""
    with psycopg.connect(module_db) as conn:
        org = accounts.create_org(conn, name="Cold page")
        user = accounts.create_user(conn, org=org, email="o@cp.example", password="o-password")
        loc = places.create_location(conn, org=org, loc=places.LocationInput(
            name="L", tz_name="Pacific/Chatham"))
        for name in ("R1", "R2", "-R3"):
            places.register_device(conn, org=org, name=name)
        for i, (device, where) in enumerate((("R1", loc), ("R2", loc), ("R2", None),
                                             ("-R3", loc))):
            start = JULY + timedelta(days=3 * i, seconds=37 * i)
            insert_readings(conn, device, where, series(start, n=3000 + 400 * i, **_rough(i)))
        t = accounts.create_user(conn, org=org, email="t@cp.example", password="t-password")
        team = conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, 'T') RETURNING id",
                            (org,)).fetchone()[0]  # type: ignore[index]
        r2 = conn.execute("SELECT id FROM devices WHERE name = 'R2'").fetchone()[0]  # type: ignore[index]
        conn.execute("INSERT INTO team_members (team_id, org_id, user_id) VALUES (%s, %s, %s)",
                     (team, org, t))
        conn.execute("INSERT INTO team_devices (team_id, org_id, device_id) VALUES (%s, %s, %s)",
                     (team, org, r2))
        conn.execute("INSERT INTO team_locations (team_id, org_id, location_id)"
                     " VALUES (%s, %s, %s)", (team, org, loc))
        conn.execute("UPDATE memberships SET teams_only = true WHERE user_id = %s", (t,))
        keys = {"o": accounts.create_api_key(conn, user=user, scopes=["data:read"])["apikey"],
                "t": accounts.create_api_key(conn, user=t, scopes=["data:read"])["apikey"]}
        conn.commit()
    return ColdWorld(module_db, keys, str(loc))


def _requests(loc: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    every_unit = {"temp": "f", "pres": "kp", "size": "in", "ratio": "dec", "speed": "mph"}
    return [
        ("o", None, {"device": "R1", **IN_JULY, "limit": 10000}),
        ("o", None, {"device": "R1", **IN_JULY, "limit": 1700, "order": "desc",
                     "local_time": "Pacific/Chatham"}),
        ("o", None, {"device": "R1", **IN_JULY, "limit": 999, **every_unit,
                     "local_time": "-03:30"}),
        ("o", None, {"device": "R2", **IN_JULY, "limit": 2100, "temp": "f", "speed": "kph",
                     "select": "wind_gust,time,tair,location,tdew"}),
        ("o", None, {"location": loc, **IN_JULY, "limit": 1200}),
        ("o", None, {"device": "R1,-R3", **IN_JULY, "limit": 1100, "order": "desc"}),
        ("o", "text/csv", {"device": "R1", **IN_JULY, "limit": 10000}),
        ("o", "text/csv", {"device": "R1", **IN_JULY, "limit": 1300, **every_unit,
                           "local_time": "Pacific/Chatham", "order": "desc"}),
        ("o", "text/csv", {"device": "-R3", **IN_JULY, "limit": 800, "select": "device"}),
        ("o", "text/csv", {"location": loc, **IN_JULY, "limit": 2500, "local_time": "+05:45",
                           "select": "device,time,p,rh,precip,location"}),
        ("o", "text/csv", {"device": "R2,-R3", **IN_JULY, "limit": 3000, "pres": "kp"}),
        ("t", None, {"location": loc, **IN_JULY, "limit": 700}),
        ("t", "text/csv", {"device": "R2", **IN_JULY}),
        ("t", None, {"device": "R1", **IN_JULY}),
    ]


def _walk(client: FlaskClient, key: str, accept: str | None, params: dict[str, Any],
          ) -> list[tuple[int, str | None, str | None, bytes]]:
    pages, cursor = [], None
    headers = {"Authorization": f"Apikey {key}", **({"Accept": accept} if accept else {})}
    while True:
        got = client.get("/api/v2/data/calibrated", headers=headers,
                         query_string={**params, **({"cursor": cursor} if cursor else {})})
        cursor = got.headers.get("X-Cursor-Next")
        pages.append((got.status_code, cursor, got.headers.get("X-Units"), got.get_data()))
        if got.status_code != 200 or cursor is None:
            return pages


@pytest.fixture(scope="module")
def answers(app: Any, world: ColdWorld, cold_dir: Path) -> dict[str, Any]:
    """Every request walked while all is hot, then after July moved cold (counting the pages
    serve.coldpage wrote), then after a late reading of R1 landed hot in July."""
    client = app.test_client()
    reqs = [(world.keys[who], accept, p) for who, accept, p in _requests(world.loc)]
    before = [_walk(client, *r) for r in reqs]
    with psycopg.connect(world.url, autocommit=True) as conn:
        moved = coldmove.move(conn, hot_days=1, cold_path=str(cold_dir),
                              now=AUGUST + timedelta(days=2))
    written = []
    real = coldpage.body

    def counting(scan: queries.Scan, *args: Any) -> Any:
        written.append(scan.limit)
        return real(scan, *args)

    coldpage.body = counting  # type: ignore[assignment]
    try:
        after = [_walk(client, *r) for r in reqs]
        cold_pages = len(written)
        late = JULY + timedelta(days=5, minutes=2, seconds=30)  # between two of R1's readings
        with psycopg.connect(world.url) as conn:
            insert_readings(conn, "R1", None, [{"time": late, "tair": 99.5}])
        written.clear()
        with_late = _walk(client, *reqs[0])
        after_late_pages = len(written)
    finally:
        coldpage.body = real
    return {"reqs": reqs, "before": before, "after": after, "moved": moved,
            "cold_pages": cold_pages, "with_late": with_late, "late_pages": after_late_pages}


def test_july_moved_and_pages_written_from_cold_rows(answers: dict[str, Any]) -> None:
    assert [m.month.day for m in answers["moved"]] == [1]
    # every page of every 200 listing is wholly in July: all were written without SQL
    pages = sum(len(p) for p in answers["after"] if p[0][0] == 200)
    assert answers["cold_pages"] == pages > 30


@pytest.mark.parametrize("index", range(14))
def test_cold_page_is_byte_identical_to_the_hot_page(answers: dict[str, Any],
                                                     index: int) -> None:
    before, after = answers["before"][index], answers["after"][index]
    assert before == after, answers["reqs"][index][1:]
    if index == 13:
        assert before[0][0] == 404  # R1 is not in t's team
    else:
        assert before[0][0] == 200 and len(before[0][3]) > 200


def test_rough_values_reach_the_answers(answers: dict[str, Any]) -> None:
    body = answers["before"][6][0][3].decode()  # R1 as CSV
    assert "Infinity" in body and "NaN" in body and "e-" in body and ",-0," in body
    csv_r3 = answers["before"][8][0][3].decode().splitlines()
    assert csv_r3[1] == "'-R3"


def test_a_late_reading_in_a_cold_month_is_read_through_sql(answers: dict[str, Any]) -> None:
    assert answers["late_pages"] == 0
    body = answers["with_late"][0][3]
    assert b'"tair":99.5' in body
    rows = json.loads(body)
    late = next(i for i, r in enumerate(rows) if r["time"] == "2024-07-06T00:02:30Z")
    assert rows[late]["device"] == "R1" and rows[late]["rh"] is None
    before = json.loads(answers["before"][0][0][3])
    assert rows[:late] + rows[late + 1:] == before and len(before) == 3000
