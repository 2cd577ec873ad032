"""The device life cycle through `sds device` against a real database, a real mosquitto with
password file and the shipped ACL, and a running ingester: add (register + deploy + broker
password + reload in one command), list, show, publish-test (stored row or quarantine reason),
rotate-password, retire; and `--from` is never assumed."""

from __future__ import annotations

from pathlib import Path

import psycopg
from click.testing import CliRunner, Result

from admin.cli import main
from testbed.mosquitto import MosquittoBroker


def _sds(database_url: str, broker: MosquittoBroker, *args: str,
         device_password: str | None = None) -> Result:
    env = {"SDS_DATABASE_URL": database_url, "SDS_MQTT_HOST": "127.0.0.1",
           "SDS_MQTT_PORT": str(broker.port)}
    if device_password is not None:
        env["SDS_DEVICE_PASSWORD"] = device_password
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _password(result: Result) -> str:
    line = next(x for x in result.output.splitlines() if x.startswith("mqtt username"))
    return line.split()[-1]


def test_device_life_cycle(database_url: str,
                           deployed_broker: tuple[MosquittoBroker, Path],
                           deployed_ingester: None) -> None:
    broker, passwd = deployed_broker

    def sds(*args: str, device_password: str | None = None) -> Result:
        return _sds(database_url, broker, *args, device_password=device_password)

    assert sds("org", "create", "Acme").exit_code == 0
    assert sds("location", "create", "--org", "Acme", "--name", "North", "--tz",
               "America/Chicago").exit_code == 0

    # --from is required: a deployment is never silently dated now.
    r = sds("device", "add", "A000300", "--org", "Acme", "--location", "North",
            "--mqtt-passwd-file", str(passwd))
    assert r.exit_code == 2 and "--from" in r.output

    r = sds("device", "add", "A000300", "--org", "Acme", "--location", "North", "--from",
            "2024-01-01T00:00:00Z", "--mqtt-passwd-file", str(passwd))
    assert r.exit_code == 0, r.output
    assert f"broker reloaded (SIGHUP to mosquitto pid {broker.pid})" in r.output
    first_pw = _password(r)
    assert "A000300:" in passwd.read_text() and first_pw not in passwd.read_text()

    r = sds("device", "list", "--org", "Acme")
    assert r.exit_code == 0 and "A000300" in r.output and "North" in r.output
    assert "1 device(s)" in r.output

    # The reload made the new login work: a health report lands as a row.
    r = sds("device", "publish-test", "A000300", device_password=first_pw)
    assert r.exit_code == 0, r.output
    assert "stored: health row A000300" in r.output and "location North" in r.output

    # A bad reading lands in quarantine, the command says why, and its exit status says the
    # test publish failed (a script must not read a refused reading as a success).
    r = sds("device", "publish-test", "A000300", "--reading",
            '{"time": "2024-07-01T12:03:00Z", "tair": 20}', device_password=first_pw)
    assert r.exit_code == 1, r.output
    assert "quarantined: off_grid" in r.output
    assert "1 of the message's readings went to quarantine" in r.output

    r = sds("device", "show", "A000300")
    assert r.exit_code == 0
    assert "state:         New" in r.output or "state:         Active" in r.output
    assert "North (America/Chicago) from 2024-01-01T00:00:00+00:00 (current)" in r.output
    assert "last health:" in r.output and "off_grid: 1" in r.output

    # Rotation: the old password is refused after the reload, the new one works.
    r = sds("device", "rotate-password", "A000300", "--mqtt-passwd-file", str(passwd))
    assert r.exit_code == 0 and "broker reloaded" in r.output
    second_pw = _password(r)
    assert second_pw != first_pw
    r = sds("device", "publish-test", "A000300", device_password=first_pw)
    assert r.exit_code == 1 and "the broker refused A000300" in r.output
    r = sds("device", "publish-test", "A000300", device_password=second_pw)
    assert r.exit_code == 0 and "stored: health row" in r.output

    # Retire: deployment ended, state Retired, broker login gone.
    r = sds("device", "retire", "A000300", "--at", "2024-06-01T00:00:00Z",
            "--mqtt-passwd-file", str(passwd))
    assert r.exit_code == 0, r.output
    assert "its deployment ended" in r.output and "broker password removed" in r.output
    assert "A000300:" not in passwd.read_text() and "ingester:" in passwd.read_text()
    with psycopg.connect(database_url) as conn:
        state, upper = conn.execute(
            "SELECT d.state, upper(dp.during) FROM devices d JOIN deployments dp"
            " ON dp.device_id = d.id WHERE d.name = 'A000300'").fetchone()  # type: ignore[misc]
    assert state == "Retired" and upper.isoformat() == "2024-06-01T00:00:00+00:00"
    r = sds("device", "publish-test", "A000300", device_password=second_pw)
    assert r.exit_code == 1 and "refused" in r.output
    assert sds("device", "list", "--state", "Retired").output.count("A000300") == 1
    r = sds("device", "retire", "A000300", "--at", "now")
    assert r.exit_code == 1 and "already retired" in r.output


def test_add_refuses_an_unknown_location_and_leaves_nothing(
        database_url: str, deployed_broker: tuple[MosquittoBroker, Path]) -> None:
    broker, passwd = deployed_broker
    assert _sds(database_url, broker, "org", "create", "Acme").exit_code == 0
    before = passwd.read_text()
    r = _sds(database_url, broker, "device", "add", "A000301", "--org", "Acme", "--location",
             "Nowhere", "--from", "now", "--mqtt-passwd-file", str(passwd))
    assert r.exit_code == 1 and "unknown location 'Nowhere'" in r.output
    assert passwd.read_text() == before
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM devices").fetchone() == (0,)


def test_retire_before_the_deployment_started_is_refused(
        database_url: str, deployed_broker: tuple[MosquittoBroker, Path]) -> None:
    broker, passwd = deployed_broker
    for args in (("org", "create", "Acme"),
                 ("location", "create", "--org", "Acme", "--name", "N", "--tz", "UTC"),
                 ("device", "add", "A000302", "--org", "Acme", "--location", "N", "--from",
                  "2024-03-01", "--mqtt-passwd-file", str(passwd))):
        assert _sds(database_url, broker, *args).exit_code == 0
    r = _sds(database_url, broker, "device", "retire", "A000302", "--at", "2024-02-01")
    assert r.exit_code == 1 and "not after the start of a deployment" in r.output
