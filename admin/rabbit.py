"""The RabbitMQ cluster profile's broker accounts and node settings (docs/operations.md); pure.

Accounts are kept as a RabbitMQ definitions document (JSON: vhost, users with salted SHA-256
password hashes, permissions, topic permissions). `sds device register --rabbitmq-definitions`
merges a device into that file and `deploy/services.sh reload-broker` imports it into the
running cluster (`rabbitmqctl import_definitions`), the way the mosquitto profile writes its
password file and reloads the broker. The file holds hashes only, never a password.

What the permissions grant is the shipped mosquitto ACL (deploy/mosquitto/acl), in RabbitMQ's
terms. The MQTT plugin publishes to the topic exchange `amq.topic` of the vhost `sds`, with the
topic's `/` turned into `.`, and keeps each MQTT session's subscriptions in a queue named
`mqtt-subscription-<client id>qos<0|1>`. RabbitMQ 3.10 leaves a `.` inside a topic level as it
is, so it would split the level in two (`sensors/D.1/readings` becomes the routing key
`sensors.D.1.readings`, which `sensors/+/readings` does not match): device names with a `.`
are refused in this profile.

- a device (user = device name) may publish only under `sensors/<its name>/` (topic write
  permission on `amq.topic`), may read nothing, and may configure only the queues named after
  its own client id; so it cannot consume, unbind or delete the ingester's queue even if it
  connects with the ingester's client id;
- the ingester may read `sensors/#` and use the queues of its own client id (and of its
  numbered shards, `<client id>-<n>`), and may publish nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from pathlib import Path
from typing import Any

VHOST = "sds"
BOOT_ADMIN = "sds-admin-disabled"  # deploy/rabbitmq/rabbitmq.conf's default_user
EXCHANGE = "amq.topic"
HASHING = "rabbit_password_hashing_sha256"
NOTHING = "^$"


def password_hash(password: str, salt: bytes | None = None) -> str:
    """RabbitMQ's stored form of a password: base64(salt + sha256(salt + utf8 password)),
    with a 4-byte random salt (rabbit_password_hashing_sha256)."""
    salt = secrets.token_bytes(4) if salt is None else salt
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def check_name(name: str, what: str = "device name") -> None:
    """ValueError for a name the MQTT plugin cannot carry as one topic level (a `.`)."""
    if "." in name:
        raise ValueError(f"{what} {name!r} contains '.': RabbitMQ 3.10's MQTT plugin turns it "
                         "into a topic level separator, so the cluster profile cannot carry it")


PUBLISH_TEST_SUFFIX = "-publish-test"  # `sds device publish-test` connects as <device><this>


def queue_pattern(client_id: str, *, shards: bool = False) -> str:
    """Regex (unanchored body) of the queue names the MQTT plugin uses for `client_id`'s
    session, and for `<client_id>-publish-test`'s; with shards, also `<client_id>-<n>`'s."""
    suffix = "(-[0-9]+)?" if shards else f"({re.escape(PUBLISH_TEST_SUFFIX)})?"
    return f"mqtt-subscription-{re.escape(client_id)}{suffix}qos[01]"


def empty_definitions() -> dict[str, Any]:
    """A definitions document holding the service vhost and nothing else."""
    return {"vhosts": [{"name": VHOST}], "users": [], "permissions": [],
            "topic_permissions": []}


def _put(defs: dict[str, Any], key: str, entry: dict[str, Any], match: tuple[str, ...]) -> None:
    rows = [r for r in defs.setdefault(key, [])
            if any(r.get(k) != entry.get(k) for k in match)]
    rows.append(entry)
    defs[key] = rows


def add_user(defs: dict[str, Any], name: str, password: str, *, configure: str, write: str,
             read: str, topic_write: str, topic_read: str) -> None:
    """Add or replace one user with its vhost and topic permissions."""
    _put(defs, "users", {"name": name, "password_hash": password_hash(password),
                         "hashing_algorithm": HASHING, "tags": []}, ("name",))
    _put(defs, "permissions", {"user": name, "vhost": VHOST, "configure": configure,
                               "write": write, "read": read}, ("user", "vhost"))
    _put(defs, "topic_permissions", {"user": name, "vhost": VHOST, "exchange": EXCHANGE,
                                     "write": topic_write, "read": topic_read},
         ("user", "vhost", "exchange"))


def add_device(defs: dict[str, Any], name: str, password: str, *,
               prefix: str = "sensors") -> None:
    """A device account: publish under `{prefix}/{name}/` only (mosquitto's
    `pattern write sensors/%u/#`), read nothing, configure only its own session queues.
    ValueError for a name with a `.` (see the module docstring)."""
    check_name(name)
    check_name(prefix, "topic prefix")
    own = queue_pattern(name)
    topic = re.escape(prefix) + r"\." + re.escape(name)
    add_user(defs, name, password,
             configure=f"^{own}$",
             # Publishing needs write on the exchange; a subscription (which the ACL then
             # refuses anyway) would need write on its own queue.
             write=f"^({re.escape(EXCHANGE)}|{own})$",
             read=f"^{own}$",
             topic_write=f"^{topic}(\\..*)?$",
             topic_read=NOTHING)


def add_ingester(defs: dict[str, Any], name: str, password: str, *, client_id: str,
                 prefix: str = "sensors") -> None:
    """The ingester's account: read `{prefix}/#` through the queues of its own client id (and
    its shards'), publish nothing."""
    own = queue_pattern(client_id, shards=True)
    exchange = re.escape(EXCHANGE)
    add_user(defs, name, password,
             configure=f"^{own}$",
             write=f"^{own}$",  # binding its queue to the exchange
             read=f"^({exchange}|{own})$",
             topic_write=NOTHING,
             topic_read=f"^{re.escape(prefix)}(\\..*)?$")


def remove_user(defs: dict[str, Any], name: str) -> bool:
    """Drop a user and its permissions from the document; whether it was there. (An import
    adds and updates only: deploy/rabbitmq.sh reload also deletes the cluster's users that the
    file no longer has.)"""
    before = len(defs.get("users", []))
    for key in ("users", "permissions", "topic_permissions"):
        field = "name" if key == "users" else "user"
        defs[key] = [r for r in defs.get(key, []) if r.get(field) != name]
    return len(defs["users"]) != before


def stale_users(defs: dict[str, Any], cluster_users: list[dict[str, Any]]) -> list[str]:
    """Users the cluster has (`rabbitmqctl list_users --formatter json`) that the document no
    longer lists (retired devices), except the boot-time admin."""
    wanted = {u.get("name") for u in defs.get("users", [])} | {BOOT_ADMIN}
    return sorted(str(u["user"]) for u in cluster_users if u.get("user") not in wanted)


_INGESTER_ACCOUNT = re.compile(r"^ingester(-[0-9]+)?$")  # shared/places.py reserves these


def rotated_users(defs: dict[str, Any], cluster_defs: dict[str, Any]) -> list[str]:
    """Device accounts whose password the document changes (`sds device rotate-password`):
    users of the cluster's exported definitions whose stored hash differs from the document's.
    Their open connections must be closed after the import, or a stolen credential's
    connection would outlive the rotation (issue 20). The ingester's accounts are left out:
    deploy/services.sh re-salts their hash on every start, and it reconnects by itself."""
    wanted = {u.get("name"): u.get("password_hash") for u in defs.get("users", [])}
    return sorted(
        str(u["name"]) for u in cluster_defs.get("users", [])
        if u.get("name") in wanted and wanted[u.get("name")] != u.get("password_hash")
        and not _INGESTER_ACCOUNT.match(str(u.get("name"))) and u.get("name") != BOOT_ADMIN)


def close_connections_expr(connections: list[dict[str, Any]], users: set[str]) -> str | None:
    """The `rabbitmqctl eval` expression that ends the MQTT connections of `users` (None when
    they have none). `connections` is `rabbitmqctl list_mqtt_connections user client_id
    --formatter json`. RabbitMQ 3.10 has no command for this: `close_all_user_connections` does
    not reach MQTT connections (measured), so the expression ends the MQTT plugin's reader of
    each of their client ids (the socket closes with it). A client id is chosen by the client,
    so each is written as its list of UTF-8 byte values: nothing in it can change the
    expression."""
    ids = sorted({str(c["client_id"]) for c in connections if c.get("user") in users})
    if not ids:
        return None
    literals = ",".join("[" + ",".join(str(b) for b in cid.encode()) + "]" for cid in ids)
    return (f"[exit(P, kill) || {{C, P}} <- rabbit_mqtt_collector:list(), "
            f"lists:member(C, [{literals}])].")


def load(path: Path) -> dict[str, Any]:
    """The definitions file at `path`, or an empty document if there is none yet."""
    if not path.exists():
        return empty_definitions()
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a RabbitMQ definitions document")
    return doc


def save(path: Path, defs: dict[str, Any]) -> None:
    """Write the document; a new file is created private (it holds password hashes)."""
    if not path.exists():
        path.touch(mode=0o600)
    # Rewritten in place: owner and mode (set by deploy/services.sh) stay.
    path.write_text(json.dumps(defs, indent=1, sort_keys=True) + "\n")


# ---- node settings (shared by deploy/services.sh and the test cluster) ---------------------------

# Lean Erlang VM for a shared two-core machine: one scheduler thread, no busy-waiting schedulers,
# a small async pool; distribution listens on loopback only.
ERL_ARGS = ("+S 1:1 +SDcpu 1:1 +SDio 2 +A 4 +sbwt none +sbwtdcpu none +sbwtdio none "
            "-kernel inet_dist_use_interface {127,0,0,1}")


def render_node_conf(template: str, *, amqp_port: int, mqtt_port: int, peers: list[str],
                     bind: str = "127.0.0.1") -> str:
    """deploy/rabbitmq/rabbitmq.conf with one node's ports and the cluster's member list."""
    peer_lines = "\n".join(f"cluster_formation.classic_config.nodes.{i} = {name}"
                           for i, name in enumerate(peers, 1))
    return (template.replace("@BIND@", bind).replace("@AMQP_PORT@", str(amqp_port))
            .replace("@MQTT_PORT@", str(mqtt_port)).replace("@PEERS@", peer_lines)
            # The boot-time admin user gets a random password nobody keeps (and may log in from
            # loopback only): accounts come from the definitions file.
            .replace("@DEFAULT_PASS@", secrets.token_urlsafe(24)))


def node_env(*, name: str, node_dir: Path, dist_port: int, amqp_port: int,
             epmd_port: int, ctl_ports: tuple[int, int] | None = None) -> dict[str, str]:
    """The RABBITMQ_* / ERL_* environment that gives a node its own name, ports and files
    (nothing of the system node's /etc/rabbitmq, /var/lib/rabbitmq or default ports);
    `ctl_ports`: the range the CLI tools listen in (RabbitMQ's default 35672-35682 lies in
    the kernel's ephemeral port range)."""
    ctl = {} if ctl_ports is None else {"RABBITMQ_CTL_DIST_PORT_MIN": str(ctl_ports[0]),
                                        "RABBITMQ_CTL_DIST_PORT_MAX": str(ctl_ports[1])}
    return {
        **ctl,
        "RABBITMQ_NODENAME": name,
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(amqp_port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_CONFIG_FILE": str(node_dir / "rabbitmq.conf"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(node_dir / "advanced.config"),
        "RABBITMQ_CONF_ENV_FILE": str(node_dir / "rabbitmq-env.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(node_dir / "enabled_plugins"),
        "RABBITMQ_MNESIA_BASE": str(node_dir / "mnesia"),
        "RABBITMQ_LOG_BASE": str(node_dir / "log"),
        "RABBITMQ_PID_FILE": str(node_dir / "beam.pid"),
        "RABBITMQ_IO_THREAD_POOL_SIZE": "4",
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": ERL_ARGS,
        "ERL_EPMD_PORT": str(epmd_port),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
    }


# ---- the deployed cluster (deploy/rabbitmq.sh) ---------------------------------------------------

def deploy_ports(base: int, index: int) -> dict[str, int]:
    """Node `index`'s ports in a deployed cluster: AMQP base+10i+2, MQTT base+10i+3,
    distribution base+10i+5 (default base 21800, deploy/lib/ports.sh: none of RabbitMQ's or
    mosquitto's defaults, below the kernel's ephemeral port range)."""
    return {"amqp": base + 10 * index + 2, "mqtt": base + 10 * index + 3,
            "dist": base + 10 * index + 5}


def deploy_epmd_port(base: int) -> int:
    """The cluster's own epmd port (not the shared default 4369)."""
    return base + 69


def deploy_ctl_ports(base: int) -> tuple[int, int]:
    """The range the CLI tools (rabbitmqctl...) listen in while they talk to the nodes."""
    return base + 70, base + 80


def deploy_node_name(index: int) -> str:
    return f"sds-{index}@localhost"
