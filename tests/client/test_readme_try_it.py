"""The README's "Try it" runs as written against the API under gunicorn on a demo database
(`sds demo`, with recent readings and hourly rows for A000101): the curl URLs answer the
newest rows first and a CSV with UTC and local time, and the Python snippet gives a
DataFrame of the last 24 hours."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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


def test_readme_try_it_shell_block_runs_as_written(demo: tuple[str, str, datetime],
                                                   tmp_path: Path) -> None:
    """The "Try it" shell block, run by bash from a directory holding `sds demo`'s output where
    deploy/run.sh keeps it, with only the host and port replaced; then the second command with
    `-OJ`, which saves the file under the name the README says (it said
    `hourly_A000101_<from>_<to>.csv` after the API stopped naming files of no window so)."""
    base, key, newest = demo
    block = re.search(r"```sh\n(.*?)```", TRY_IT, re.S).group(1)  # type: ignore[union-attr]
    (tmp_path / ".state").mkdir()
    (tmp_path / ".state" / "demo-credentials.txt").write_text(f"api key:      {key}  (scopes x)\n")
    script = block.replace(LOCAL, base)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    first = out[:out.index("]") + 1]
    assert [r["time"] for r in json.loads(first)][0] == newest.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert "time,tair,maxt,mint,rh,precip,local_time" in out[len(first):]

    commands = [c for c in re.split(r"\n(?=curl )", block) if c.startswith("curl ")]
    saved = tmp_path / "saved"
    saved.mkdir()
    named = re.search(r"`(hourly_A000101[^`]*\.csv)`", TRY_IT).group(1)  # type: ignore[union-attr]
    with_oj = (f"KEY={key}\n" + commands[1].strip().replace(LOCAL, base)
               .replace("curl -s", "curl -s -OJ"))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", with_oj], cwd=saved,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in saved.iterdir()] == [named]
    assert len((saved / named).read_text().splitlines()) == 25


def test_readme_operating_command_runs_as_written(database_url: str, tmp_path: Path) -> None:
    """"Operating it"'s command line, run by bash as written from a directory laid out as a
    deployment (`.state/secrets.env`, `.venv`), against a migrated database."""
    ops = README[README.index("## Operating it"):README.index("## Configuration")]
    line = re.search(r"`(set -a; \. \.state/secrets\.env; set \+a; [^`]+)`", ops)
    assert line, "the README's operating command moved"
    (tmp_path / ".state").mkdir()
    (tmp_path / ".state" / "secrets.env").write_text(f"SDS_DATABASE_URL='{database_url}'\n")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # the virtual environment running this
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", line.group(1)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), done.stderr
