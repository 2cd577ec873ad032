"""A real mosquitto broker on a free loopback port, for tests: its own config (or the shipped
deploy/mosquitto/mosquitto.conf rendered as deploy/services.sh renders it), password file and ACL.

    mq = MosquittoBroker().start(users={"ingester": "pw", "A000001": "pw"})  # shipped ACL
    mq.signal(signal.SIGSTOP); mq.kill(); mq.restart()

Run as root (as CI is), the broker drops to user mosquitto, as in production.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from testbed.process import (
    REPO,
    ProcessServer,
    ServiceError,
    chown_tree,
    ensure_traversable,
    free_port,
    stop_process,
    tail,
    wait_started,
)

SHIPPED_CONF = REPO / "deploy" / "mosquitto" / "mosquitto.conf"
DURABLE_CONF = REPO / "deploy" / "mosquitto" / "durable.conf"
SHIPPED_ACL = REPO / "deploy" / "mosquitto" / "acl"


def shipped_durable_conf() -> str:
    """deploy/mosquitto/durable.conf: the persistence and queue settings production uses."""
    return DURABLE_CONF.read_text()


def conf_settings(text: str) -> dict[str, str]:
    """mosquitto.conf text as option -> value (last one wins; comments and blanks skipped)."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        settings[key] = value.strip()
    return settings


class MosquittoBroker(ProcessServer):
    """A mosquitto broker on a free 127.0.0.1 port, started in the foreground with a Popen handle.

    Faults go to this broker's pid only: signal(SIGSTOP), kill() (SIGKILL: loses what was queued
    since the last autosave), stop() (SIGTERM: saves first).
    """

    def __init__(self) -> None:
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}
        self._binary = "mosquitto"

    def start(
        self,
        base_dir: Path | None = None,
        *,
        durable: bool = True,
        port: int | None = None,
        users: dict[str, str] | None = None,
        acl: str | None = None,
        extra_conf: str = "",
        shipped_template: bool = False,
        env: dict[str, str] | None = None,
        binary: str = "mosquitto",
        plugin: Path | None = None,
    ) -> MosquittoBroker:
        """Write a config into base_dir and start the broker; returns self.

        users=None: anonymous clients allowed, no ACL. Otherwise a password file with these users
        and the given ACL text (default: the shipped deploy/mosquitto/acl). durable=True appends
        the shipped durable.conf. shipped_template=True renders deploy/mosquitto/mosquitto.conf
        itself (as deploy/services.sh does) instead of the helper's own listener/auth lines.
        env: extra environment for the broker process (e.g. a glibc malloc tunable). binary:
        another mosquitto executable than the one on PATH (a negative control). plugin: with the
        shipped template, load this build of deploy/mosquitto/sds_plugin.c instead of the
        installed one (a test of the source in this tree).
        """
        self._env = dict(env or {})
        self._binary = binary
        base = self._prepare_dir(base_dir, "sds-mqtt-")
        self._port = port or free_port()
        self.data_dir = base / "data"
        self.data_dir.mkdir(exist_ok=True)
        self.conf_path = base / "mosquitto.conf"
        self.log_path = base / "mosquitto.log"
        self.stderr_path = base / "stderr.log"
        passwd, acl_path = base / "passwd", base / "acl"

        if users is not None:
            passwd.unlink(missing_ok=True)
            for i, (name, password) in enumerate(users.items()):
                flags = ["-c", "-b"] if i == 0 else ["-b"]
                subprocess.run(
                    ["mosquitto_passwd", *flags, str(passwd), name, password],
                    check=True,
                    capture_output=True,
                    timeout=30,
                )
            if not users:
                passwd.touch()
            acl_path.write_text(acl if acl is not None else SHIPPED_ACL.read_text())

        if shipped_template:
            if users is None:
                raise ValueError("the shipped template requires users (it refuses anonymous)")
            conf = (
                SHIPPED_CONF.read_text()
                .replace("@BIND@", "127.0.0.1")
                .replace("@PORT@", str(self._port))
                .replace("@DIR@", str(base))
            )
            if plugin is not None:
                conf = conf.replace("/usr/local/lib/sds/mosquitto_sds.so", str(plugin))
        else:
            conf = f"listener {self._port} 127.0.0.1\n"
            if users is None:
                conf += "allow_anonymous true\n"
            else:
                conf += f"allow_anonymous false\npassword_file {passwd}\nacl_file {acl_path}\n"
            conf += (
                f"persistence_location {self.data_dir}/\nlog_dest file {self.log_path}\n"
                "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
            )
        conf += "\n" + (shipped_durable_conf() if durable else "persistence false\n")
        conf += "\n" + extra_conf + "\n"
        self.conf_path.write_text(conf)
        # As root, mosquitto drops to user "mosquitto" (as in production) and must write its
        # store and log here; chowning keeps the tests honest about that, rather than "user root".
        chown_tree(base, "mosquitto")
        ensure_traversable(base, "mosquitto")
        self._launch()
        return self

    # -- faults and lifecycle -------------------------------------------------------------------
    def signal(self, sig: int) -> None:
        """Send sig (SIGHUP, SIGUSR1, SIGSTOP, SIGCONT, ...) to this broker's pid."""
        self._require_proc().send_signal(sig)

    def stop(self) -> None:
        """SIGTERM and wait: mosquitto saves its store on the way out (kill(): SIGKILL, a crash
        that loses what was queued since the last autosave)."""
        if self.is_running() and stop_process(self._require_proc()) == -signal.SIGKILL:
            raise ServiceError(f"mosquitto ignored SIGTERM\n{tail(self.log_path)}")

    def restart(self) -> None:
        """Stop (SIGTERM) if running, then start again with the same config and port."""
        self.stop()
        self._launch()

    def log_text(self) -> str:
        """The broker's log file plus anything it wrote to stderr."""
        parts = [
            p.read_text(errors="replace") for p in (self.log_path, self.stderr_path) if p.exists()
        ]
        return "\n".join(parts)

    # -- internals ------------------------------------------------------------------------------

    def _launch(self) -> None:
        # Readiness comes from the log ("... running" after the listener opened), read from where
        # it ended before this launch; a probe connection would show up in the log and in tests.
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.stderr_path, "ab") as err:
            self._proc = subprocess.Popen(
                [self._binary, "-c", str(self.conf_path)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env={**os.environ, **self._env} if self._env else None,
            )
        wait_started(self._proc, lambda: self._running_since(offset), what="mosquitto",
                     log=lambda: f"{tail(self.stderr_path)}\n{tail(self.log_path)}",
                     every=0.02)

    def _running_since(self, offset: int) -> bool:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return False
        return re.search(r"mosquitto version \S+ running", text) is not None
