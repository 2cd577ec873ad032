"""The deploy files and test-service helpers against real servers: TimescaleDB in our PostgreSQL,
the shipped mosquitto config's durability and ACL, the gunicorn log format, and setup.sh's
mirror lookup (which must never write a host name into the repo)."""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util
import os
import queue
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import paho.mqtt.client as mqtt
import psycopg
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from psycopg import sql

from admin import migrate
from shared.config import Settings
from shared.db import ROLES
from testbed.mosquitto import (
    DURABLE_CONF,
    SHIPPED_ACL,
    SHIPPED_CONF,
    MosquittoBroker,
    conf_settings,
)
from testbed.postgres import PostgresServer
from testbed.process import REPO, free_port
from tests.support.ports import in_ephemeral_range, span

WAIT = 10.0  # seconds; every wait below is bounded by this
USERS = {"ingester": "ingester-pw", "A000001": "a1-pw", "A000002": "a2-pw"}


def _load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


apt_mirror = _load_module(REPO / "deploy" / "lib" / "apt_mirror.py", "sds_apt_mirror")
supervise = _load_module(REPO / "deploy" / "lib" / "supervise.py", "sds_supervise")


# ---- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg(processes: None) -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.cleanup()


def test_postgres_has_timescaledb(pg: PostgresServer) -> None:
    dsn = pg.create_database("deploy_tsdb")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS timescaledb")
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'"
        ).fetchone()
        assert row is not None and re.fullmatch(r"\d+\.\d+\.\d+", row[0])
        conn.execute("CREATE TABLE r (time timestamptz NOT NULL, v real)")
        conn.execute("SELECT create_hypertable('r', by_range('time'))")
        conn.execute("INSERT INTO r VALUES (now(), 1.5)")
        assert conn.execute("SELECT count(*) FROM r").fetchone() == (1,)
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('listen_addresses', 'fsync', 'timescaledb.telemetry_level')"
            ).fetchall()
        )
    assert settings == {
        "listen_addresses": "127.0.0.1",
        "fsync": "off",
        "timescaledb.telemetry_level": "off",
    }


@pytest.mark.usefixtures("processes")
def test_postgres_without_timescaledb_is_plain(tmp_path: Path) -> None:
    pg = PostgresServer().start(tmp_path / "plain", timescaledb=False)
    try:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            assert conn.execute("SHOW shared_preload_libraries").fetchone() == ("",)
            with pytest.raises(psycopg.Error, match="shared_preload_libraries"):
                conn.execute("CREATE EXTENSION timescaledb")
    finally:
        pg.cleanup()


@pytest.mark.usefixtures("processes")
def test_postgres_crash_and_restart_keep_committed_rows(tmp_path: Path) -> None:
    # durable=True: with the fast settings a crash may lose the last commits
    # (synchronous_commit=off), which is exactly what crash tests must not hide.
    pg = PostgresServer().start(tmp_path / "pg", durable=True)
    try:
        dsn = pg.create_database("deploy_crash")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (n int)")
            conn.execute("INSERT INTO t VALUES (1)")
        pg.crash()
        assert not pg.is_running()
        pg.restart()
        assert pg.is_running()
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT n FROM t").fetchall() == [(1,)]
        pg.create_database("deploy_from_template", template="deploy_crash")
    finally:
        pg.cleanup()


# ---- mosquitto ----------------------------------------------------------------------------------


class Client:
    """A paho v2 MQTT 5 client with its network loop running, recording what it receives."""

    def __init__(
        self, broker: MosquittoBroker, client_id: str, user: str | None, *, persistent: bool = False
    ) -> None:
        self.connected: queue.Queue[tuple[bool, bool]] = queue.Queue()
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.subscribed = threading.Event()
        self.mqtt = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=MQTTProtocolVersion.MQTTv5
        )
        if user is not None:
            self.mqtt.username_pw_set(user, USERS.get(user, "wrong"))
        self.mqtt.on_connect = self._on_connect
        self.mqtt.on_message = lambda client, userdata, msg: self.messages.put(msg)
        self.mqtt.on_subscribe = lambda *args: self.subscribed.set()
        props = None
        if persistent:
            # Both are needed for a session that outlives the connection (reliability plan #3).
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 3600
        self.mqtt.connect("127.0.0.1", broker.port, clean_start=not persistent, properties=props)
        self.mqtt.loop_start()
        self.ok, self.session_present = self.connected.get(timeout=WAIT)

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:  # noqa: ANN001
        self.connected.put((not reason_code.is_failure, bool(flags.session_present)))

    def subscribe(self, topic: str) -> None:
        self.subscribed.clear()
        self.mqtt.subscribe(topic, qos=1)
        assert self.subscribed.wait(WAIT)

    def publish(self, topic: str, payload: bytes) -> None:
        info = self.mqtt.publish(topic, payload, qos=1)
        info.wait_for_publish(timeout=WAIT)
        assert info.is_published()

    def close(self) -> None:
        self.mqtt.disconnect()
        self.mqtt.loop_stop()


@pytest.fixture
def broker() -> Iterator[MosquittoBroker]:
    server = MosquittoBroker().start(users=USERS)  # shipped ACL + shipped durable.conf
    try:
        yield server
    finally:
        server.cleanup()


def test_queued_message_survives_broker_sigterm(broker: MosquittoBroker) -> None:
    ingester = Client(broker, "deploy-test-ingester", "ingester", persistent=True)
    ingester.subscribe("sensors/#")
    ingester.close()

    device = Client(broker, "A000001", "A000001")
    device.publish("sensors/A000001/readings", b"queued-while-offline")
    device.close()

    broker.restart()  # SIGTERM (saves the store), then start from it

    again = Client(broker, "deploy-test-ingester", "ingester", persistent=True)
    try:
        assert again.session_present
        msg = again.messages.get(timeout=WAIT)
        assert (msg.topic, msg.payload) == ("sensors/A000001/readings", b"queued-while-offline")
    finally:
        again.close()


def _first_message_after_forgery(broker: MosquittoBroker) -> mqtt.MQTTMessage:
    """A000001 publishes to A000002's topic, then to its own; what does the ingester get first?"""
    ingester = Client(broker, "deploy-acl-ingester", "ingester")
    ingester.subscribe("sensors/#")
    device = Client(broker, "A000001", "A000001")
    try:
        device.mqtt.publish("sensors/A000002/readings", b"forged", qos=1).wait_for_publish(WAIT)
        device.publish("sensors/A000001/readings", b"own")
        # Per-publisher order holds through the broker: had the forged one passed, it came first.
        return ingester.messages.get(timeout=WAIT)
    finally:
        device.close()
        ingester.close()


def test_acl_keeps_devices_to_their_own_topic(broker: MosquittoBroker) -> None:
    msg = _first_message_after_forgery(broker)
    assert (msg.topic, msg.payload) == ("sensors/A000001/readings", b"own")


@pytest.mark.usefixtures("processes")
def test_acl_negative_control_forgery_passes_without_the_pattern() -> None:
    """Proves the test above can fail: with a permissive ACL the forged reading arrives."""
    permissive = "pattern write sensors/#\nuser ingester\ntopic read sensors/#\n"
    broker = MosquittoBroker().start(users=USERS, acl=permissive, durable=False)
    try:
        msg = _first_message_after_forgery(broker)
        assert (msg.topic, msg.payload) == ("sensors/A000002/readings", b"forged")
    finally:
        broker.cleanup()


@pytest.mark.parametrize(
    "user", [None, "A000001:wrong-password"], ids=["anonymous", "bad_password"]
)
def test_broker_refuses_clients_without_valid_credentials(
    broker: MosquittoBroker,
    user: str | None,
) -> None:
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id="deploy-intruder",
        protocol=MQTTProtocolVersion.MQTTv5,
    )
    if user is not None:
        name, password = user.split(":")
        client.username_pw_set(name, password)
    result: queue.Queue[bool] = queue.Queue()
    client.on_connect = lambda c, u, f, reason_code, p: result.put(reason_code.is_failure)
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    try:
        assert result.get(timeout=WAIT) is True
    finally:
        client.disconnect()
        client.loop_stop()


@pytest.mark.usefixtures("processes")
def test_shipped_template_starts_and_persists(tmp_path: Path) -> None:
    """R10 in small: the config services.sh renders starts, and the store is writable."""
    broker = MosquittoBroker().start(tmp_path / "mq", users=USERS, shipped_template=True)
    try:
        ingester = Client(broker, "deploy-tpl-ingester", "ingester", persistent=True)
        ingester.subscribe("sensors/#")
        ingester.close()
        broker.signal(signal.SIGUSR1)  # save now
        store = broker.data_dir / "mosquitto.db"
        deadline = dt.datetime.now() + dt.timedelta(seconds=WAIT)
        while not store.exists() and dt.datetime.now() < deadline:
            threading.Event().wait(0.05)
        assert store.exists()
        assert "Error saving" not in broker.log_text()
    finally:
        broker.cleanup()


def test_shipped_mosquitto_settings() -> None:
    durable = conf_settings(DURABLE_CONF.read_text())
    assert durable["persistence"] == "true"
    assert int(durable["max_queued_messages"]) > 1000
    assert durable["max_queued_bytes"] == "0"
    assert int(durable["autosave_interval"]) <= 2
    assert durable["autosave_on_changes"] == "false"
    assert int(durable["max_inflight_messages"]) == 20
    # The largest legitimate message's limit plus 4 KiB (tests/ingest/test_quarantine_budget.py)
    assert int(durable["max_packet_size"]) == Settings().ingest_max_payload + 4096
    template = conf_settings(SHIPPED_CONF.read_text())
    assert template["allow_anonymous"] == "false"
    assert template["listener"] == "@PORT@ @BIND@"
    assert template["use_username_as_clientid"] == "true"  # broker identity (issue 11)
    assert {"password_file", "acl_file", "persistence_location"} <= template.keys()
    acl = SHIPPED_ACL.read_text()
    assert "pattern write sensors/%u/#" in acl
    assert re.search(r"^user ingester\ntopic read sensors/#$", acl, re.MULTILINE)


def test_free_port_is_bindable_on_loopback() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # raises when the port is taken
        assert s.getsockname() == ("127.0.0.1", port) and 1024 <= port <= 65535


# ---- gunicorn -----------------------------------------------------------------------------------


def test_gunicorn_access_log_hides_query_string(monkeypatch: pytest.MonkeyPatch) -> None:
    from gunicorn.config import Config
    from gunicorn.glogging import Logger

    monkeypatch.setenv("SDS_HTTP_BIND", "127.0.0.1:9999")
    monkeypatch.setenv("SDS_HTTP_WORKERS", "3")
    settings: dict[str, object] = {}
    exec(
        compile((REPO / "deploy" / "gunicorn.conf.py").read_text(), "gunicorn.conf.py", "exec"),
        {"__file__": str(REPO / "deploy" / "gunicorn.conf.py")},
        settings,
    )
    assert settings["bind"] == ["127.0.0.1:9999"] and settings["workers"] == 3

    cfg = Config()
    cfg.set("access_log_format", settings["access_log_format"])
    environ = {
        "REQUEST_METHOD": "GET",
        "RAW_URI": "/api/v2/schemas?apikey=SECRETKEY",
        "PATH_INFO": "/api/v2/schemas",
        "QUERY_STRING": "apikey=SECRETKEY",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_REFERER": "http://x/?apikey=SECRETKEY",
    }
    resp = SimpleNamespace(status="200 OK", sent=12, headers=[])
    atoms = Logger(cfg).atoms(resp, SimpleNamespace(headers=[]), environ, dt.timedelta(0, 0, 1500))
    line = settings["access_log_format"] % Logger.atoms_wrapper_class(atoms)  # type: ignore[operator]
    assert "/api/v2/schemas" in line and "SECRETKEY" not in line


# ---- setup.sh's mirror lookup -------------------------------------------------------------------

DEB822 = """\
Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

ONE_LINE = """\
# deb cdrom:[Debian GNU/Linux 12]/ bookworm main
deb http://security.example/debian-security bookworm-security main
deb [arch=amd64 signed-by=/etc/apt/keyrings/local.gpg] http://local.example/debian bookworm main
deb-src http://local.example/debian bookworm main
"""


def _fake_root(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_mirror_from_deb822_sources(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, {"etc/apt/sources.list.d/debian.sources": DEB822})
    mirror = apt_mirror.find_mirror(root, "bookworm")
    assert mirror.uri == "http://mirror.example/debian"
    stanza = apt_mirror.render_deb_src(mirror, "trixie")
    fields = dict(line.split(": ", 1) for line in stanza.splitlines() if not line.startswith("#"))
    assert fields == {
        "Types": "deb-src",
        "URIs": "http://mirror.example/debian",
        "Suites": "trixie",
        "Components": "main",
        "Signed-By": "/usr/share/keyrings/debian-archive-keyring.gpg",
    }


def test_mirror_from_one_line_sources_list(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, {"etc/apt/sources.list": ONE_LINE})
    mirror = apt_mirror.find_mirror(root, "bookworm")
    assert (mirror.uri, mirror.signed_by) == (
        "http://local.example/debian",
        "/etc/apt/keyrings/local.gpg",
    )


def test_mirror_skips_disabled_entries_and_keeps_embedded_keys(tmp_path: Path) -> None:
    disabled = DEB822.replace("Types: deb\n# a comment", "Enabled: no\nTypes: deb", 1)
    embedded = (
        "Types: deb\nURIs: http://second.example/debian\nSuites: bookworm\n"
        "Components: main\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n"
        " abc\n -----END PGP PUBLIC KEY BLOCK-----\n"
    )
    root = _fake_root(
        tmp_path,
        {
            "etc/apt/sources.list.d/a.sources": disabled,
            "etc/apt/sources.list.d/b.sources": embedded,
        },
    )
    mirror = apt_mirror.find_mirror(root, "bookworm")
    assert mirror.uri == "http://second.example/debian"
    assert (
        "Signed-By: \n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n"
        in apt_mirror.render_deb_src(mirror, "trixie")
    )


@pytest.mark.usefixtures("processes")
def test_mirror_cli(tmp_path: Path) -> None:
    root = _fake_root(
        tmp_path,
        {
            "etc/apt/sources.list.d/debian.sources": DEB822,
            "etc/os-release": "ID=debian\nVERSION_CODENAME=bookworm\n",
        },
    )
    script = REPO / "deploy" / "lib" / "apt_mirror.py"
    out = subprocess.run(
        [sys.executable, script, "--suite", "trixie", "--root", root],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert "URIs: http://mirror.example/debian\nSuites: trixie\n" in out
    missing = subprocess.run(
        [sys.executable, script, "--suite", "trixie", "--root", root, "--codename", "sid"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert missing.returncode == 1 and "no enabled 'deb' entry" in missing.stderr


@pytest.mark.usefixtures("processes")
def test_repo_names_no_debian_host() -> None:
    """Mirrors come from the machine's own apt config; the repo must not name Debian's hosts."""
    host = "debian" + ".org"  # split so this file does not match itself
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if listed.returncode == 0:
        files = listed.stdout.splitlines()
    else:  # not a git checkout (e.g. an unpacked archive): walk it, skipping generated trees
        skip = {".git", ".venv", ".state", "__pycache__", ".pytest_cache", ".hypothesis"}
        files = [
            str(p.relative_to(REPO))
            for p in REPO.rglob("*")
            if not skip & set(p.relative_to(REPO).parts)
        ]
    hits = [
        f for f in files if (REPO / f).is_file() and host in (REPO / f).read_text(errors="replace")
    ]
    assert hits == []


@pytest.mark.usefixtures("processes")
def test_deploy_scripts_parse() -> None:
    scripts = [
        *sorted((REPO / "deploy").glob("*.sh")),
        *sorted((REPO / "deploy" / "lib").glob("*.sh")),
        REPO / ".ci" / "run",
    ]
    for script in scripts:
        result = subprocess.run(["bash", "-n", script], capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, f"{script}: {result.stderr}"


def test_the_systemd_unit_runs_the_run_command() -> None:
    """One deployment shape: the systemd unit wraps deploy/run.sh (start and stop), so a systemd
    host runs the tested, supervised process list rather than a copy of it."""
    units = sorted((REPO / "deploy" / "systemd").glob("*.service"))
    assert [u.name for u in units] == ["sds.service"]
    lines = dict(line.split("=", 1) for line in units[0].read_text().splitlines()
                 if "=" in line and not line.startswith("#"))
    root = lines["WorkingDirectory"]
    assert lines["ExecStart"] == f"{root}/deploy/run.sh"
    assert lines["ExecStop"] == f"{root}/deploy/run.sh stop"
    assert lines["Type"] == "oneshot" and lines["RemainAfterExit"] == "yes"
    assert not (REPO / "deploy" / "compose.yaml").exists()


# ---- services.sh, end to end in a scratch copy --------------------------------------------------


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


@pytest.mark.usefixtures("processes")
@pytest.mark.skipif(os.geteuid() != 0, reason="services.sh runs PostgreSQL and mosquitto as root")
def test_services_sh_start_is_idempotent_and_stops(tmp_path: Path) -> None:
    """services.sh in a copy of deploy/ (so its .state is scratch) on free ports."""
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    env = {**os.environ, "SDS_PG_PORT": str(free_port()), "SDS_MQTT_PORT": str(free_port())}
    script = str(tmp_path / "deploy" / "services.sh")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", script, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    try:
        first = run("start")
        assert first.returncode == 0, first.stdout + first.stderr
        state = tmp_path / ".state"
        secrets = dict(
            line.split("=", 1)
            for line in (state / "secrets.env").read_text().splitlines()
            if line and not line.startswith("#")
        )
        assert (state / "secrets.env").stat().st_mode & 0o077 == 0
        with psycopg.connect(secrets["SDS_DATABASE_URL"]) as conn:
            assert conn.execute(
                "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
            ).fetchone() == ("sds", False)
            assert conn.execute(
                "SELECT count(*) FROM pg_extension WHERE extname IN ('timescaledb', 'btree_gist')"
            ).fetchone() == (2,)
        # The deploy role (no CREATEROLE) migrates, including the roles migration 0050 relies
        # on services.sh for, and may switch to each process role.
        migrate.upgrade(secrets["SDS_DATABASE_URL"])
        with psycopg.connect(secrets["SDS_DATABASE_URL"]) as conn:
            for role in ROLES:
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
            assert conn.execute("SELECT current_user").fetchone() == (ROLES[-1],)
        ok: queue.Queue[bool] = queue.Queue()
        client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=MQTTProtocolVersion.MQTTv5)
        client.username_pw_set(secrets["SDS_MQTT_USERNAME"], secrets["SDS_MQTT_PASSWORD"])
        client.on_connect = lambda c, u, f, reason_code, p: ok.put(not reason_code.is_failure)
        client.connect("127.0.0.1", int(secrets["SDS_MQTT_PORT"]))
        client.loop_start()
        try:
            assert ok.get(timeout=WAIT)
        finally:
            client.disconnect()
            client.loop_stop()

        watched = [
            state / "secrets.env",
            state / "mosquitto" / "mosquitto.conf",
            state / "mosquitto" / "passwd",
            state / "pg" / "data" / "sds.conf",
        ]
        before = [p.stat().st_mtime_ns for p in watched]
        second = run("start")
        assert second.returncode == 0, second.stdout + second.stderr
        assert "already running" in second.stdout and "creating" not in second.stdout
        assert [p.stat().st_mtime_ns for p in watched] == before
        assert run("status").returncode == 0

        # Both servers run under their supervisors: a SIGKILLed one is back, and status says so.
        for name in ("broker", "postgresql"):
            status_file = state / "supervise" / f"{name}.status"
            child = int(status_file.read_text().split()[1])
            os.kill(child, signal.SIGKILL)
            wait_for(lambda f=status_file, c=child: (w := f.read_text().split())[0] == "running"
                     and int(w[1]) != c)
        after = wait_for(lambda: (r := run("status")).returncode == 0 and r)
        assert after.stdout.count("1 restart, last exit: killed by SIGKILL") == 2, after.stdout
        wait_for(lambda: _answers(secrets["SDS_DATABASE_URL"]))  # after its crash recovery
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert run("status").returncode == 3


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A scratch directory with a short path: PostgreSQL's unix socket path holds at most 107
    bytes, and the standby's (.state/pg-standby/run/.s.PGSQL.<port>) under pytest's tmp_path on
    an xdist worker (/tmp/pytest-of-root/pytest-N/popen-gwK/<test name>0/) came to 107-109."""
    path = Path(tempfile.mkdtemp(prefix="sds-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.usefixtures("processes")
@pytest.mark.skipif(os.geteuid() != 0, reason="services.sh runs PostgreSQL and mosquitto as root")
def test_services_sh_standby_streams_synchronously_and_promotes(short_tmp: Path) -> None:
    """standby-init makes a synchronous hot standby through a replication slot; the URLs in
    secrets.env reach the primary (writes) and the standby (reads); promote makes it the
    primary behind the same SDS_DATABASE_URL and retires the old one for good."""
    tmp_path = short_tmp
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    env = {**os.environ, "SDS_PG_PORT": str(free_port()),
           "SDS_PG_STANDBY_PORT": str(free_port()), "SDS_MQTT_PORT": str(free_port())}
    script = str(tmp_path / "deploy" / "services.sh")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", script, *args], env=env, capture_output=True, text=True,
                              timeout=180, stdin=subprocess.DEVNULL)

    def secrets() -> dict[str, str]:
        return dict(line.split("=", 1)
                    for line in (tmp_path / ".state" / "secrets.env").read_text().splitlines()
                    if line and not line.startswith("#"))

    try:
        assert (r := run("start")).returncode == 0, r.stdout + r.stderr
        assert "SDS_DATABASE_READ_URL" not in secrets()
        assert (r := run("standby-init")).returncode == 0, r.stdout + r.stderr
        s = secrets()
        with psycopg.connect(s["SDS_DATABASE_URL"], autocommit=True) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
            conn.execute("CREATE TABLE drill (x int)")
            conn.execute("INSERT INTO drill VALUES (1)")  # synchronous: on the standby now
        with psycopg.connect(s["SDS_DATABASE_READ_URL"]) as conn:
            assert conn.execute("SELECT pg_is_in_recovery(), count(*) FROM drill"
                                ).fetchone() == (True, 1)
        ps = run("psql", "-tA", "-c", "SELECT application_name, sync_state FROM "
                 "pg_stat_replication")
        assert ps.stdout.strip() == "sds_standby|sync", ps.stdout + ps.stderr
        assert (r := run("promote")).returncode == 0, r.stdout + r.stderr
        with psycopg.connect(s["SDS_DATABASE_URL"], autocommit=True) as conn:
            assert conn.execute("SELECT pg_is_in_recovery(), inet_server_port()").fetchone() == (
                False, int(env["SDS_PG_STANDBY_PORT"]))
            conn.execute("INSERT INTO drill VALUES (2)")
        again = run("start")
        assert again.returncode == 0 and "retired by a promotion" in again.stderr, again.stderr
        assert "promoted: the primary" in run("status").stdout
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


class ScratchServices:
    """deploy/services.sh in a copy of deploy/ under `root` (its .state is scratch), with `env`."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        shutil.copytree(REPO / "deploy", root / "deploy")
        self.script = str(root / "deploy" / "services.sh")
        self.state = root / ".state"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")} | env

    def run(self, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", self.script, *args], env=env or self.env,
                              capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)

    def secrets(self) -> dict[str, str]:
        return dict(line.split("=", 1)
                    for line in (self.state / "secrets.env").read_text().splitlines()
                    if line and not line.startswith("#"))


@pytest.mark.skipif(os.geteuid() != 0, reason="services.sh runs PostgreSQL and mosquitto as root")
@pytest.mark.usefixtures("processes")
def test_services_sh_keeps_an_existing_clusters_port(tmp_path: Path) -> None:
    """Issue 30: the default PostgreSQL port left the ephemeral range (55432 -> 25432). A
    cluster made before, on another port, keeps it on the next start without the variable (its
    standby, pgBackRest and clients know it by that port): services.sh reads it back from the
    cluster's sds.conf, writes it into secrets.env, and warns while it lies in the range."""
    with socket.socket() as s:  # the kernel's pick: inside the ephemeral range, like 55432
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    services = ScratchServices(tmp_path, {"SDS_MQTT_PORT": str(free_port())})
    try:
        made = services.run("start", env=services.env | {"SDS_PG_PORT": str(port)})
        assert made.returncode == 0, made.stdout + made.stderr
        assert services.run("stop").returncode == 0
        again = services.run("start")  # an upgrade: no SDS_PG_PORT, a new default
        assert again.returncode == 0, again.stdout + again.stderr
        url = services.secrets()["SDS_DATABASE_URL"]
        assert f"@127.0.0.1:{port}/" in url
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT inet_server_port()").fetchone() == (port,)
        assert f"PostgreSQL listens on {port}, inside the kernel's ephemeral port range" in (
            again.stderr)
    finally:
        stopped = services.run("stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="services.sh runs PostgreSQL and mosquitto as root")
@pytest.mark.usefixtures("processes")
def test_services_sh_waits_through_a_failed_first_start(tmp_path: Path) -> None:
    """Issue 30: PostgreSQL's first start fails because another program's outgoing connection
    holds its port (what the kernel does with ports of its ephemeral range); services.sh waits
    through the supervisor's retry instead of giving up at the first death, reports the death,
    and starts once the port is free."""
    port = free_port()
    services = ScratchServices(tmp_path, {"SDS_PG_PORT": str(port),
                                          "SDS_MQTT_PORT": str(free_port())})
    status = services.state / "supervise" / "postgresql.status"
    listener = socket.create_server(("127.0.0.1", 0))
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))  # no SO_REUSEADDR, like a client's connection
    holder.connect(listener.getsockname())
    start = subprocess.Popen(["bash", services.script, "start"], env=services.env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
    try:
        # initdb first, then the first start, which dies on the held port (or services.sh
        # gives up: the assertion below shows why).
        wait_for(lambda: start.poll() is not None
                 or (status.exists() and int(status.read_text().split()[2]) >= 1), 120)
        # An abortive close: no TIME_WAIT left on the port.
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        holder.close()
        out, err = start.communicate(timeout=180)
        assert start.returncode == 0, out + err
        assert "postgresql died at its start" in err and "Address already in use" in err, err
        assert _answers(services.secrets()["SDS_DATABASE_URL"])
    finally:
        holder.close()
        listener.close()
        if start.poll() is None:
            start.kill()
            start.wait()
        stopped = services.run("stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.mark.usefixtures("processes")
def test_the_patroni_profile_keeps_its_port_base(tmp_path: Path) -> None:
    """Issue 30: an existing Patroni cluster keeps the base it was made with (its etcd members
    keep their peer addresses): read back from its haproxy.cfg, or the old default when etcd
    exists without one; a new one gets the new default; the variable wins. (The RabbitMQ
    profile's base was already remembered, in .state/rabbitmq/port-base.)"""
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    patroni = tmp_path / ".state" / "patroni"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}

    def base(**extra: str) -> int:
        out = subprocess.run(["bash", "-c", ". deploy/lib/common.sh; DB=postgres; "
                              ". deploy/lib/pg_patroni.sh; echo $PT_BASE"], cwd=tmp_path,
                             env=env | extra, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    assert base() == 25440  # a new cluster
    (patroni / "etcd1").mkdir(parents=True)
    assert base() == 55440  # made before the move, never as far as HAProxy
    (patroni / "haproxy.cfg").write_text("listen sds_primary\n    bind 127.0.0.1:23000\n")
    assert base() == 23000
    assert base(SDS_PATRONI_PORT_BASE="24000") == 24000


# A process that dies at its first start and runs on the second (a port held for a moment).
FLAKY = ("import os, sys, time\n"
         "if not os.path.exists(sys.argv[1]):\n"
         "    open(sys.argv[1], 'w').close()\n"
         "    sys.exit(3)\n"
         "time.sleep(300)\n")


@pytest.mark.usefixtures("processes")
def test_run_sh_waits_through_a_death_at_start(tmp_path: Path) -> None:
    """Issue 30: after starting its processes, run.sh waits through their supervisors'
    restarts (wait_settled, deploy/run.sh sourced in a scratch copy): a process that dies at
    its first start and runs on the retry is reported and counts as up; one that keeps dying
    is given up after START_DEATHS deaths and named. (The old run.sh looked once, 2 s after
    the starts, and failed on a process caught in its backoff.)"""
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    (tmp_path / ".venv").symlink_to(REPO / ".venv")  # the markers name the venv's programs
    script = f"""
set -euo pipefail
. deploy/run.sh
mkdir -p "$LOGS"
supervise_start simulate "$LOGS/simulate.log" -- "$VENV/bin/python" -c {shlex.quote(FLAKY)} \
    "$STATE/once"
supervise_start aggregate "$LOGS/aggregate.log" -- "$VENV/bin/python" -c 'raise SystemExit(4)'
START_WAIT=120
wait_settled simulate && echo "settled simulate" || echo "unsettled ${{UNSETTLED[*]}}"
wait_settled aggregate && echo "settled aggregate" || echo "unsettled ${{UNSETTLED[*]}}"
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
    try:
        out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
    finally:
        for name in ("simulate", "aggregate"):
            pid = _read(tmp_path / ".state" / "pids" / f"{name}.pid")
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGTERM)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["settled simulate", "unsettled aggregate"], out
    assert "simulate died at its start (1 restart, last exit: exit 3" in out.stderr
    assert "aggregate died at its start (5 restarts, last exit: exit 4" in out.stderr
    assert "5 times: giving up waiting" in out.stderr


@pytest.mark.usefixtures("processes")
def test_the_scripts_derived_ports_stay_within_their_declared_spans(tmp_path: Path) -> None:
    """Issue 30: the ports the deploy scripts compute from a base (the Patroni profile's nodes,
    REST APIs and etcd members; the ingesters' and API instances' metrics, up to 16 shards and
    instances) lie within deploy/lib/ports.sh's declared spans and outside the kernel's
    ephemeral range, as tests/test_ports.py checks the spans themselves."""
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")  # a scratch .state
    script = """
set -euo pipefail
. deploy/run.sh
DB=postgres
. deploy/lib/pg_patroni.sh
INGEST_SHARDS=16 API_METRICS0=$DEFAULT_API_METRICS_PORT
api_layout
echo "edge ${EDGE_BIND##*:} $API_PORT0 $((API_PORT0 + 15))"
for n in ingest ingest-standby ingest-1 ingest-16 ingest-1-standby ingest-16-standby \
    aggregate alerts-evaluate serve-1 serve-16; do echo "metrics $(metrics_port_of "$n")"; done
echo "monitoring $PROM_PORT $AM_PORT $NODE_PORT"
for k in 1 2 3; do
    echo "patroni $(pt_pg_port "$k") $(pt_rest_port "$k")"
    echo "patroni $(pt_etcd_client "$k") $(pt_etcd_peer "$k")"
done
echo "patroni $PT_BASE"
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    ports: dict[str, list[int]] = {}
    for line in out.stdout.splitlines():
        kind, *numbers = line.split()
        ports.setdefault(kind, []).extend(int(n) for n in numbers)
    assert len(ports["metrics"]) == 10 and len(ports["patroni"]) == 13, ports
    assert set(ports["patroni"]) <= set(span("PATRONI")), ports["patroni"]
    inside = sorted({p for found in ports.values() for p in found if in_ephemeral_range(p)})
    assert not inside, (inside, ports)


# ---- the supervisor (deploy/lib/supervise.py) ---------------------------------------------------


def test_restart_delay_doubles_to_its_cap() -> None:
    """Backoff: 0.5 s, doubling per repeated failure, at most 30 s; never gives up."""
    assert [supervise.restart_delay(n) for n in range(1, 10)] == [
        0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert supervise.restart_delay(10_000) == 30.0  # no overflow, still retrying
    with pytest.raises(ValueError):
        supervise.restart_delay(0)


def test_failures_reset_after_a_healthy_run() -> None:
    """A run of STABLE_AFTER seconds or more restarts at the first delay again; a quicker
    death counts one more failure."""
    stable = supervise.STABLE_AFTER
    assert supervise.next_failures(0, 0.1) == 1
    assert supervise.next_failures(5, stable - 0.1) == 6
    assert supervise.next_failures(5, stable) == 1
    assert supervise.restart_delay(supervise.next_failures(6, 3600.0)) == supervise.BASE_DELAY


def test_exit_descriptions_and_codes() -> None:
    killed = signal.SIGKILL.value  # a wait status of a process killed by SIGKILL
    assert supervise.describe_exit(killed) == "killed by SIGKILL"
    assert supervise.exit_code(killed) == -9
    assert supervise.describe_exit(3 << 8) == "exit 3" and supervise.exit_code(3 << 8) == 3
    text = supervise.prom_text("broker", up=False, restarts=2, last_exit=-9, started_at=1.5)
    assert 'sds_supervised_restarts_total{process="broker"} 2' in text
    assert 'sds_supervised_up{process="broker"} 0' in text
    assert 'sds_supervised_last_exit_code{process="broker"} -9' in text


# A child that logs the signals it gets, leaves a grandchild in its process group (like nginx's or
# gunicorn's workers), and ends on SIGINT (the stop signal the test configures) or SIGTERM.
CHILD = """
import os, signal, subprocess, sys, time
log = sys.argv[1]
def note(sig, _f):
    with open(log, "a") as f:
        f.write(signal.Signals(sig).name + "\\n")
    if sig != signal.SIGHUP:
        sys.exit(0)
for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
    signal.signal(s, note)
worker = subprocess.Popen(["sleep", "300"])
with open(log + ".worker", "w") as f:
    f.write(str(worker.pid))
while True:
    time.sleep(1)
"""


class Supervised:
    """supervise.py running CHILD (or `command`) in tmp_path, as deploy/lib/common.sh starts it."""

    def __init__(self, tmp: Path, *options: str, command: list[str] | None = None) -> None:
        self.state, self.log = tmp / "supervise", tmp / "signals.log"
        argv = command or [sys.executable, "-c", CHILD, str(self.log)]
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "deploy" / "lib" / "supervise.py"), "--name", "t",
             "--state", str(self.state), *options, "--", *argv],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def status(self) -> tuple[str, int, int]:
        try:
            state, child, restarts, _ = (
                (self.state / "t.status").read_text().split("\t")[0].split())
        except (OSError, ValueError):
            return ("", 0, 0)
        return state, int(child), int(restarts)

    def worker(self) -> int:
        return int(wait_for(lambda: _read(Path(f"{self.log}.worker")), WAIT))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(WAIT + 5)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = _read(Path(f"/proc/{pid}/stat"))
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(cond, timeout: float = WAIT):  # type: ignore[no-untyped-def]
    """Poll `cond` until truthy (returned); fail after `timeout` s."""
    deadline = dt.datetime.now() + dt.timedelta(seconds=timeout)
    while dt.datetime.now() < deadline:
        if value := cond():
            return value
        threading.Event().wait(0.05)
    raise AssertionError(f"timed out waiting for {cond}")


@pytest.mark.usefixtures("processes")
def test_supervisor_restarts_a_killed_process_and_shows_it(tmp_path: Path) -> None:
    """SIGKILL of the child: restarted with a new pid after the first backoff step, its
    process group's leftovers killed, the restart counted in the status and metrics files and
    logged; SIGHUP is passed on; SIGTERM stops it as --stop-signal (SIGINT) and ends supervision."""
    sup = Supervised(tmp_path, "--stop-signal", "INT")
    try:
        _, first, _ = wait_for(lambda: (s := sup.status())[0] == "running" and s)
        worker = sup.worker()
        Path(f"{sup.log}.worker").unlink()
        os.kill(first, signal.SIGKILL)
        state, second, restarts = wait_for(
            lambda: (s := sup.status())[0] == "running" and s[1] != first and s, 5)
        assert restarts == 1 and second != first
        wait_for(lambda: not _alive(worker), 5)  # the old group's worker did not outlive it
        prom = (sup.state / "t.prom").read_text()
        assert 'sds_supervised_restarts_total{process="t"} 1' in prom
        assert 'sds_supervised_last_exit_code{process="t"} -9' in prom
        assert "1 restart, last exit: killed by SIGKILL" in (sup.state / "t.status").read_text()
        assert "died after" in (sup.state / "supervise.log").read_text()
        sup.worker()  # the new child is up and has its own worker
        sup.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "HUP" in _read(sup.log))
        assert sup.stop() == 0
        assert _read(sup.log).split() == ["SIGHUP", "SIGINT"]  # SIGTERM arrived as SIGINT
        assert sup.status()[0] == "stopped" and not _alive(second)
    finally:
        sup.stop()


@pytest.mark.usefixtures("processes")
def test_supervisor_kills_a_child_that_ignores_the_stop_signal(tmp_path: Path) -> None:
    sup = Supervised(tmp_path, "--stop-timeout", "1",
                     command=["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
    try:
        _, child, _ = wait_for(lambda: (s := sup.status())[0] == "running" and s)
        started = dt.datetime.now()
        assert sup.stop() == 0
        assert (dt.datetime.now() - started).total_seconds() < 5
        assert not _alive(child)
    finally:
        sup.stop()


@pytest.mark.usefixtures("processes")
def test_supervisor_does_not_start_while_the_unless_file_exists(tmp_path: Path) -> None:
    """A PostgreSQL retired by a promotion (services.sh writes RETIRED) is never restarted."""
    retired = tmp_path / "RETIRED"
    retired.write_text("retired\n")
    sup = Supervised(tmp_path, "--unless", str(retired))
    try:
        assert wait_for(lambda: sup.status()[0] == "refused")
        assert not sup.log.exists() and sup.status()[1] == 0
        assert sup.stop() == 0  # a stop is prompt during the wait too
    finally:
        sup.stop()


@pytest.mark.usefixtures("processes")
def test_a_killed_supervisor_takes_its_child_along(tmp_path: Path) -> None:
    """SIGKILL of the supervisor itself: the child gets the stop signal (parent-death signal),
    so no unsupervised copy is left to collide with the next run.sh."""
    sup = Supervised(tmp_path, "--stop-signal", "INT")
    _, child, _ = wait_for(lambda: (s := sup.status())[0] == "running" and s)
    worker = sup.worker()
    try:
        sup.proc.kill()
        sup.proc.wait(WAIT)
        wait_for(lambda: "SIGINT" in _read(sup.log))
        wait_for(lambda: not _alive(child))
    finally:
        # Nobody is left to clean the child's group up (a real master stops its own workers).
        for pid in (worker, child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# A stop of a process its parent reaps at once (so /proc/PID/stat vanishes as it is polled), a
# check of a missing pid file, and the line after them, under the scripts' own `set -euo
# pipefail`.
VANISHING = """set -euo pipefail
SDS_SCRIPT=t
. deploy/lib/common.sh
sleep 300 &
echo $! >"$DIR/t.pid"
stop_pidfile "$DIR/t.pid" "sleep 300" 10 || true
pid_alive "$DIR/t.pid" sleep || echo stopped
pid_alive "$DIR/gone.pid" x || echo "no pid file"
printf %s "$$" >"$DIR/bare.pid"  # no newline, as RabbitMQ writes its beam.pid
pid_alive "$DIR/bare.pid" bash && echo "read without a newline"
echo "end reached"
"""
# `$(<FILE)` of a file that can vanish: /proc/..., a pid file.
_VANISHING_READ = re.compile(r'\$\(<\s*"?[^")]*(/proc/|\.pid\b|_PID\b|pidfile)')


@pytest.mark.usefixtures("processes")
def test_a_file_that_vanishes_never_ends_a_script(tmp_path: Path) -> None:
    """`services.sh stop` failed (status 1, no message) 2 runs in 5 on the RabbitMQ profile, in
    CI too: stop_pidfile polled the stopped node with `stat=$(</proc/PID/stat)`, and once the
    process was reaped, bash 5.2 under `set -e` ended the whole script at that line despite its
    `|| return 1`. Files that may vanish are read with read_line (deploy/lib/common.sh); this
    script died at the stop before."""
    out = subprocess.run(["bash", "-c", VANISHING], cwd=REPO, env={**os.environ,
                         "DIR": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split("\n") == ["stopped", "no pid file", "read without a newline",
                                      "end reached", ""], out.stdout + out.stderr
    scripts = sorted((REPO / "deploy").rglob("*.sh"))
    found = [f"{path.relative_to(REPO)}:{n}" for path in scripts
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if _VANISHING_READ.search(line) and not line.lstrip().startswith("#")]
    assert len(scripts) > 10 and found == [], found
