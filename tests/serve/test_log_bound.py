"""Error logs are bounded per cause (shared.logs.RepeatFilter, issue 20 item 2): the same
traceback in a loop writes one traceback per interval and a count, not one per request."""

from __future__ import annotations

import io
import logging

from shared.config import Settings
from shared.logs import FORMAT, RepeatFilter, configure_logging


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _logger(interval: float, clock: Clock) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RepeatFilter(interval, clock))
    logger = logging.getLogger(f"test.repeat.{id(out)}")
    logger.propagate = False
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    return logger, out


def _fail(depth: int) -> None:
    if depth:
        _fail(depth - 1)
    raise RecursionError("maximum recursion depth exceeded")


def _log_failure(logger: logging.Logger) -> None:
    try:
        _fail(30)
    except RecursionError:
        logger.error("unhandled error", exc_info=True)


def test_the_same_traceback_is_written_once_per_interval_with_a_count() -> None:
    clock = Clock()
    logger, out = _logger(60, clock)
    _log_failure(logger)
    one = len(out.getvalue())
    assert "Traceback" in out.getvalue() and one > 500
    for _ in range(10_000):
        _log_failure(logger)
    assert len(out.getvalue()) == one  # 10,000 more: nothing written
    clock.now += 61
    _log_failure(logger)
    text = out.getvalue()
    assert text.count("Traceback") == 2
    assert "unhandled error [10000 more like this dropped in the last 61 s]" in text
    assert len(text) < 2 * one + 200


def test_different_causes_are_not_hidden_behind_each_other() -> None:
    clock = Clock()
    logger, out = _logger(60, clock)
    _log_failure(logger)
    try:
        raise ValueError("other")
    except ValueError:
        logger.error("unhandled error", exc_info=True)  # same message, another exception
    for name in ("a", "b", "a"):
        logger.warning("job %s skipped", name)  # lines without a traceback: never dropped
    for path in ("/x", "/y"):
        try:
            raise KeyError(path)
        except KeyError:
            # A traceback: the template and the raising line are the cause, not the arguments.
            logger.error("page failed: %s", path, exc_info=True)
    logger.warning("query cancelled")
    logger.info("routine %d", 1)
    logger.info("routine %d", 2)
    text = out.getvalue()
    assert text.count("Traceback") == 3 and "ValueError: other" in text
    assert text.count("job a skipped") == 2 and "job b skipped" in text
    assert "page failed: /x" in text and "page failed: /y" not in text
    assert "query cancelled" in text and "routine 1" in text and "routine 2" in text


def test_interval_zero_writes_every_record() -> None:
    logger, out = _logger(0, Clock())
    for _ in range(3):
        _log_failure(logger)
    assert out.getvalue().count("Traceback") == 3


def test_configure_logging_installs_the_filter() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging(Settings(log_repeat_interval=5))
        filters = [f for h in root.handlers for f in h.filters if isinstance(f, RepeatFilter)]
        assert filters and filters[0].interval == 5
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
