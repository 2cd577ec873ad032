"""The operator CLI against a real database: each command, and bad input changing nothing."""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime
from pathlib import Path

import paho.mqtt.client as mqtt
import psycopg
import pytest
from click.testing import CliRunner, Result

from admin.cli import main
from testbed.mosquitto import MosquittoBroker
from tests.support.ingesting import wait_for
from tests.support.readings import insert_readings


@pytest.fixture
def sds(database_url: str):  # type: ignore[no-untyped-def]
    runner = CliRunner()

    def run(*args: str, password: str | None = None) -> Result:
        env = {"SDS_DATABASE_URL": database_url}
        if password:
            env["SDS_USER_PASSWORD"] = password
        return runner.invoke(main, list(args), env=env, catch_exceptions=False)

    return run


def _count(url: str, table: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608 - fixed names
    assert row
    return int(row[0])


def _setup(sds) -> None:  # type: ignore[no-untyped-def]
    assert sds("org", "create", "Acme").exit_code == 0
    r = sds("location", "create", "--org", "Acme", "--name", "North", "--tz", "America/Chicago",
            "--lat", "42", "--lon", "-93.6", "--elev", "300")
    assert r.exit_code == 0, r.output
    assert sds("device", "register", "A000001", "--org", "Acme").exit_code == 0


@pytest.mark.parametrize("path", [[], ["db"], ["db", "upgrade"], ["org", "create"],
                                  ["user", "create"], ["location", "create"],
                                  ["location", "update"], ["user", "role"],
                                  ["user", "remove"], ["user", "list"], ["org", "list"],
                                  ["org", "add-member"], ["org", "set-role"],
                                  ["org", "remove-member"],
                                  ["device", "register"], ["device", "deploy"],
                                  ["apikey", "create"], ["demo"], ["config"]])
def test_help_on_every_command(path: list[str]) -> None:
    r = CliRunner().invoke(main, [*path, "--help"])
    assert r.exit_code == 0 and "Usage:" in r.output


def test_db_upgrade_reports_up_to_date_and_timescaledb(sds) -> None:  # type: ignore[no-untyped-def]
    r = sds("db", "upgrade")
    assert r.exit_code == 0
    assert "schema up to date" in r.output and "timescaledb 2." in r.output
    assert "applied" in sds("db", "status").output


def test_full_bootstrap_flow(sds, database_url: str) -> None:  # type: ignore[no-untyped-def]
    _setup(sds)
    r = sds("user", "create", "--org", "Acme", "--email", "Ann@Example.com",
            password="long enough pw")
    assert r.exit_code == 0, r.output
    r = sds("device", "deploy", "A000001", "--location", "North", "--from", "2024-01-01")
    assert r.exit_code == 0, r.output
    r = sds("apikey", "create", "--email", "ann@example.com", "--scope", "data:read")
    assert r.exit_code == 0, r.output
    key = r.output.split()[1]
    assert key.startswith("sdsk_")
    with psycopg.connect(database_url) as c:
        stored = c.execute("SELECT digest, prefix FROM api_keys").fetchall()
        hashes = c.execute("SELECT password_hash FROM users").fetchall()
    assert len(stored) == 1 and key.encode() not in bytes(stored[0][0])
    assert hashes[0][0].startswith("$argon2id$") and "long enough pw" not in hashes[0][0]


def test_password_is_never_taken_from_argv(sds) -> None:  # type: ignore[no-untyped-def]
    sds("org", "create", "Acme")
    r = sds("user", "create", "--org", "Acme", "--email", "a@b.c", "--password", "x")
    assert r.exit_code != 0 and "No such option" in r.output


def test_unknown_zone_is_refused_and_changes_nothing(sds, database_url: str) -> None:  # type: ignore[no-untyped-def]
    sds("org", "create", "Acme")
    r = sds("location", "create", "--org", "Acme", "--name", "X", "--tz", "Mars/Olympus")
    assert r.exit_code == 1 and "unknown time zone 'Mars/Olympus'" in r.output
    assert _count(database_url, "locations") == 0


def test_location_update_changes_fields_and_marks_rollups(sds, database_url: str) -> None:  # type: ignore[no-untyped-def]
    _setup(sds)
    with psycopg.connect(database_url) as conn:
        loc = conn.execute("SELECT id FROM locations WHERE name = 'North'").fetchone()[0]
        insert_readings(conn, "A000001", loc,
                        [{"time": datetime(2026, 6, 10, 12, tzinfo=UTC), "tair": 20}])
    r = sds("location", "update", "North", "--tz", "Asia/Kolkata", "--kc-from", "2026-05-01=0.3",
            "--kc-from", "2026-06-15=1.15", "--crop", "maize", "--clear", "elev")
    assert r.exit_code == 0, r.output
    assert "changed crop, elev, kc_schedule, tz_name; 3 rollup buckets marked" in r.output
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT tz_name, crop, elev FROM locations WHERE id = %s",
                            (loc,)).fetchone() == ("Asia/Kolkata", "maize", None)
        assert conn.execute("SELECT count(*) FROM crop_coefficients").fetchone() == (2,)
        entry = conn.execute("SELECT actor, via, details->'changed' FROM audit_log"
                             " WHERE action = 'location.update'").fetchone()
        assert entry == ("operator", "cli", ["crop", "elev", "kc_schedule", "tz_name"])
    bad = sds("location", "update", "North", "--kc-from", "June=1")
    assert bad.exit_code == 2 and "YYYY-MM-DD=KC" in bad.output
    assert sds("location", "update", "North").exit_code == 2  # nothing to change
    far = sds("location", "update", "North", "--elev", "12000")
    assert far.exit_code == 1 and "elev: 12000.0 is outside -500..9000" in far.output


def test_user_list_role_and_remove(sds, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SDS_USER_PASSWORD", "long-enough-password")
    sds("org", "create", "Acme")
    assert sds("user", "create", "--org", "Acme", "--email", "boss@acme.example",
               "--role", "admin").exit_code == 0
    assert sds("user", "create", "--org", "Acme", "--email", "hand@acme.example").exit_code == 0
    listed = sds("user", "list", "--org", "Acme").output
    assert "boss@acme.example\tadmin\tactive" in listed
    assert "hand@acme.example\tmember\tactive" in listed
    assert sds("user", "role", "hand@acme.example", "admin").output.strip() == \
        "hand@acme.example: admin"
    assert sds("user", "role", "boss@acme.example", "member").exit_code == 0
    last = sds("user", "role", "hand@acme.example", "member")  # the last administrator
    assert last.exit_code == 1 and "last administrator" in last.output
    gone = sds("user", "remove", "boss@acme.example")
    assert gone.exit_code == 0 and "removed" in gone.output
    # The membership is gone; it was boss's only one, so the account is deactivated.
    assert "boss@acme.example" not in sds("user", "list", "--org", "Acme").output
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT active FROM users WHERE email = 'boss@acme.example'"
                            ).fetchone() == (False,)
    with psycopg.connect(database_url) as conn:
        actions = [r[0] for r in conn.execute("SELECT action FROM audit_log ORDER BY id")]
    assert actions[-3:] == ["member.role", "member.role", "member.remove"]


def test_duplicate_device_is_refused(sds, database_url: str) -> None:  # type: ignore[no-untyped-def]
    _setup(sds)
    r = sds("device", "register", "A000001", "--org", "Acme")
    assert r.exit_code == 1 and "device 'A000001' is already registered" in r.output
    assert _count(database_url, "devices") == 1


def test_overlapping_deployment_is_refused_and_changes_nothing(sds, database_url: str) -> None:  # type: ignore[no-untyped-def]
    _setup(sds)
    sds("location", "create", "--org", "Acme", "--name", "South", "--tz", "Asia/Kolkata")
    assert sds("device", "deploy", "A000001", "--location", "North", "--from", "2024-01-01",
               "--to", "2024-02-01").exit_code == 0
    before = _deployments(database_url)
    r = sds("device", "deploy", "A000001", "--location", "South", "--from", "2024-01-15")
    assert r.exit_code == 1 and "already deployed during that time" in r.output
    assert _deployments(database_url) == before


def test_moving_a_device_ends_its_open_deployment(sds, database_url: str) -> None:  # type: ignore[no-untyped-def]
    _setup(sds)
    sds("location", "create", "--org", "Acme", "--name", "South", "--tz", "Asia/Kolkata")
    sds("device", "deploy", "A000001", "--location", "North", "--from", "2024-01-01")
    assert sds("device", "deploy", "A000001", "--location", "South",
               "--from", "2024-03-01T00:00:00Z").exit_code == 0
    spans = _deployments(database_url)
    assert spans == [("2024-01-01 00:00:00+00", "2024-03-01 00:00:00+00"),
                     ("2024-03-01 00:00:00+00", None)]


def _deployments(url: str) -> list[tuple[str | None, str | None]]:
    with psycopg.connect(url) as c:
        c.execute("SET TIME ZONE 'UTC'")
        return [(r[0], r[1]) for r in c.execute(
            "SELECT lower(during)::text, upper(during)::text FROM deployments ORDER BY 1")]


def test_bad_input_messages(sds) -> None:  # type: ignore[no-untyped-def]
    _setup(sds)
    assert "unknown organisation 'Nope'" in sds("device", "register", "B1", "--org", "Nope").output
    assert "unknown device 'ZZZ'" in sds("device", "deploy", "ZZZ", "--location", "North",
                                         "--from", "now").output
    assert "unknown location 'Nowhere'" in sds("device", "deploy", "A000001", "--location",
                                               "Nowhere", "--from", "now").output
    r = sds("device", "deploy", "A000001", "--location", "North", "--from", "soon")
    assert r.exit_code == 1 and "--from" in r.output
    r = sds("device", "register", "bad name!", "--org", "Acme")
    assert r.exit_code == 1 and "letters, digits" in r.output
    sds("user", "create", "--org", "Acme", "--email", "a@b.c", password="long enough pw")
    r = sds("apikey", "create", "--email", "a@b.c", "--scope", "root")
    assert r.exit_code == 1 and "unknown scope(s) root" in r.output


def test_demo_creates_everything_once(sds, database_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    creds = tmp_path / "devices.json"
    r = sds("demo", "--credentials-out", str(creds))
    assert r.exit_code == 0, r.output
    assert "api key:      sdsk_" in r.output and "password:" in r.output
    devices = json.loads(creds.read_text())
    assert len(devices) == _count(database_url, "devices") == 5
    assert _count(database_url, "deployments") == 5
    with psycopg.connect(database_url) as c:
        zones = {r[0] for r in c.execute("SELECT tz_name FROM locations")}
    assert {"Asia/Kolkata", "America/Santiago"} <= zones
    # Every demo location has soil, roots and a crop: the water balance runs there (issue 35).
    assert _count(database_url, "water_settings") == 5
    again = sds("demo")
    assert again.exit_code == 1 and "already exists" in again.output
    assert _count(database_url, "devices") == 5


def test_config_lists_variables() -> None:
    r = CliRunner().invoke(main, ["config"])
    assert r.exit_code == 0 and "SDS_DATABASE_URL" in r.output and "(secret)" in r.output


def test_device_broker_password_works_and_never_touches_argv(
        sds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The broker accepts the printed password; other users' lines are kept."""
    _setup(sds)
    passwd = tmp_path / "passwd"
    passwd.write_text("ingester:$7$101$placeholder$placeholder\n")
    r = sds("device", "register", "A000002", "--org", "Acme", "--mqtt-passwd-file", str(passwd))
    assert r.exit_code == 0, r.output
    password = r.output.split("password ")[1].split()[0]
    lines = passwd.read_text().splitlines()
    assert lines[0].startswith("ingester:") and lines[1].startswith("A000002:$7$")
    assert password not in passwd.read_text()
    broker = MosquittoBroker().start(tmp_path / "mq", durable=False,
                                     users={"probe": "probe-password"})
    try:
        # Install the generated line into the running broker's password file; SIGHUP rereads it.
        own = broker.base_dir / "passwd"
        own.write_text(own.read_text() + lines[1] + "\n")
        broker.signal(signal.SIGHUP)
        # SIGHUP is asynchronous: poll for the reload.
        wait_for(lambda: _connect_rc(broker.port, "A000002", password) == 0, 5,
                 what="the broker to accept the generated password")
        assert _connect_rc(broker.port, "A000002", "wrong-password") not in (0, None)
    finally:
        broker.stop()


def _connect_rc(port: int, user: str, password: str) -> int | None:
    """The broker's CONNACK reason code for these credentials (None: no answer in 5 s)."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    c.username_pw_set(user, password)
    codes: list[int] = []
    c.on_connect = lambda cl, u, f, rc, p: codes.append(int(rc.value))
    c.connect("127.0.0.1", port)
    for _ in range(50):
        c.loop(timeout=0.1)
        if codes:
            break
    c.disconnect()
    return codes[0] if codes else None


def test_org_memberships(sds, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """sds org list|add-member|set-role|remove-member: a user in two organisations."""
    monkeypatch.setenv("SDS_USER_PASSWORD", "long-enough-password")
    for name in ("Acme", "Bolt"):
        sds("org", "create", name)
    sds("user", "create", "--org", "Acme", "--email", "own@acme.example", "--role", "owner")
    sds("user", "create", "--org", "Acme", "--email", "ann@acme.example")
    added = sds("org", "add-member", "Bolt", "ann@acme.example", "--role", "viewer",
                "--teams-only")
    assert added.exit_code == 0 and added.output.strip() == "ann@acme.example: viewer of Bolt"
    again = sds("org", "add-member", "Bolt", "ann@acme.example")
    assert again.exit_code == 1 and "member of the organisation already" in again.output
    bad = sds("org", "add-member", "Bolt", "own@acme.example", "--role", "admin", "--teams-only")
    assert bad.exit_code == 1 and "teams_only" in bad.output
    listed = sds("org", "list", "--user", "ann@acme.example").output.splitlines()
    assert [line.split("\t")[:3] for line in listed] == [["Acme", "member", "2"],
                                                         ["Bolt", "viewer", "teams-only"]]
    assert [line.split("\t")[:2] for line in sds("org", "list").output.splitlines()] == [
        ["Acme", "2"], ["Bolt", "1"]]
    # The role in Bolt changes alone; --all-devices lifts teams_only.
    assert sds("org", "set-role", "Bolt", "ann@acme.example", "member",
               "--all-devices").output.strip() == "ann@acme.example: member"
    assert "ann@acme.example\tmember\tactive" in sds("user", "list", "--org", "Bolt").output
    last = sds("org", "set-role", "Acme", "own@acme.example", "admin")
    assert last.exit_code == 1 and "last owner" in last.output
    # Leaving the home organisation moves the home; leaving the last one deactivates.
    assert sds("org", "remove-member", "Acme", "ann@acme.example").exit_code == 0
    with psycopg.connect(database_url) as conn:
        home = conn.execute("SELECT o.name, u.active FROM users u JOIN organisations o"
                            " ON o.id = u.org_id WHERE u.email = 'ann@acme.example'").fetchone()
        assert home == ("Bolt", True)
    assert sds("user", "remove", "ann@acme.example").exit_code == 0  # the home one: Bolt
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT active FROM users WHERE email = 'ann@acme.example'"
                            ).fetchone() == (False,)
        actions = [r[0] for r in conn.execute(
            "SELECT action FROM audit_log WHERE action LIKE 'member.%' ORDER BY id")]
    assert actions == ["member.add", "member.role", "member.remove", "member.remove"]
