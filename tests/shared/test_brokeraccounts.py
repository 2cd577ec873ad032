"""The broker's password file as `sds device` and the API's device writes change it
(shared/brokeraccounts.py), with the real mosquitto_passwd: lines added, replaced and removed
as whole lines, hashes only, concurrent writers losing no line, and an unwritable file said as
a BrokerAccountError naming it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from shared import brokeraccounts as ba

pytestmark = pytest.mark.usefixtures("processes")  # mosquitto_passwd hashes the passwords


def _users(passwd: Path) -> list[str]:
    return [line.split(":", 1)[0] for line in passwd.read_text().splitlines()]


def test_lines_are_added_replaced_and_removed_as_hashes(tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    ba.set_mqtt_passwords(passwd, {"E1": "first-password", "E2": "second-password"})
    assert _users(passwd) == ["E1", "E2"] and (passwd.stat().st_mode & 0o777) == 0o600
    assert "first-password" not in passwd.read_text()
    old = passwd.read_text().splitlines()[0]
    ba.set_mqtt_passwords(passwd, {"E1": ba.new_password()})
    assert sorted(_users(passwd)) == ["E1", "E2"] and old not in passwd.read_text()
    assert ba.has_mqtt_user(passwd, "E2") and not ba.has_mqtt_user(passwd, "E")
    assert ba.remove_mqtt_user(passwd, "E2") and _users(passwd) == ["E1"]
    assert not ba.remove_mqtt_user(passwd, "E2")
    assert len(ba.new_password()) == 24


def test_concurrent_writers_lose_no_line(tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    failures: list[BaseException] = []

    def write(prefix: str) -> None:
        try:
            for i in range(8):
                ba.set_mqtt_passwords(passwd, {f"{prefix}{i}": ba.new_password()})
        except BaseException as exc:  # noqa: BLE001  reported below
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(p,)) for p in ("A", "B", "C")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures
    assert sorted(_users(passwd)) == sorted(f"{p}{i}" for p in "ABC" for i in range(8))


def test_an_unwritable_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "passwd"
    with pytest.raises(ba.BrokerAccountError, match="no-such-dir/passwd"):
        ba.set_mqtt_passwords(missing, {"E1": "x-password"})


def test_the_reload_signals_only_a_mosquitto(tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    assert "no running broker" in ba.reload_broker(passwd, None)
    pid_file = tmp_path / "mosquitto.pid"
    pid_file.write_text(f"{threading.get_native_id()}\n")  # this test's own process: no broker
    said = ba.reload_broker(passwd, None)
    assert said.startswith("broker not reloaded") and "not mosquitto" in said
    assert not ba.reloaded(said)
