"""A real RabbitMQ 3.10 cluster (MQTT plugin, quorum queues) on one machine, for tests.

Each node gets its own node name, AMQP, distribution and MQTT ports, config, data and log
directories, all under one base directory, and the cluster its own Erlang cookie and its own epmd
port: nothing here uses RabbitMQ's default ports or node names, or the system node's cookie, so a
node started by the Debian package (if any) is left alone. Nodes run as user `rabbitmq` (started
with Popen(user=...) as root, the way the package's script switches user), lean: one scheduler,
no busy waiting, no management plugin. The node configuration comes from deploy/rabbitmq/
(shared with deploy/rabbitmq.sh), so tests run what production runs.

    cluster = RabbitCluster(size=3).start()
    cluster.provision(ingester=("ingester", "pw"), devices={"A1": "pw"})
    cluster.mqtt_ports   # one per node
    cluster.kill(1)      # SIGKILL node 1's beam process; cluster.restart_node(1) brings it back
    cluster.cleanup()    # stops every node and its epmd, removes the directory
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from admin import rabbit
from testbed.process import (
    REPO,
    ServiceError,
    chown_tree,
    ensure_traversable,
    free_port,
    port_open,
    stop_process,
    tail,
)

RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
NODE_TEMPLATE = REPO / "deploy" / "rabbitmq" / "rabbitmq.conf"
# What deploy/rabbitmq.sh runs on a node it starts again (docs/operations.md, "Two of three
# nodes must be up"): start the node's member of the MQTT client-id tracker before the plugin
# asks its peers about it.
REJOIN_EXPR = REPO / "deploy" / "rabbitmq" / "mqtt-rejoin.erl"
BOOT_BANNER = " Starting RabbitMQ "  # logged once the node's Raft systems are up
START_TIMEOUT = 120.0  # three nodes booting at once on two busy cores
CTL_TIMEOUT = 60.0


class RabbitNode:
    """One node's names, ports, paths and process."""

    def __init__(self, index: int, base: Path, tag: str) -> None:
        self.index = index
        self.name = f"sds-{tag}-{index}@localhost"
        self.dir = base / f"node{index}"
        self.amqp_port = free_port()
        self.dist_port = free_port()
        self.mqtt_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid_file = self.dir / "beam.pid"
        self.log_dir = self.dir / "log"

    def beam_pid(self) -> int | None:
        """The node's Erlang VM pid (the process a SIGKILL must hit), or None.

        The start script stays as the VM's parent (it turns SIGTERM into a clean stop), so the
        VM's own pid comes from the pid file RabbitMQ writes at boot.
        """
        try:
            pid = int(self.pid_file.read_text().split()[0])
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            return None
        return pid if comm.startswith("beam") else None

    def log_text(self) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*.log")) + [self.dir / "stdout.log"]:
            if path.exists():
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)


class RabbitCluster:
    """`size` RabbitMQ nodes clustered on 127.0.0.1 (see the module docstring)."""

    def __init__(self, size: int = 3) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        self.tag = "t" + secrets.token_hex(3)
        self.cookie = secrets.token_hex(20)
        self.epmd_port = free_port()
        self.base_dir = Path(tempfile.mkdtemp(prefix="sds-rmq-"))
        self.home = self.base_dir / "home"
        self.nodes = [RabbitNode(i, self.base_dir, self.tag) for i in range(size)]
        self.vhost = rabbit.VHOST

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> RabbitCluster:
        """Write every node's files, boot the nodes one by one (they cluster through classic peer
        discovery) and wait until the cluster has `size` running members."""
        self.home.mkdir()
        cookie = self.home / ".erlang.cookie"
        cookie.write_text(self.cookie)
        for node in self.nodes:
            self._write_node(node)
        chown_tree(self.base_dir, "rabbitmq")
        os.chmod(cookie, 0o400)
        ensure_traversable(self.base_dir, "rabbitmq")
        try:
            # One after the other: RabbitMQ 3.10 refuses a node's join to the MQTT client-id
            # tracker (a Raft cluster) while that cluster's leader is still fresh
            # ("cluster_change_not_permitted") and does not retry, leaving that node unable to
            # accept any MQTT connection ("client ID registration timed out"); seen here when
            # three nodes booted at once.
            for node in self.nodes:
                self._launch(node)
                self._await_node(node)
                if node.index > 0:
                    self._ensure_joined(node)
            self.wait_members(self.size)
        except BaseException:
            self.cleanup()
            raise
        return self

    def cleanup(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL; all at once, as each clean stop waits on its
        own VM), stop this cluster's epmd, remove files."""
        with ThreadPoolExecutor(max_workers=self.size) as pool:
            list(pool.map(self._stop_node, self.nodes))
        # epmd was started by the first node on our private port; it outlives the nodes.
        subprocess.run([shutil.which("epmd") or "/usr/bin/epmd", "-port", str(self.epmd_port),
                        "-kill"], capture_output=True, timeout=15, check=False)
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def kill(self, index: int) -> None:
        """SIGKILL node `index`'s VM (a crash: no goodbye to its peers)."""
        node = self.nodes[index]
        pid = node.beam_pid()
        if pid is None:
            raise ServiceError(f"node {node.name}: no running Erlang VM to kill")
        os.kill(pid, signal.SIGKILL)
        if node.proc is not None:
            node.proc.wait(timeout=30)  # the start script ends with its VM

    def restart_node(self, index: int) -> None:
        """Start node `index` again with its data, as deploy/rabbitmq.sh does (its client-id
        tracker member started early, _rejoin_tracker); waits until it answers."""
        node = self.nodes[index]
        log = node.log_dir / f"{node.name}.log"
        seen = log.stat().st_size if log.exists() else 0
        self._launch(node)
        self._rejoin_tracker(node, log, seen)
        self._await_node(node)

    # -- facts ----------------------------------------------------------------------------------
    @property
    def mqtt_ports(self) -> list[int]:
        return [n.mqtt_port for n in self.nodes]

    def running(self) -> list[int]:
        """Indexes of the nodes whose process is alive."""
        return [n.index for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def ctl(self, *args: str, node: int | None = None, timeout: float = CTL_TIMEOUT,
            tool: str = "rabbitmqctl") -> str:
        """Run a RabbitMQ CLI tool against a running node (the first alive one by default)."""
        index = node if node is not None else self.running()[0]
        cmd = [str(RABBIT_BIN / tool), "-n", self.nodes[index].name, "-q", *args]
        result = subprocess.run(cmd, env=self._env(self.nodes[index]), capture_output=True,
                                text=True, timeout=timeout, user="rabbitmq",
                                cwd=self.base_dir)
        if result.returncode != 0:
            raise ServiceError(f"{tool} {' '.join(args)} failed ({result.returncode}): "
                               f"{result.stdout}{result.stderr}")
        return result.stdout

    def members(self) -> list[str]:
        """Running members as the first alive node sees them."""
        out = self.ctl("cluster_status", "--formatter", "json")
        return list(json.loads(out).get("running_nodes", []))

    def wait_members(self, count: int, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last: list[str] = []
        while time.monotonic() < deadline:
            try:
                last = self.members()
                if len(last) == count:
                    return
            except ServiceError:
                pass
            time.sleep(1)
        raise ServiceError(f"cluster has {len(last)} running members, wanted {count}: {last}")

    def queue_leader(self, queue: str) -> int:
        """Index of the node that leads quorum queue `queue` (as the cluster reports it)."""
        out = self.ctl("list_queues", "-p", self.vhost, "name", "type", "leader",
                       "--formatter", "json")
        for row in json.loads(out):
            if row.get("name") == queue:
                leader = str(row.get("leader", ""))
                for node in self.nodes:
                    if node.name == leader:
                        return node.index
                raise ServiceError(f"queue {queue} led by unknown node {leader!r}")
        raise ServiceError(f"no queue {queue} in vhost {self.vhost}: {out}")

    def queues(self) -> list[dict[str, object]]:
        """Queues of the service vhost with type, leader, members and message counts."""
        out = self.ctl("list_queues", "-p", self.vhost, "name", "type", "leader", "members",
                       "messages", "--formatter", "json")
        return list(json.loads(out))

    def provision(self, *, ingester: tuple[str, str],
                  devices: dict[str, str] | None = None,
                  ingester_client_id: str = "sds-ingester") -> None:
        """Create the vhost, the ingester and device users with their permissions (the same
        definitions `sds device register --rabbitmq-definitions` writes), in one import."""
        defs = rabbit.empty_definitions()
        rabbit.add_ingester(defs, ingester[0], ingester[1], client_id=ingester_client_id)
        for name, password in (devices or {}).items():
            rabbit.add_device(defs, name, password)
        path = self.base_dir / "import.json"
        path.write_text(json.dumps(defs))
        self.import_definitions(path)

    def import_definitions(self, path: Path) -> None:
        """`rabbitmqctl import_definitions` of a file (copied where user rabbitmq can read it),
        as `deploy/services.sh reload-broker` does."""
        own = self.base_dir / "import.json"
        if path.resolve() != own.resolve():
            shutil.copyfile(path, own)
        chown_tree(own, "rabbitmq")
        self.ctl("import_definitions", str(own))

    def reload(self, path: Path) -> list[str]:
        """What `deploy/services.sh reload-broker` (deploy/rabbitmq.sh cmd_reload) does with
        an accounts file: note the devices whose password it changes, import it, delete the
        users it no longer lists and close their connections, close the rotated devices'
        connections. Returns the rotated devices."""
        current = self.base_dir / "export.json"
        current.touch()
        chown_tree(current, "rabbitmq")
        self.ctl("export_definitions", str(current))
        defs = rabbit.load(path)
        rotated = rabbit.rotated_users(defs, json.loads(current.read_text()))
        self.import_definitions(path)
        users = json.loads(self.ctl("list_users", "--formatter", "json"))
        stale = rabbit.stale_users(defs, users)
        for user in stale:
            self.ctl("delete_user", user)
        conns = json.loads(self.ctl("list_mqtt_connections", "-p", self.vhost, "user",
                                    "client_id", "--formatter", "json") or "[]")
        expr = rabbit.close_connections_expr(conns, set(rotated) | set(stale))
        if expr:
            self.ctl("eval", expr)
        return rotated

    def log_text(self) -> str:
        return "\n".join(n.log_text() for n in self.nodes)

    # -- internals ------------------------------------------------------------------------------
    def _write_node(self, node: RabbitNode) -> None:
        node.dir.mkdir()
        node.log_dir.mkdir()
        (node.dir / "mnesia").mkdir()
        conf = rabbit.render_node_conf(
            NODE_TEMPLATE.read_text(), amqp_port=node.amqp_port, mqtt_port=node.mqtt_port,
            peers=[n.name for n in self.nodes])
        (node.dir / "rabbitmq.conf").write_text(conf)
        (node.dir / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
        (node.dir / "rabbitmq-env.conf").write_text("# empty: the environment sets everything\n")

    def _env(self, node: RabbitNode) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update(rabbit.node_env(
            name=node.name, node_dir=node.dir, dist_port=node.dist_port,
            amqp_port=node.amqp_port, epmd_port=self.epmd_port))
        env["HOME"] = str(self.home)  # the cluster's own .erlang.cookie
        env["LANG"] = env["LC_ALL"] = "C.UTF-8"
        return env

    def _launch(self, node: RabbitNode) -> None:
        node.pid_file.unlink(missing_ok=True)
        with open(node.dir / "stdout.log", "ab") as out:
            user = "rabbitmq" if os.geteuid() == 0 else None
            node.proc = subprocess.Popen(
                [str(RABBIT_BIN / "rabbitmq-server")], env=self._env(node), cwd=node.dir,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, user=user,
                group=pwd.getpwnam("rabbitmq").pw_gid if user else None,
                extra_groups=[] if user else None, start_new_session=True)

    def _await_node(self, node: RabbitNode) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if node.proc is None or node.proc.poll() is not None:
                raise ServiceError(f"rabbitmq node {node.name} exited at start\n"
                                   f"{tail(node.dir / 'stdout.log')}\n"
                                   f"{tail(node.log_dir / (node.name + '.log'))}")
            # The MQTT listener opens last, once the node and its plugins have booted.
            if port_open(node.mqtt_port):
                return
            time.sleep(0.2)
        raise ServiceError(f"rabbitmq node {node.name}: MQTT port {node.mqtt_port} not open "
                           f"after {START_TIMEOUT}s\n{tail(node.dir / 'stdout.log')}")

    def _rejoin_tracker(self, node: RabbitNode, log: Path, offset: int) -> None:
        """Once the restarted node's Raft systems are up (its boot banner, past `offset` in its
        log), start its member of the MQTT client-id tracker. RabbitMQ 3.10's plugin first asks
        its peers for the tracker's members, with a 100 s timeout; after a majority was lost the
        tracker has no leader until this node's member votes, which the plugin starts only after
        that question: the node stayed without MQTT for 100 s (docs/operations.md)."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if port_open(node.mqtt_port) or node.proc is None or node.proc.poll() is not None:
                return  # up already, or _await_node reports the exit
            if BOOT_BANNER in _read_from(log, offset):
                try:
                    self.ctl("eval", REJOIN_EXPR.read_text(), node=node.index, timeout=30)
                    return
                except (ServiceError, subprocess.TimeoutExpired):
                    pass  # the node is still starting its Raft systems: again
            time.sleep(0.2)

    def _ensure_joined(self, node: RabbitNode) -> None:
        """Join a freshly booted node to node 0's cluster if peer discovery left it on its own
        (seen once on a loaded machine: discovery gives up after 10 x 0.5 s and the node boots
        as a cluster of one; longer retries would delay the first node's boot as much)."""
        first = self.nodes[0].name
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                status = json.loads(self.ctl("cluster_status", "--formatter", "json",
                                             node=node.index))
            except (ServiceError, ValueError):
                time.sleep(1)
                continue
            if first in status.get("running_nodes", []):
                return
            if first in status.get("disk_nodes", []):
                time.sleep(1)  # a member, still syncing
                continue
            break
        self.ctl("stop_app", node=node.index)
        self.ctl("reset", node=node.index)
        self.ctl("join_cluster", first, node=node.index)
        self.ctl("start_app", node=node.index)
        self._await_node(node)

    def _stop_node(self, node: RabbitNode) -> None:
        if node.proc is not None:
            # The start script turns SIGTERM into a clean stop of its VM and waits for it.
            stop_process(node.proc)
        pid = node.beam_pid()  # a VM whose script is gone (killed) must not outlive the test
        if pid is not None:
            os.kill(pid, signal.SIGKILL)


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def log_has(cluster: RabbitCluster, pattern: str) -> bool:
    """Whether any node's log matches the regular expression."""
    return re.search(pattern, cluster.log_text()) is not None
