"""The simulator: plausible, valid weather; `sds simulate` feeding a real ingester."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from click.testing import CliRunner

from admin import demo, simulate
from admin.cli import main
from ingest.payload import Limits, decode_payload
from shared.config import Settings
from tests.support.ingesting import ROOT as REPO
from tests.support.ingesting import RunningIngester, count, make_site, wait_for
from tests.support.ingesting import settings_env as _env

SITES = [simulate.Site("S1", 41.6, -93.6, 290.0), simulate.Site("S2", -33.9, 151.2, 40.0),
         simulate.Site("S3", 28.6, 77.2, 216.0), simulate.Site("S4", 64.8, -147.7, 130.0)]


def test_weather_is_valid_and_plausible() -> None:
    limits = Limits(horizon=timedelta(days=4000))
    start = datetime(2024, 1, 1, tzinfo=UTC)
    for site in SITES:
        for day in range(0, 366, 15):
            for slot in range(0, 288, 7):
                t = start + timedelta(days=day, minutes=5 * slot)
                body = json.dumps(simulate.reading_body(site, t)).encode()
                out = decode_payload(body, kind="readings", device=site.device,
                                     now=t + timedelta(minutes=1), limits=limits)
                assert out.rejections == [] and out.unknown_fields == 0, (site, t)
    # Iowa in July: sunny afternoons warmer than nights, no sun at night, dew point below air.
    iowa = SITES[0]
    days = [datetime(2024, 7, d, tzinfo=UTC) for d in range(1, 15)]
    afternoon = [simulate.weather(iowa, d.replace(hour=21)) for d in days]  # 15-16 local
    night = [simulate.weather(iowa, d.replace(hour=10)) for d in days]  # 4-5 local
    assert sum(w["tair"] for w in afternoon) > sum(w["tair"] for w in night) + 14 * 4
    assert all(w["swdw"] == 0 for w in night) and max(w["swdw"] for w in afternoon) > 300
    assert simulate.weather(iowa, days[0]) == simulate.weather(iowa, days[0])  # deterministic
    health = simulate.health(iowa, days[0])
    out = decode_payload(json.dumps({"time": "2024-07-01T00:00:00Z", **health}).encode(),
                         kind="health", device="S1", now=days[0], limits=limits)
    assert out.rejections == []


def test_every_bad_kind_is_rejected_or_counted() -> None:
    t = datetime(2024, 7, 1, 12, tzinfo=UTC)
    body = simulate.reading_body(SITES[0], t)
    for kind in simulate.BAD_KINDS:
        bad = simulate.spoil(body, kind)
        raw = bad if isinstance(bad, bytes) else json.dumps(bad).encode()
        out = decode_payload(raw, kind="readings", device="S1", now=t, limits=Limits())
        if kind == "unknown_field":
            assert out.readings and out.unknown_fields == 1
        else:
            assert out.rejections and out.rejections[0].code == kind, kind


def test_simulate_command_feeds_the_ingester(
    conn: psycopg.Connection, mqtt_settings: Settings, ingester: RunningIngester,
) -> None:
    make_site(conn, device="S1")
    make_site(conn, device="S2", tz="Australia/Sydney")
    env = _env(mqtt_settings)
    result = CliRunner().invoke(simulate.simulate, [
        "--backfill-days", "0.5", "--duration", "1", "--bad-ratio", "0.05", "--seed", "3"],
        env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "simulating 2 devices" in result.output

    def stored() -> int:
        conn.rollback()
        n = conn.execute("SELECT count(*) FROM calibrated").fetchone()[0]
        q = conn.execute("SELECT count(*) FROM quarantine").fetchone()[0]
        return n + q
    # 144 backfill slots + the current slot per device; every reading stored or quarantined.
    wait_for(lambda: stored() >= 2 * 145, 20, what="simulated readings")
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM health").fetchone()[0] >= 2 * 12
    reasons = {r[0] for r in conn.execute("SELECT reason FROM quarantine")}
    # A truncated reading inside a catch-up array arrives as a string: bad_shape.
    assert reasons and reasons <= set(simulate.BAD_KINDS) | {"bad_shape"}


def test_simulate_replays_a_past_start_quickly_then_stops_at_now(
    conn: psycopg.Connection, mqtt_settings: Settings, ingester: RunningIngester,
) -> None:
    make_site(conn, device="S1")
    start = datetime.now(UTC) - timedelta(hours=2)
    result = CliRunner().invoke(simulate.simulate, [
        "--device", "S1", "--start", start.strftime("%Y-%m-%dT%H:%M:%SZ"), "--speed", "36000",
        "--duration", "1.5"], env=_env(mqtt_settings), catch_exceptions=False)
    assert result.exit_code == 0, result.output

    def rows() -> int:
        conn.rollback()
        return conn.execute("SELECT count(*) FROM calibrated").fetchone()[0]
    # Two hours of 5-minute slots replayed within the 1.5 s run, never beyond now.
    wait_for(lambda: rows() >= 24, 15, what="replayed readings")
    newest = conn.execute("SELECT max(time) FROM calibrated").fetchone()[0]
    assert newest <= datetime.now(UTC)
    assert conn.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0


def test_simulate_with_device_credentials_and_shipped_acl(
    conn: psycopg.Connection, mqtt_settings: Settings, tmp_path,
) -> None:
    """The run command's shape: the broker refuses anonymous clients and applies the shipped
    ACL; each simulated device logs in as itself, the ingester as `ingester`."""
    from testbed.mosquitto import MosquittoBroker

    make_site(conn, device="S1")
    broker = MosquittoBroker().start(tmp_path / "mqtt", users={
        "ingester": "ingest-pw", "S1": "s1-pw"})
    s = mqtt_settings.replace(mqtt_port=broker.port, mqtt_username="ingester",
                              mqtt_password="ingest-pw", topic_prefix="sensors")
    run = RunningIngester(s).start()
    try:
        creds = tmp_path / "devices.json"
        creds.write_text(json.dumps({"S1": "s1-pw"}))
        result = CliRunner().invoke(simulate.simulate, [
            "--credentials", str(creds), "--backfill-days", "0.25", "--duration", "0.5"],
            env=_env(s), catch_exceptions=False)
        assert result.exit_code == 0, result.output

        def rows() -> int:
            conn.rollback()
            return conn.execute("SELECT count(*) FROM calibrated").fetchone()[0]
        wait_for(lambda: rows() >= 72, 15, what="readings through the authenticated broker")
        # Without the password file entry the device is refused, with a clear message.
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"S1": "wrong"}))
        result = CliRunner().invoke(simulate.simulate, [
            "--credentials", str(bad), "--duration", "0.2"], env=_env(s))
        assert result.exit_code != 0 and "could not connect to the broker" in result.output
    finally:
        run.stop()
        broker.cleanup()


def _run_sh_simulator_argv(credentials: Path) -> list[str]:
    """The simulator's command line exactly as deploy/run.sh starts it (its proc_argv)."""
    script = ('. deploy/run.sh; DEMO_DEVICES="$1"; proc_argv simulate; '
              'printf "%s\\0" "${ARGV[@]}"')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
    out = subprocess.run(["bash", "-c", script, "bash", str(credentials)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.split("\0")[:-1]


def test_run_sh_simulator_keeps_the_demo_devices_going_after_a_device_add(
    conn: psycopg.Connection, mqtt_settings: Settings, tmp_path: Path,
) -> None:
    """Issue 30 6.3: after `sds device add` the simulator (run.sh's command line, under its
    supervisor: every restart and restore starts it so) simulates only the devices it has
    passwords for, the demo devices, skips the new one with one line, and stays up; it
    crash-looped, connecting as the new device without a password."""
    from testbed.mosquitto import MosquittoBroker

    broker = MosquittoBroker().start(tmp_path / "mqtt", users={"ingester": "ingest-pw"})
    passwd = tmp_path / "mqtt" / "passwd"
    s = mqtt_settings.replace(mqtt_port=broker.port, mqtt_username="ingester",
                              mqtt_password="ingest-pw", topic_prefix="sensors")
    env = _env(s)
    creds = tmp_path / "demo-devices.json"
    sup = None
    run = RunningIngester(s).start()
    try:
        made = CliRunner().invoke(main, ["demo", "--credentials-out", str(creds),
                                         "--mqtt-passwd-file", str(passwd)], env=env)
        assert made.exit_code == 0, made.output
        added = CliRunner().invoke(main, [
            "device", "add", "NEW1", "--org", demo.DEMO_ORG, "--location", "Ames corn field",
            "--from", "now", "--mqtt-passwd-file", str(passwd)], env=env)
        assert added.exit_code == 0, added.output
        broker.signal(signal.SIGHUP)  # reread passwd (services.sh reload-broker)
        state, log = tmp_path / "supervise", tmp_path / "simulate.log"
        with log.open("ab") as out:
            sup = subprocess.Popen(
                [sys.executable, str(REPO / "deploy" / "lib" / "supervise.py"), "--name",
                 "simulate", "--state", str(state), "--", *_run_sh_simulator_argv(creds)],
                env=env, cwd=REPO, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                start_new_session=True)
        status = state / "simulate.status"

        def restarts() -> int:
            return int(status.read_text().split()[2]) if status.exists() else 0

        def backfilled() -> bool:  # 3 days of 5-minute readings of every demo device
            return count(conn, "SELECT min(n) FROM (SELECT count(*) n FROM calibrated"
                               " GROUP BY device) c") >= 3 * 288 and count(
                conn, "SELECT count(DISTINCT device) FROM calibrated") == len(demo.DEMO_SITES)

        wait_for(lambda: backfilled() or restarts() > 0, 60, 0.2,
                 what="the demo devices' readings, or a death of the simulator")
        text = log.read_text()
        assert restarts() == 0 and status.read_text().startswith("running"), text
        assert "skipping 1 deployed device(s) without a password in" in text and "NEW1" in text
        assert f"simulating {len(demo.DEMO_SITES)} devices" in text
        assert count(conn, "SELECT count(*) FROM calibrated WHERE device = 'NEW1'") == 0
    finally:
        if sup is not None:
            sup.terminate()
            sup.wait(30)
        run.stop()
        broker.cleanup()


def test_simulator_with_nothing_to_simulate_waits_with_keep_running(
    conn: psycopg.Connection, mqtt_settings: Settings, tmp_path: Path,
) -> None:
    """No deployed device has a password in --credentials: an error, except with
    --keep-running (run.sh's), which says so and waits (here until --duration)."""
    make_site(conn, device="S1")
    creds = tmp_path / "devices.json"
    creds.write_text(json.dumps({"GONE1": "pw"}))
    args = ["--credentials", str(creds), "--duration", "0.2"]
    failed = CliRunner().invoke(simulate.simulate, args, env=_env(mqtt_settings))
    assert failed.exit_code != 0 and "no deployed devices to simulate" in failed.output
    waited = CliRunner().invoke(simulate.simulate, [*args, "--keep-running"],
                                env=_env(mqtt_settings), catch_exceptions=False)
    assert waited.exit_code == 0, waited.output
    assert "skipping 1 deployed device(s) without a password" in waited.output
    assert "nothing to simulate, waiting until stopped" in waited.output
