"""The `/data` examples users copy first (deploy/run.sh's "Try:" banner, README.md) show the
newest rows, run against the data world in-process (issue 26: the banner's curls returned the
oldest rows of the default window)."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qsl

import psycopg
import pytest
from flask.testing import FlaskClient

from tests.support.data_world import World

ROOT = Path(__file__).resolve().parents[2]
# Wide enough for all of D1's rows (the examples have no window: the default one is now).
WINDOW = {"start_time": "2024-06-01T00:00:00Z", "end_time": "2024-08-01T00:00:00Z"}
_DATA_URL = re.compile(r'http://[^"\s]*/api/v2/data/([a-z_]+)\?([^"\s]+)')


def _banner() -> str:
    text = (ROOT / "deploy/run.sh").read_text()
    return text[text.index("\nTry:\n"):text.index("\nEOF\n", text.index("\nTry:\n"))]


def _examples() -> list[tuple[str, str, str]]:
    """(source, table, query) of every /data example of the banner and README."""
    found = []
    for source, text in (("run.sh banner", _banner()),
                         ("README.md", (ROOT / "README.md").read_text())):
        found += [(source, m.group(1), m.group(2)) for m in _DATA_URL.finditer(text)]
    return found


def test_the_examples_are_found() -> None:
    sources = {source for source, _, _ in _examples()}
    assert sources == {"run.sh banner", "README.md"}


@pytest.mark.parametrize(("source", "table", "query"), _examples())
def test_example_shows_the_newest_rows_first(client: FlaskClient, world: World, source: str,
                                             table: str, query: str) -> None:
    params = {k: ("D1" if k == "device" else v) for k, v in parse_qsl(query)}
    answer = client.get(f"/api/v2/data/{table}", query_string={**params, **WINDOW},
                        headers=world.headers())
    assert answer.status_code == 200, (source, answer.get_data(as_text=True))
    if answer.content_type.startswith("text/csv"):
        lines = list(csv.reader(io.StringIO(answer.get_data(as_text=True))))
        first = dict(zip(lines[0], lines[1], strict=True))["time"]
    else:
        first = answer.get_json()[0]["time"]
    with psycopg.connect(world.url) as conn:
        row = conn.execute(f"SELECT max(time) FROM {table} WHERE device = 'D1'").fetchone()
    assert row is not None
    newest: datetime = row[0]
    assert datetime.fromisoformat(first.replace("Z", "+00:00")) == newest, (source, query)
