"""One log format for all processes; configure_logging(settings) is called once at start.

Tracebacks are bounded per cause (issue 20 item 2: a client that can trigger the same error in a
loop must not be able to fill the disk with it): `RepeatFilter` lets the first record with a
traceback of a cause through, drops the same cause's for `SDS_LOG_REPEAT_INTERVAL` seconds, then
lets the next one through with the count it dropped. A cause is where the record was logged,
its message template, and the exception's type and the line that raised it (whatever the
message's arguments, so a client varying a path cannot make each traceback new), so different
failures are never hidden behind each other. Lines without a traceback all pass: they are
operational events that tests and operators count, about 100 bytes each, and rotation bounds
them. Rotation of the files the logs land in: docs/operations.md "Log files".
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable

from shared.config import Settings

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
MAX_CAUSES = 1024  # causes remembered per process; the oldest is forgotten past this

Cause = tuple[str, int, str, str, str]


def cause_of(record: logging.LogRecord) -> Cause:
    """What makes two records with a traceback "the same": logger, level, call site, message
    template, and the exception type and innermost frame that raised it."""
    raised = ""
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raised = f"{type(exc).__module__}.{type(exc).__qualname__}@{where}"
    return (record.name, record.levelno, f"{record.pathname}:{record.lineno}", str(record.msg),
            raised)


class RepeatFilter(logging.Filter):
    """Passes a cause's first record with a traceback, then at most one per `interval` seconds,
    that one saying how many of the same were dropped since. Records without one pass."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        # cause -> (time its last record was let through, records dropped since)
        self._seen: OrderedDict[Cause, tuple[float, int]] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether `record` is written; a let-through record after drops gets the count."""
        if not record.exc_info or record.exc_info[1] is None or self.interval <= 0:
            return True
        cause, now = cause_of(record), self._clock()
        with self._lock:
            last = self._seen.get(cause)
            if last is not None and now - last[0] < self.interval:
                self._seen[cause] = (last[0], last[1] + 1)
                return False
            self._seen[cause] = (now, 0)
            self._seen.move_to_end(cause)
            while len(self._seen) > MAX_CAUSES:
                self._seen.popitem(last=False)
        if last is not None and last[1]:
            # Formatted once here, so every handler shows the same text.
            record.msg = (f"{record.getMessage()} [{last[1]} more like this dropped in the last "
                          f"{now - last[0]:.0f} s]")
            record.args = None
        return True


def configure_logging(settings: Settings) -> None:
    """Log to stderr at the configured level, in the shared format, repeated tracebacks
    bounded."""
    logging.basicConfig(level=settings.log_level.upper(), format=FORMAT, force=True)
    for handler in logging.getLogger().handlers:
        handler.addFilter(RepeatFilter(settings.log_repeat_interval))
