"""Issue 30: no default port of the stack lies in the kernel's ephemeral port range, from which
outgoing connections take their local ports (a server port there can be found taken: run.sh
failed with "Address already in use" on 55432 while nothing listened on it).

The defaults have two homes: shared/config.py (the processes' settings) and deploy/lib/ports.sh
(the servers the deploy scripts start); the deploy scripts take theirs from ports.sh only. The
ports derived from a base (the Patroni and RabbitMQ profiles) are checked over their declared
span; tests/test_deploy.py checks the scripts' own arithmetic against those spans."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from admin import rabbit
from shared.config import PREFIX, Settings
from tests.support.ports import PORTS_SH, REPO, ephemeral_range, port_of, ports_sh, span

RABBIT_NODES = 3  # the profile's default node count


def settings_ports() -> dict[str, int]:
    """SDS_* variable -> the port in its shared/config.py default, for every default naming one."""
    found = {}
    for f in dataclasses.fields(Settings):
        if f.name.endswith(("_port", "_bind", "_url")) and (p := port_of(f.default)):
            found[PREFIX + f.name.upper()] = p
    return found


def deploy_ports() -> dict[str, int]:
    """Every port the deploy scripts bind by default: ports.sh's, and each port of a profile's
    span from its base."""
    sh = ports_sh()
    found = {name: p for name, value in sh.items()
             if name.startswith("DEFAULT_") and (p := port_of(value))}
    for profile in ("PATRONI", "RABBITMQ"):
        found.update({f"{profile} {p}": p for p in span(profile)})
    return found


def test_no_default_port_lies_in_the_ephemeral_range() -> None:
    lo, hi = ephemeral_range()
    ports = {**settings_ports(), **deploy_ports()}
    # The ones a reader expects, so a parse that finds nothing cannot pass.
    assert {"SDS_DATABASE_URL", "SDS_MQTT_PORT", "SDS_EDGE_BIND", "SDS_HTTP_BIND",
            "SDS_METRICS_PORT", "DEFAULT_PG_PORT", "DEFAULT_PG_STANDBY_PORT",
            "DEFAULT_PATRONI_PORT_BASE", "DEFAULT_RABBITMQ_PORT_BASE"} <= ports.keys()
    inside = {name: p for name, p in ports.items() if lo <= p <= hi}
    assert not inside, f"inside the ephemeral range {lo}-{hi}: {inside}"


def test_the_rabbitmq_profile_stays_within_its_declared_span() -> None:
    """admin/rabbit.py computes the profile's ports: all of them within ports.sh's span."""
    ports = span("RABBITMQ")
    base = ports.start
    used = [p for i in range(RABBIT_NODES) for p in rabbit.deploy_ports(base, i).values()]
    used += [rabbit.deploy_epmd_port(base), *rabbit.deploy_ctl_ports(base)]
    assert all(p in ports for p in used), (used, ports)
    env = rabbit.node_env(name="n", node_dir=Path("/x"), dist_port=1, amqp_port=2, epmd_port=3,
                          ctl_ports=rabbit.deploy_ctl_ports(base))
    assert (int(env["RABBITMQ_CTL_DIST_PORT_MIN"]), int(env["RABBITMQ_CTL_DIST_PORT_MAX"])) \
        == rabbit.deploy_ctl_ports(base)


def test_ports_sh_agrees_with_shared_config() -> None:
    """A default both homes state (run.sh computes metrics ports, config.py serves them) is the
    same in both."""
    sh = ports_sh()
    settings = {PREFIX + f.name.upper(): f.default for f in dataclasses.fields(Settings)}
    shared = {name.removeprefix("DEFAULT_") for name in sh if name.startswith("DEFAULT_")}
    shared = {name for name in shared if PREFIX + name in settings}
    assert {"MQTT_PORT", "METRICS_PORT", "EDGE_BIND", "HTTP_BIND"} <= shared
    differ = {name: (sh[f"DEFAULT_{name}"], settings[PREFIX + name]) for name in shared
              if sh[f"DEFAULT_{name}"] != str(settings[PREFIX + name])}
    assert not differ, differ
    assert port_of(Settings().database_url) == int(sh["DEFAULT_PG_PORT"])


def test_deploy_scripts_take_their_default_ports_from_ports_sh() -> None:
    """No ${SDS_...:-default} naming a port outside ports.sh."""
    default = re.compile(r"\$\{(SDS_[A-Z_]*(?:PORT|BIND|URL)[A-Z_]*):-([^}$]+)\}")
    offenders = [f"{path.relative_to(REPO)}: {m.group(0)}"
                 for path in sorted((REPO / "deploy").rglob("*.sh")) if path != PORTS_SH
                 for m in default.finditer(path.read_text()) if port_of(m.group(2))]
    assert not offenders, offenders
