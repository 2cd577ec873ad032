"""RabbitMQ cluster profile accounts and node settings (admin/rabbit.py) and broker endpoints
(shared/brokers.py), without a broker: the permissions must grant exactly what the mosquitto
ACL grants. Python's `re` stands in for RabbitMQ's PCRE here (the patterns use only what both
read alike); tests/cluster checks the same rules on a real cluster."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from pathlib import Path

import paho.mqtt.client as mqtt
import psycopg
import pytest
from click.testing import CliRunner, Result

from admin import rabbit
from admin.cli import main
from ingest.metrics import Metrics
from ingest.mqtt import MqttLink
from shared import brokers
from shared.config import Settings

REPO = Path(__file__).resolve().parents[2]


def _routing_key(topic: str) -> str:
    """What RabbitMQ 3.10's MQTT plugin makes of an MQTT topic: `/` -> `.` (a `.` stays)."""
    return topic.replace("/", ".")


def _full(pattern: str, value: str) -> bool:
    return re.search(pattern, value) is not None


def test_password_hash_is_rabbits_salted_sha256() -> None:
    stored = rabbit.password_hash("s3cret", salt=b"\x01\x02\x03\x04")
    raw = base64.b64decode(stored)
    assert raw[:4] == b"\x01\x02\x03\x04"
    assert raw[4:] == hashlib.sha256(b"\x01\x02\x03\x04" + b"s3cret").digest()
    assert rabbit.password_hash("s3cret") != rabbit.password_hash("s3cret")  # random salt


@pytest.mark.parametrize(("topic", "allowed"), [
    ("sensors/A1/readings", True),
    ("sensors/A1/health", True),
    ("sensors/A1", True),                  # '#' matches the parent level too
    ("sensors/A1/x/y", True),
    ("sensors/A12/readings", False),       # not a prefix match of the name
    ("sensors/XA1/readings", False),
    ("other/A1/readings", False),
    ("sensors/B1/readings", False),
    ("sensors/+/readings", False),
])
def test_device_topic_write_is_the_mosquitto_pattern(topic: str, allowed: bool) -> None:
    defs = rabbit.empty_definitions()
    rabbit.add_device(defs, "A1", "pw")
    (perm,) = defs["topic_permissions"]
    assert perm["exchange"] == "amq.topic" and perm["read"] == rabbit.NOTHING
    assert _full(perm["write"], _routing_key(topic)) is allowed


def test_names_with_a_dot_are_refused() -> None:
    """RabbitMQ 3.10 would make `sensors/A.1/readings` four routing-key words."""
    with pytest.raises(ValueError, match="contains '.'"):
        rabbit.add_device(rabbit.empty_definitions(), "A.1", "pw")


def test_device_queues_are_its_own_only() -> None:
    defs = rabbit.empty_definitions()
    rabbit.add_device(defs, "A-1", "pw")
    (perm,) = defs["permissions"]
    assert _full(perm["configure"], "mqtt-subscription-A-1qos1")
    assert _full(perm["configure"], "mqtt-subscription-A-1qos0")
    assert _full(perm["configure"], "mqtt-subscription-A-1-publish-testqos1")
    for other in ("mqtt-subscription-A-12qos1", "mqtt-subscription-sds-ingesterqos1",
                  "mqtt-subscription-A-1qos1x", "mqtt-subscription-A-1-2qos1"):
        assert not _full(perm["configure"], other)
        assert not _full(perm["read"], other)
    assert not _full(perm["read"], "amq.topic")  # a device consumes nothing


def test_ingester_reads_sensors_and_its_own_queues() -> None:
    defs = rabbit.empty_definitions()
    rabbit.add_ingester(defs, "ingester", "pw", client_id="sds-ingester")
    (perm,) = defs["permissions"]
    (topic,) = defs["topic_permissions"]
    for name in ("mqtt-subscription-sds-ingesterqos1", "mqtt-subscription-sds-ingester-3qos1"):
        assert _full(perm["configure"], name) and _full(perm["read"], name)
    assert not _full(perm["configure"], "mqtt-subscription-A1qos1")
    assert _full(topic["read"], _routing_key("sensors/A1/readings"))
    assert not _full(topic["read"], _routing_key("other/A1/readings"))
    assert topic["write"] == rabbit.NOTHING


def test_adding_again_replaces_the_account() -> None:
    defs = rabbit.empty_definitions()
    rabbit.add_device(defs, "A1", "one")
    rabbit.add_device(defs, "A2", "two")
    rabbit.add_device(defs, "A1", "three")
    assert sorted(u["name"] for u in defs["users"]) == ["A1", "A2"]
    assert len(defs["permissions"]) == len(defs["topic_permissions"]) == 2


def test_node_conf_renders_every_placeholder() -> None:
    template = (REPO / "deploy" / "rabbitmq" / "rabbitmq.conf").read_text()
    conf = rabbit.render_node_conf(template, amqp_port=41001, mqtt_port=41002,
                                   peers=["a@localhost", "b@localhost"])
    assert "@" not in conf.replace("a@localhost", "").replace("b@localhost", "")
    assert "mqtt.listeners.tcp.default = 127.0.0.1:41002" in conf
    assert "cluster_formation.classic_config.nodes.2 = b@localhost" in conf
    assert "mqtt.durable_queue_type = quorum" in conf


def test_device_register_writes_definitions(tmp_path: Path, database_url: str) -> None:
    runner = CliRunner()
    env = {"SDS_DATABASE_URL": database_url}
    assert runner.invoke(main, ["org", "create", "Acme"], env=env).exit_code == 0
    defs_path = tmp_path / "definitions.json"
    r = runner.invoke(main, ["device", "register", "A-7", "--org", "Acme",
                             "--rabbitmq-definitions", str(defs_path)], env=env)
    assert r.exit_code == 0, r.output
    password = r.output.split("password ")[1].split()[0]
    text = defs_path.read_text()
    assert password not in text
    assert defs_path.stat().st_mode & 0o077 == 0
    defs = json.loads(text)
    (user,) = defs["users"]
    salt = base64.b64decode(user["password_hash"])[:4]
    assert user["password_hash"] == rabbit.password_hash(password, salt=salt)
    assert defs["vhosts"] == [{"name": "sds"}]
    # A name the cluster profile cannot carry is refused before anything is stored.
    r = runner.invoke(main, ["device", "register", "A.8", "--org", "Acme",
                             "--rabbitmq-definitions", str(defs_path)], env=env)
    assert r.exit_code != 0 and "contains '.'" in r.output
    with psycopg.connect(database_url) as c:
        assert c.execute("SELECT count(*) FROM devices WHERE name = 'A.8'").fetchone() == (0,)


def test_endpoints_and_protocol() -> None:
    s = Settings(mqtt_host="h0", mqtt_port=1, mqtt_failover=" h1:2 ,[::1]:3,")
    assert brokers.endpoints(s) == [("h0", 1), ("h1", 2), ("::1", 3)]
    assert brokers.protocol(Settings(mqtt_protocol="3.1.1")) == mqtt.MQTTv311
    with pytest.raises(ValueError, match="SDS_MQTT_PROTOCOL"):
        brokers.protocol(Settings(mqtt_protocol="4"))
    with pytest.raises(ValueError, match="SDS_MQTT_FAILOVER"):
        brokers.endpoints(Settings(mqtt_failover="nohost"))


def test_rotation_moves_to_the_next_node_on_each_attempt() -> None:
    s = Settings(mqtt_host="h0", mqtt_port=1, mqtt_failover="h1:2", mqtt_protocol="3.1.1")
    client = brokers.new_client(s, "x", persistent=True)
    rotation = brokers.Rotation(s)
    seen = [rotation.advance(client) for _ in range(3)]
    assert seen == [("h0", 1), ("h1", 2), ("h0", 1)]
    assert (client.host, client.port) == ("h0", 1)


def test_device_lifecycle_keeps_the_definitions(tmp_path: Path, database_url: str) -> None:
    """add writes the account, rotate-password replaces its hash, retire removes it; add or
    rotate without any account file is a usage error that changes nothing."""
    runner = CliRunner()
    env = {"SDS_DATABASE_URL": database_url}

    def sds(*args: str) -> Result:
        return runner.invoke(main, list(args), env=env)

    assert sds("org", "create", "Acme").exit_code == 0
    assert sds("location", "create", "--org", "Acme", "--name", "Field",
               "--tz", "UTC").exit_code == 0
    defs_path = tmp_path / "definitions.json"
    start = "2024-07-01T00:00:00Z"
    r = sds("device", "add", "B-1", "--org", "Acme", "--location", "Field", "--from", start)
    assert r.exit_code == 2 and "--rabbitmq-definitions" in r.output
    r = sds("device", "add", "B-1", "--org", "Acme", "--location", "Field", "--from", start,
            "--rabbitmq-definitions", str(defs_path))
    assert r.exit_code == 0, r.output
    assert "deploy/services.sh reload-broker" in r.output
    first = json.loads(defs_path.read_text())["users"][0]["password_hash"]
    r = sds("device", "rotate-password", "B-1", "--rabbitmq-definitions", str(defs_path))
    assert r.exit_code == 0, r.output
    password = r.output.split("password ")[1].split()[0]
    (user,) = json.loads(defs_path.read_text())["users"]
    assert user["password_hash"] != first
    salt = base64.b64decode(user["password_hash"])[:4]
    assert user["password_hash"] == rabbit.password_hash(password, salt=salt)
    r = sds("device", "retire", "B-1", "--at", "now", "--rabbitmq-definitions", str(defs_path))
    assert r.exit_code == 0, r.output
    defs = json.loads(defs_path.read_text())
    assert defs["users"] == defs["permissions"] == defs["topic_permissions"] == []


def test_stale_users_are_those_the_file_dropped(tmp_path: Path) -> None:
    """deploy/rabbitmq.sh reload deletes these from the cluster (an import never deletes)."""
    defs = rabbit.empty_definitions()
    rabbit.add_device(defs, "A1", "pw")
    rabbit.save(tmp_path / "defs.json", defs)
    (tmp_path / "users.json").write_text(json.dumps(
        [{"user": "A1", "tags": []}, {"user": "A2", "tags": []},
         {"user": rabbit.BOOT_ADMIN, "tags": ["administrator"]}]))
    out = CliRunner().invoke(main, ["rabbit", "stale-users", str(tmp_path / "defs.json"),
                                    str(tmp_path / "users.json")], catch_exceptions=False)
    assert (out.exit_code, out.output) == (0, "A2\n")


def test_shards_need_mqtt5() -> None:
    """Shards share the stream through `$share` (MQTT 5 only): the 3.1.1 mode refuses them."""
    with pytest.raises(ValueError, match="SDS_INGEST_SHARDS"):
        MqttLink(Settings(mqtt_protocol="3.1.1", ingest_shards=2, ingest_shard=1), Metrics(),
                 on_message=lambda *_a: None, may_connect=lambda: None,
                 stopping=threading.Event())
    link = MqttLink(Settings(mqtt_protocol="3.1.1"), Metrics(), on_message=lambda *_a: None,
                    may_connect=lambda: None, stopping=threading.Event())
    assert link.client.protocol == mqtt.MQTTv311


def test_rotated_users_are_devices_whose_hash_the_file_changes() -> None:
    cluster = rabbit.empty_definitions()
    for name in ("C1", "C2", "C3"):
        rabbit.add_device(cluster, name, f"{name}-old")
    rabbit.add_ingester(cluster, "ingester", "pw", client_id="ingester")
    rabbit.add_ingester(cluster, "ingester-2", "pw", client_id="ingester-2")
    doc = json.loads(json.dumps(cluster))
    rabbit.add_device(doc, "C2", "C2-new")  # rotated
    rabbit.add_ingester(doc, "ingester", "pw", client_id="ingester")  # re-salted at each start
    rabbit.add_ingester(doc, "ingester-2", "pw", client_id="ingester-2")
    rabbit.remove_user(doc, "C3")  # retired: stale_users' business
    assert rabbit.rotated_users(doc, cluster) == ["C2"]
    assert rabbit.rotated_users(cluster, cluster) == []


def test_close_expression_quotes_nothing_a_client_chose() -> None:
    conns = [{"user": "C2", "client_id": "C2"}, {"user": "C2", "client_id": 'x"]),halt().%'},
             {"user": "C1", "client_id": "C1"}]
    expr = rabbit.close_connections_expr(conns, {"C2"})
    assert expr is not None
    ids = [bytes(int(b) for b in lit.split(",")).decode()
           for lit in re.findall(r"\[([0-9,]+)\]", expr)]
    assert ids == ["C2", 'x"]),halt().%']  # sorted; C1 left alone
    assert '"' not in expr and "halt" not in expr
    assert expr.startswith("[exit(P, kill) || {C, P} <- rabbit_mqtt_collector:list(),")
    assert rabbit.close_connections_expr(conns, {"C9"}) is None


def test_sds_rabbit_node_writes_the_files_and_prints_the_environment(tmp_path: Path) -> None:
    """deploy/rabbitmq.sh reads a node's environment from `sds rabbit node` (issue 31: once
    `python -m admin.rabbit`)."""
    out = CliRunner().invoke(main, ["rabbit", "node", str(tmp_path), "1", "3", "25000"],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    env = dict(line.split("=", 1) for line in out.output.splitlines())
    assert env["SDS_NODE_MQTT_PORT"] == str(rabbit.deploy_ports(25000, 1)["mqtt"])
    assert env["RABBITMQ_NODENAME"] == rabbit.deploy_node_name(1)
    conf = (tmp_path / "node1" / "rabbitmq.conf").read_text()
    assert f"mqtt.listeners.tcp.default = 127.0.0.1:{env['SDS_NODE_MQTT_PORT']}" in conf


def test_deploy_scripts_call_sds_not_admin_modules() -> None:
    """The operator's scripts reach the operator room through `sds` only."""
    root = Path(__file__).resolve().parents[2]
    callers = [str(p.relative_to(root)) for p in sorted((root / "deploy").rglob("*.sh"))
               if re.search(r"-m admin\b", p.read_text())]
    assert callers == []
