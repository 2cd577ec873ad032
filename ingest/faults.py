"""The test-only fault hook: the ingester SIGKILLs (or SIGSTOPs) itself at a named point.

Enabled only by SDS_FAULT_AT / SDS_FAULT_EVERY / SDS_FAULT_SIGNAL (never set in production); the
delivery tests use it to crash the process between receive, insert, commit and ack.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

from shared.config import Settings

log = logging.getLogger(__name__)

POINTS = ("after_receive", "after_insert_before_commit", "after_commit_before_ack")
SIGNALS = {"KILL": signal.SIGKILL, "STOP": signal.SIGSTOP}


class FaultHook:
    """Call with a point name; at every Nth pass of the configured point the process signals
    itself. `progress` names what was acknowledged so far, for the log line."""

    def __init__(self, settings: Settings, progress: Callable[[], float] = lambda: 0) -> None:
        if settings.fault_at and settings.fault_at not in POINTS:
            raise ValueError(f"SDS_FAULT_AT: {settings.fault_at!r} is not one of "
                             + ", ".join(POINTS))
        if settings.fault_signal not in SIGNALS:
            raise ValueError(f"SDS_FAULT_SIGNAL: {settings.fault_signal!r} is not one of "
                             + ", ".join(SIGNALS))
        self.point = settings.fault_at
        self.every = max(1, settings.fault_every)
        self.signal = settings.fault_signal
        self._progress = progress
        self._passes = 0

    def __call__(self, point: str) -> None:
        if self.point != point:
            return
        self._passes += 1
        if self._passes % self.every == 0:
            log.warning("fault injection: SIG%s at %s (%d messages acknowledged so far)",
                        self.signal, point, self._progress())
            if self.signal == "KILL":
                logging.shutdown()
            else:
                for handler in logging.getLogger().handlers:
                    handler.flush()
            os.kill(os.getpid(), SIGNALS[self.signal])
