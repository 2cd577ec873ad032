"""The audit entries of fleet changes made with `sds` (issue 34): adding, registering,
deploying, rotating and retiring a device, and adding and removing an organisation's alert
reader each write one entry with actor "operator", in the organisation the change belongs to;
a refused command writes none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from admin.cli import main


@pytest.fixture
def sds(database_url: str):  # type: ignore[no-untyped-def]
    def run(*args: str) -> Result:
        return CliRunner().invoke(main, list(args), env={"SDS_DATABASE_URL": database_url},
                                  catch_exceptions=False)
    return run


def _entries(url: str) -> list[dict[str, Any]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT o.name, a.actor, a.via, a.action, a.target_type, a.target_id, a.details"
            " FROM audit_log a JOIN organisations o ON o.id = a.org_id ORDER BY a.id").fetchall()
    keys = ("org", "actor", "via", "action", "target_type", "target_id", "details")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def test_device_and_alert_reader_changes_are_logged(  # type: ignore[no-untyped-def]
        sds, database_url: str, tmp_path: Path) -> None:
    assert sds("org", "create", "Acme").exit_code == 0
    assert sds("location", "create", "--org", "Acme", "--name", "North",
               "--tz", "UTC").exit_code == 0
    before = len(_entries(database_url))
    defs = tmp_path / "definitions.json"
    r = sds("device", "add", "A000501", "--org", "Acme", "--location", "North",
            "--from", "2026-01-01T00:00:00Z", "--rabbitmq-definitions", str(defs))
    assert r.exit_code == 0, r.output
    assert sds("device", "register", "A000502", "--org", "Acme").exit_code == 0
    assert sds("device", "deploy", "A000502", "--location", "North",
               "--from", "2026-02-01T00:00:00Z").exit_code == 0
    r = sds("device", "rotate-password", "A000501", "--rabbitmq-definitions", str(defs))
    assert r.exit_code == 0, r.output
    password = r.output.split("password ")[1].split()[0]
    assert sds("device", "retire", "A000501", "--at", "2026-03-01T00:00:00Z").exit_code == 0
    assert sds("device", "retire", "A000501", "--at", "now").exit_code == 1  # refused
    passwd = tmp_path / "passwd"
    assert sds("alert-reader", "add", "Acme", "--mqtt-passwd-file", str(passwd)).exit_code == 0
    assert sds("alert-reader", "remove", "Acme", "--mqtt-passwd-file",
               str(passwd)).exit_code == 0

    made = _entries(database_url)[before:]
    assert [e["action"] for e in made] == [
        "device.add", "device.register", "device.deploy", "device.rotate_password",
        "device.retire", "alert_reader.add", "alert_reader.remove"]
    assert {(e["org"], e["actor"], e["via"]) for e in made} == {("Acme", "operator", "cli")}
    assert made[0]["target_type"] == "device" and made[0]["details"]["name"] == "A000501"
    assert made[0]["details"]["from"].startswith("2026-01-01")
    assert made[2]["target_id"] == "A000502"
    assert made[4]["details"]["deployment_ended"] is True
    assert made[5]["target_type"] == "alert_reader" and made[5]["target_id"].startswith("alerts-")
    assert password not in str(made)
