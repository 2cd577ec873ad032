"""A cold-tier file that cannot be read (serve.coldtier): after July 2024 moves cold, organisation
A's file is deleted and organisation B's truncated, as an operator's slip or a failing disk
would leave them. A page reaching such a file answers 503 with a JSON body naming the file and
"cold tier unavailable" (plain and aggregated, JSON and CSV), logged once per file, counted in
`sds_api_cold_unavailable_total{reason}`; pages that do not reach it keep answering."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from aggregate import coldmove
from serve.metrics import exposition
from tests.support.data_world import World, get, seed
from tests.support.readings import insert_readings, series

BOUNDARY = datetime(2024, 8, 1, tzinfo=UTC)
JULY = {"start_time": "2024-07-01T00:00:00Z", "end_time": "2024-07-03T00:00:00Z"}
AUGUST = {"start_time": "2024-08-01T00:00:00Z", "end_time": "2024-08-02T00:00:00Z"}


@pytest.fixture(scope="module")
def cold_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's cold tier directory."""
    return tmp_path_factory.mktemp("coldbroken")


@pytest.fixture(scope="module")
def app_overrides(cold_dir: Path) -> dict[str, Any]:
    """The app reads the module's cold tier."""
    return {"cold_path": str(cold_dir)}


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """The data world (readings from 2024-07-01) and a day of August for D1 and B1."""
    world = seed(module_db)
    with psycopg.connect(module_db) as conn:
        insert_readings(conn, "D1", world.la, series(BOUNDARY, n=288, tair=12.5))
        insert_readings(conn, "B1", None, series(BOUNDARY, n=288, tair=7.25))
        conn.commit()
    return world


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _ask(client: FlaskClient, world: World) -> dict[str, Any]:
    """The answers compared: org A's July (plain, CSV, aggregated, a location's), A's August,
    org B's July and August."""
    return {
        "a_july": get(client, world, "calibrated", device="D1", **JULY),
        "a_july_csv": get(client, world, "calibrated", accept="text/csv", device="D2", **JULY),
        "a_july_1h": get(client, world, "calibrated", device="D1", interval="1h", **JULY),
        "a_july_ny": get(client, world, "calibrated", location=str(world.ny), points=10, **JULY),
        "a_august": get(client, world, "calibrated", device="D1", **AUGUST),
        "a_august_1h": get(client, world, "calibrated", device="D1", interval="15m", **AUGUST),
        "b_july": get(client, world, "calibrated", who="b", device="B1", **JULY),
        "b_august": get(client, world, "calibrated", who="b", device="B1", **AUGUST),
    }


@pytest.fixture(scope="module")
def broken(app: Flask, world: World, cold_dir: Path) -> dict[str, Any]:
    """Answers with every file intact, after A's file is deleted (asked twice), and after B's
    is truncated; the error lines logged, and the metric's exposition."""
    client = app.test_client()
    with psycopg.connect(world.url, autocommit=True) as conn:
        moved = coldmove.move(conn, hot_days=1, cold_path=str(cold_dir),
                              now=BOUNDARY + timedelta(days=2))
        paths: dict[Any, str] = dict(conn.execute(
            "SELECT org_id, path FROM cold_files WHERE state = 'live'").fetchall())
    assert len(moved) == 2
    intact = _ask(client, world)
    records = _Records()
    logging.getLogger("serve.coldtier").addHandler(records)
    try:
        (cold_dir / paths[world.org_a]).unlink()
        deleted = [_ask(client, world) for _ in range(2)]
        b_file = cold_dir / paths[world.org_b]
        b_file.write_bytes(b_file.read_bytes()[: b_file.stat().st_size // 2])
        truncated = _ask(client, world)
    finally:
        logging.getLogger("serve.coldtier").removeHandler(records)
    return {"intact": intact, "deleted": deleted, "truncated": truncated, "paths": paths,
            "lines": records.lines, "metrics": exposition(app).decode()}


def test_intact_files_answer(broken: dict[str, Any]) -> None:
    assert all(r.status_code == 200 for r in broken["intact"].values())


def test_a_deleted_file_answers_503_naming_it(broken: dict[str, Any], world: World,
                                              cold_dir: Path) -> None:
    a_file = broken["paths"][world.org_a]
    for answers in broken["deleted"]:
        for name in ("a_july", "a_july_csv", "a_july_1h", "a_july_ny"):
            got = answers[name]
            assert got.status_code == 503, (name, got.get_data())
            assert got.content_type == "application/json"
            body = got.get_json()
            assert body["code"] == 503 and "cold tier unavailable" in body["message"]
            assert body["errors"] == {"cold_file": [f"{a_file}: missing"]}
            assert str(cold_dir) not in got.get_data(as_text=True)  # no server path


def test_pages_not_reaching_the_file_keep_working(broken: dict[str, Any]) -> None:
    intact = broken["intact"]
    for answers in (*broken["deleted"], broken["truncated"]):
        for name in ("a_august", "a_august_1h", "b_august"):
            assert (answers[name].status_code, answers[name].get_data()) == (
                200, intact[name].get_data()), name
    for answers in broken["deleted"]:
        assert answers["b_july"].get_data() == intact["b_july"].get_data()


def test_a_truncated_file_answers_503_unreadable(broken: dict[str, Any], world: World) -> None:
    got = broken["truncated"]["b_july"]
    assert got.status_code == 503
    assert got.get_json()["errors"] == {
        "cold_file": [f"{broken['paths'][world.org_b]}: unreadable"]}


def test_logged_once_per_file_and_counted(broken: dict[str, Any], world: World) -> None:
    lines = broken["lines"]
    assert len(lines) == 2, lines  # A's file (12 pages refused), B's (1)
    assert broken["paths"][world.org_a] in lines[0] and "missing" in lines[0]
    assert broken["paths"][world.org_b] in lines[1] and "unreadable" in lines[1]
    metrics = broken["metrics"]
    assert 'sds_api_cold_unavailable_total{reason="missing"} 12.0' in metrics.splitlines()
    assert 'sds_api_cold_unavailable_total{reason="unreadable"} 1.0' in metrics.splitlines()
