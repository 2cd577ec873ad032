"""deploy/services.sh with SDS_BROKER=rabbitmq-cluster, end to end in a scratch copy of deploy/
(one node, to keep it short; the node count is a loop in deploy/rabbitmq.sh): start, accounts,
reload with a retired device, idempotent restart, stop."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from click.testing import CliRunner

from admin import migrate, rabbit
from admin.cli import main
from testbed.process import REPO, free_port, port_open

pytestmark = [
    pytest.mark.chaos,  # a broker node boot: the full run only
    pytest.mark.skipif(os.geteuid() != 0, reason="the nodes run as user rabbitmq"),
]


def _free_base() -> int:
    """A port base whose node-0 ports and epmd port are free, below the kernel's ephemeral
    range (an outgoing connection can hold a port inside it: node 0 failed to start with its
    AMQP port 46802 taken while nothing listened there, issue 30)."""
    for _ in range(50):
        base = random.randrange(22000, 32600, 100)
        if not any(port_open(p) for p in (*rabbit.deploy_ports(base, 0).values(),
                                           rabbit.deploy_epmd_port(base))):
            return base
    raise AssertionError("no free port base")


def _connect_rc(port: int, user: str, password: str, client_id: str) -> int:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                    protocol=mqtt.MQTTv311)
    c.username_pw_set(user, password)
    codes: list[int] = []
    answered = threading.Event()

    def on_connect(_c: Any, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        codes.append(int(rc.value))
        answered.set()

    c.on_connect = on_connect
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        answered.wait(10)  # the CONNACK
        return codes[0] if codes else -1
    finally:
        c.disconnect()
        c.loop_stop()


def test_services_sh_runs_the_cluster_profile(tmp_path: Path) -> None:
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    base = _free_base()
    env = {**os.environ, "SDS_PG_PORT": str(free_port()), "SDS_BROKER": "rabbitmq-cluster",
           "SDS_RABBITMQ_NODES": "1", "SDS_RABBITMQ_PORT_BASE": str(base)}
    script = str(tmp_path / "deploy" / "services.sh")

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", script, *args], env={**env, **extra},
                              capture_output=True, text=True, timeout=240,
                              stdin=subprocess.DEVNULL)

    state = tmp_path / ".state"
    try:
        first = run("start")
        assert first.returncode == 0, first.stdout + first.stderr
        secrets = dict(line.split("=", 1)
                       for line in (state / "secrets.env").read_text().splitlines()
                       if line and not line.startswith("#"))
        mqtt_port = rabbit.deploy_ports(base, 0)["mqtt"]
        assert secrets["SDS_MQTT_PROTOCOL"] == "3.1.1"
        assert secrets["SDS_MQTT_PORT"] == str(mqtt_port)
        assert (state / "broker-profile").read_text().strip() == "rabbitmq-cluster"
        assert (state / "rabbitmq" / "home" / ".erlang.cookie").stat().st_mode & 0o077 == 0
        assert _connect_rc(mqtt_port, "ingester", secrets["SDS_MQTT_PASSWORD"], "ingester") == 0
        assert _connect_rc(mqtt_port, "ingester", "wrong", "ingester") != 0

        # A device through the provisioning path: the definitions file, then reload-broker.
        defs = state / "rabbitmq" / "definitions.json"
        runner = CliRunner()
        cli_env = {"SDS_DATABASE_URL": secrets["SDS_DATABASE_URL"]}
        migrate.upgrade(secrets["SDS_DATABASE_URL"])
        assert runner.invoke(main, ["org", "create", "Dep"], env=cli_env).exit_code == 0
        r = runner.invoke(main, ["device", "register", "Q1", "--org", "Dep",
                                 "--rabbitmq-definitions", str(defs)], env=cli_env)
        assert r.exit_code == 0, r.output
        password = r.output.split("password ")[1].split()[0]
        reload = run("reload-broker", SDS_BROKER="")  # the remembered profile
        assert reload.returncode == 0, reload.stdout + reload.stderr
        assert _connect_rc(mqtt_port, "Q1", password, "Q1") == 0
        r = runner.invoke(main, ["device", "retire", "Q1", "--at", "now",
                                 "--rabbitmq-definitions", str(defs)], env=cli_env)
        assert r.exit_code == 0, r.output
        reload = run("reload-broker")
        assert "deleted user Q1" in reload.stdout, reload.stdout + reload.stderr
        assert _connect_rc(mqtt_port, "Q1", password, "Q1") != 0

        second = run("start")
        assert second.returncode == 0, second.stdout + second.stderr
        assert "already running" in second.stdout
        assert run("status").returncode == 0
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert run("status").returncode == 3
    assert not port_open(rabbit.deploy_ports(base, 0)["mqtt"])
    assert not port_open(rabbit.deploy_epmd_port(base))
