"""Alerts test support: the evaluator `python -m alerts.evaluator` as a subprocess (so SIGKILL
is real), rules written straight into a test database, and the events as the database holds
them. Used by tests/alerts, the delivery helper's ledger and bench/alerts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from shared import alertrules, alertstore
from shared.config import Settings
from testbed.process import kill_process, stop_process
from tests.support.ingesting import ROOT, settings_env, wait_for


class EvaluatorProcess:
    """`python -m alerts.evaluator` on the settings' database, logging to `log_path`."""

    def __init__(self, settings: Settings, log_path: Path) -> None:
        self.settings = settings
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, *, standby: bool = False, **changes: Any) -> EvaluatorProcess:
        """Start it and wait until it holds the evaluator lock and listens (`standby`: do not
        wait, another process holds the lock)."""
        s = self.settings.replace(**({"alerts_metrics_port": 0} | changes))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "alerts.evaluator"], cwd=ROOT,
                                         env=settings_env(s), stdout=log, stderr=log)
        if standby:
            return self
        self.starts += 1
        wait_for(lambda: self.log().count("evaluator lock taken") >= self.starts, 90,
                 what=f"evaluator start #{self.starts}")
        return self

    def log(self) -> str:
        """Everything the process(es) logged so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last commit."""
        assert self.proc is not None
        kill_process(self.proc)

    def stop(self) -> int:
        """SIGTERM and wait (SIGKILL after 30 s); the exit status."""
        return 0 if self.proc is None else stop_process(self.proc)


def add_rule(url: str, org: UUID, body: dict[str, Any]) -> UUID:
    """Create a rule from an API-style body, committed; its id."""
    rule = alertrules.parse(body)
    with psycopg.connect(url) as conn:
        rid = alertstore.create(conn, org, rule)
    return rid


def events(url: str, *, kinds: tuple[str, ...] = ("firing", "resolved")
           ) -> list[tuple[Any, ...]]:
    """(device, kind, at, value, rule_id) of the events of `kinds`, by device, then time of
    the sample, then kind (firing before resolved)."""
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT device, kind, at, value, rule_id FROM alert_events WHERE kind = ANY(%s)"
            " ORDER BY device, at, kind", (list(kinds),)).fetchall()
