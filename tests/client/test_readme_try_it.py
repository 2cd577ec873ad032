"""The README's "Try it" runs as written against the API under gunicorn on a demo database
(`sds demo`, with recent readings and hourly rows for A000101): the curl URLs answer the
newest rows first and a CSV with UTC and local time, and the Python snippet gives a
DataFrame of the last 24 hours."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import requests
from click.testing import CliRunner

from admin.cli import main as sds
from testbed.apiserver import gunicorn_api
from tests.support.readings import insert_readings, series

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
TRY_IT = README[README.index("### Try it"):README.index("### systemd")]
LOCAL = "http://127.0.0.1:8080"


@pytest.fixture
def demo(database_url: str, tmp_path: Path) -> Iterator[tuple[str, str, datetime]]:
    """`sds demo`, then 36 h of readings and hourly rows of A000101 up to the last full hour;
    yields (API base URL, demo key, the newest hour)."""
    result = CliRunner().invoke(sds, ["demo"], env={"SDS_DATABASE_URL": database_url})
    assert result.exit_code == 0, result.output
    key = re.search(r"api key:\s+(\S+)", result.output).group(1)  # type: ignore[union-attr]
    newest = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    with psycopg.connect(database_url) as conn:
        # 36 hours up to `newest`; tair counts 20..26 back from it.
        insert_readings(conn, "A000101", None, series(
            newest - timedelta(minutes=5 * 431), n=432, tair=lambda i, _t: 20 + (431 - i) % 7,
            rh=0.5, precip=0))
        conn.execute(
            "INSERT INTO hourly (time, device, tair, maxt, mint, rh, precip) SELECT"
            " %s - g * interval '1 hour', 'A000101', 20, 25, 15, 0.5, 2.54"
            " FROM generate_series(0, 35) g", (newest,))
    with gunicorn_api(database_url, tmp_path) as base:
        yield base, key, newest


def test_readme_try_it_commands(demo: tuple[str, str, datetime]) -> None:
    base, key, newest = demo
    urls = re.findall(r'"(http://127\.0\.0\.1:8080/api/v2/data/[^"]+)"', TRY_IT)
    assert len(urls) == 2, urls
    assert 'KEY=$(sed -n' in TRY_IT and '-H "Authorization: Apikey $KEY"' in TRY_IT
    headers = {"Authorization": f"Apikey {key}"}

    latest = requests.get(urls[0].replace(LOCAL, base), headers=headers, timeout=30)
    assert latest.status_code == 200, latest.text
    rows = latest.json()
    assert [r["time"] for r in rows] == [
        (newest - timedelta(minutes=5 * i)).strftime("%Y-%m-%dT%H:%M:%SZ") for i in range(3)]
    assert list(rows[0]) == ["time", "tair", "rh", "precip"]

    table = requests.get(urls[1].replace(LOCAL, base), headers=headers, timeout=30)
    assert table.status_code == 200, table.text
    assert table.headers["Content-Type"] == "text/csv; charset=utf-8"
    # No window asked for: no dates in the name (docs/api.md).
    assert table.headers["Content-Disposition"] == 'attachment; filename="hourly_A000101.csv"'
    lines = table.text.splitlines()
    assert lines[0] == "time,tair,maxt,mint,rh,precip,local_time" and len(lines) == 25
    first = lines[1].split(",")
    assert first[0] == newest.strftime("%Y-%m-%dT%H:%M:%S+0000")
    assert first[1:6] == ["68", "77", "59", "50", "0.1"]  # F, %, inches
    assert first[6].endswith(("-0500", "-0600"))  # Chicago
    assert "X-Ignored-Parameters" not in table.headers


def test_readme_python_snippet(demo: tuple[str, str, datetime]) -> None:
    base, key, newest = demo
    code = re.search(r"```python\n(.*?)```", TRY_IT, re.S).group(1)  # type: ignore[union-attr]
    scope: dict[str, object] = {"KEY": key}
    exec(code.replace(LOCAL, base), scope)  # noqa: S102  the README's own snippet
    frame = scope["df"]
    assert len(frame) == 24 and frame.index[0] == newest  # type: ignore[arg-type, attr-defined]
    assert frame.attrs["units"]["temp"] == "F"  # type: ignore[attr-defined]
    assert str(frame["local_time"].dt.tz) == "America/Chicago"  # type: ignore[index]
