"""`sds rabbit node|accounts|stale-users|rotated-users|close-expr`: the RabbitMQ cluster
profile's files and checks for deploy/rabbitmq.sh (the rules are admin/rabbit.py; before issue
31 this was `python -m admin.rabbit`). Operator plumbing, hidden from `sds --help`."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import click

from admin import rabbit


@click.group("rabbit", hidden=True)
def rabbit_cli() -> None:
    """The RabbitMQ cluster profile's files, for deploy/rabbitmq.sh."""


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


@rabbit_cli.command("node")
@click.argument("base_dir", type=click.Path(path_type=Path))
@click.argument("index", type=int)
@click.argument("nodes", type=int)
@click.argument("base", type=int)
def node(base_dir: Path, index: int, nodes: int, base: int) -> None:
    """Write node INDEX's files under BASE_DIR/nodeINDEX and print its environment (KEY=VALUE
    lines)."""
    node_dir = base_dir / f"node{index}"
    (node_dir / "mnesia").mkdir(parents=True, exist_ok=True)
    (node_dir / "log").mkdir(exist_ok=True)
    ports = rabbit.deploy_ports(base, index)
    template = (Path(__file__).resolve().parents[1] / "deploy" / "rabbitmq"
                / "rabbitmq.conf").read_text()
    conf_path = node_dir / "rabbitmq.conf"
    old = conf_path.read_text() if conf_path.exists() else ""
    conf = rabbit.render_node_conf(template, amqp_port=ports["amqp"], mqtt_port=ports["mqtt"],
                                   peers=[rabbit.deploy_node_name(i) for i in range(nodes)])
    # Keep the boot-time password already written (it differs on every render).
    kept = re.search(r"^default_pass = .*$", old, re.M)
    if kept:
        conf = re.sub(r"^default_pass = .*$", lambda _m: kept.group(0), conf, flags=re.M)
    _write_if_changed(conf_path, conf)
    _write_if_changed(node_dir / "enabled_plugins", "[rabbitmq_mqtt].\n")
    _write_if_changed(node_dir / "rabbitmq-env.conf", "# the environment sets everything\n")
    env = rabbit.node_env(name=rabbit.deploy_node_name(index), node_dir=node_dir,
                          dist_port=ports["dist"], amqp_port=ports["amqp"],
                          epmd_port=rabbit.deploy_epmd_port(base),
                          ctl_ports=rabbit.deploy_ctl_ports(base))
    env["SDS_NODE_MQTT_PORT"] = str(ports["mqtt"])
    click.echo("".join(f"{k}={v}\n" for k, v in env.items()), nl=False)


@rabbit_cli.command("accounts")
@click.argument("file", type=click.Path(path_type=Path))
@click.argument("client_id")
@click.argument("prefix")
@click.argument("devices_json", required=False, type=click.Path(path_type=Path))
def accounts(file: Path, client_id: str, prefix: str, devices_json: Path | None) -> None:
    """Put the ingester's account (password from SDS_MQTT_PASSWORD) into definitions FILE, and
    the devices of a {device: password} DEVICES_JSON that FILE does not have yet."""
    defs = rabbit.load(file)
    rabbit.add_ingester(defs, "ingester", os.environ["SDS_MQTT_PASSWORD"], client_id=client_id,
                        prefix=prefix)
    known = {u.get("name") for u in defs.get("users", [])}
    if devices_json is not None and devices_json.exists():
        # Devices made under the mosquitto profile (`sds demo` keeps their passwords).
        for name, password in json.loads(devices_json.read_text()).items():
            if name not in known:
                rabbit.add_device(defs, name, password, prefix=prefix)
    rabbit.save(file, defs)


@rabbit_cli.command("stale-users")
@click.argument("file", type=click.Path(path_type=Path))
@click.argument("users_json", type=click.Path(path_type=Path))
def stale_users(file: Path, users_json: Path) -> None:
    """Print the cluster's users (USERS_JSON) that definitions FILE no longer lists."""
    stale = rabbit.stale_users(rabbit.load(file), json.loads(users_json.read_text()))
    click.echo("".join(f"{u}\n" for u in stale), nl=False)


@rabbit_cli.command("rotated-users")
@click.argument("file", type=click.Path(path_type=Path))
@click.argument("export_json", type=click.Path(path_type=Path))
def rotated_users(file: Path, export_json: Path) -> None:
    """Print the device users whose password FILE changes against the cluster's exported
    definitions (EXPORT_JSON)."""
    rotated = rabbit.rotated_users(rabbit.load(file), json.loads(export_json.read_text()))
    click.echo("".join(f"{u}\n" for u in rotated), nl=False)


@rabbit_cli.command("close-expr")
@click.argument("connections_json", type=click.Path(path_type=Path))
@click.argument("users", nargs=-1)
def close_expr(connections_json: Path, users: tuple[str, ...]) -> None:
    """Print the eval expression ending USERS' MQTT connections (CONNECTIONS_JSON: the
    cluster's MQTT connections)."""
    expr = rabbit.close_connections_expr(json.loads(connections_json.read_text()), set(users))
    click.echo(expr or "", nl=False)
