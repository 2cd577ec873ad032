"""`sds team ...` against a real database: create, rename, link a member, a device and a
location, show, unlink, delete; every change audited as the operator; another organisation's
user, device or location and unknown names refused, changing nothing."""

from __future__ import annotations

import psycopg
import pytest
from click.testing import CliRunner, Result

from admin.cli import main


@pytest.fixture
def sds(database_url: str):  # type: ignore[no-untyped-def]
    runner = CliRunner()

    def run(*args: str) -> Result:
        env = {"SDS_DATABASE_URL": database_url, "SDS_USER_PASSWORD": "team-cli-password"}
        return runner.invoke(main, list(args), env=env, catch_exceptions=False)

    return run


def _ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def _world(sds) -> None:  # type: ignore[no-untyped-def]
    for org, suffix in (("Acme", "a"), ("Other", "o")):
        _ok(sds("org", "create", org))
        _ok(sds("user", "create", "--org", org, "--email", f"ann@{suffix}.example"))
        _ok(sds("location", "create", "--org", org, "--name", "North", "--tz", "UTC"))
        _ok(sds("device", "register", f"DEV{suffix.upper()}", "--org", org))


def test_team_commands(sds, database_url: str) -> None:  # type: ignore[no-untyped-def]
    _world(sds)
    assert "team Crew id" in _ok(sds("team", "create", "--org", "Acme", "Crew"))
    _ok(sds("team", "rename", "--org", "Acme", "Crew", "Field crew"))
    assert "added to team Field crew" in _ok(
        sds("team", "add-member", "--org", "Acme", "Field crew", "ann@a.example"))
    assert "already in" in _ok(
        sds("team", "add-member", "--org", "Acme", "Field crew", "ann@a.example"))
    _ok(sds("team", "add-device", "--org", "Acme", "Field crew", "DEVA"))
    _ok(sds("team", "add-location", "--org", "Acme", "Field crew", "North"))
    shown = _ok(sds("team", "show", "--org", "Acme", "Field crew"))
    assert "member\tann@a.example" in shown and "device\tDEVA" in shown
    assert "location\tNorth" in shown
    assert "1 member(s)\t1 device(s)\t1 location(s)" in _ok(sds("team", "list", "--org", "Acme"))

    # Another organisation's user and device are unknown here; nothing is linked.
    for args in (("add-member", "ann@o.example"), ("add-device", "DEVO"),
                 ("add-device", "NOPE"), ("add-location", "South")):
        r = sds("team", args[0], "--org", "Acme", "Field crew", args[1])
        assert r.exit_code == 1 and ("unknown" in r.output or "no single" in r.output), r.output
    assert sds("team", "show", "--org", "Other", "Field crew").exit_code == 1
    assert sds("team", "create", "--org", "Acme", "Field crew").exit_code == 1  # taken

    assert "removed from" in _ok(sds("team", "remove-device", "--org", "Acme", "Field crew",
                                      "DEVA"))
    assert "was not in" in _ok(sds("team", "remove-device", "--org", "Acme", "Field crew",
                                   "DEVA"))
    _ok(sds("team", "delete", "--org", "Acme", "Field crew"))
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM teams").fetchone() == (0,)
        actions = [r[0] for r in conn.execute(
            "SELECT action FROM audit_log WHERE target_type = 'team' AND actor = 'operator'"
            " ORDER BY id")]
    assert actions == ["team.create", "team.rename", "team.member_add", "team.device_add",
                       "team.location_add", "team.device_remove", "team.delete"]
