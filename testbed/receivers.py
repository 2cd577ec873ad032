"""Receiving ends of alert deliveries as real processes on loopback: a webhook receiver
(testbed.webhook_receiver) and an SMTP server (testbed.smtp_sink, aiosmtpd). Each writes what
it receives as JSON lines into a file the test reads (`received()`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from testbed.process import free_port, port_open, stop_process, tail, wait_started


class Receiver:
    """One receiver process (`module`: testbed.webhook_receiver or testbed.smtp_sink)."""

    def __init__(self, module: str, directory: Path, *extra: str, port: int | None = None
                 ) -> None:
        self.port = port or free_port()
        self.out = directory / f"{module.rsplit('.', 1)[1]}-{self.port}.jsonl"
        self.out.touch()
        self.log_path = directory / f"{module.rsplit('.', 1)[1]}-{self.port}.log"
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen([sys.executable, "-m", module, str(self.port),
                                           str(self.out), *extra], stdout=log, stderr=log)
        wait_started(self._proc, lambda: port_open(self.port), what=module, timeout=20,
                     log=lambda: tail(self.log_path))

    @property
    def url(self) -> str:
        """The webhook receiver's URL."""
        return f"http://127.0.0.1:{self.port}/hook"

    def received(self) -> list[dict[str, Any]]:
        """Everything received so far, oldest first."""
        lines = self.out.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def stop(self) -> None:
        """End the process (SIGTERM, then SIGKILL after 10 s)."""
        stop_process(self._proc, timeout=10)


def webhook_receiver(directory: Path, *, status: int = 200, delay: float = 0.0,
                     hostile: str | None = None) -> Receiver:
    """A webhook receiver answering `status` to every POST, `delay` seconds after receiving it
    (it is recorded on arrival); `hostile`: a mode of testbed.webhook_receiver.HOSTILE instead."""
    extra = ("--hostile", hostile) if hostile else ()
    return Receiver("testbed.webhook_receiver", directory, "--status", str(status),
                    "--delay", str(delay), *extra)


def smtp_sink(directory: Path, port: int | None = None, *, auth: str | None = None
              ) -> Receiver:
    """An aiosmtpd SMTP server (on `port`: one a stopped sink had, to bring it back);
    `auth` "USER:PASSWORD": it requires that login."""
    return Receiver("testbed.smtp_sink", directory, *(("--auth", auth) if auth else ()),
                    port=port)


def service_receiver(directory: Path) -> Receiver:
    """A stand-in for Slack, Teams, Telegram, ntfy and PagerDuty (testbed.service_receiver):
    checks each request's documented shape and answers as the service does."""
    return Receiver("testbed.service_receiver", directory)
