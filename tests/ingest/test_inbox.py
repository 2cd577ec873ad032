"""The committer's inbox (ingest.committer.Inbox): batches fall due when full or when their
oldest message has waited the flush interval, and the committer is not woken per message."""

from __future__ import annotations

import threading
import time

from ingest.committer import Delivery, Inbox
from ingest.handler import handle


def _delivery(mid: int, payload: bytes = b"{}", arrived: float | None = None) -> Delivery:
    message = handle("sensors/A1/readings", payload)
    return Delivery(1, mid, 1, message, time.monotonic() if arrived is None else arrived)


def test_a_full_batch_is_due_at_once_and_the_rest_waits() -> None:
    inbox = Inbox(limit=3)
    for mid in range(5):
        inbox.put(_delivery(mid))
    assert [d.mid for d in inbox.take(interval=60, wait=0)] == [0, 1, 2]
    assert inbox.take(interval=60, wait=0) == []  # two waiting, not due for a minute
    assert len(inbox) == 2
    assert [d.mid for d in inbox.drain()] == [3, 4]
    assert inbox.empty()


def test_a_partial_batch_is_due_after_the_interval() -> None:
    inbox = Inbox(limit=100)
    inbox.put(_delivery(1, arrived=time.monotonic() - 1.0))  # waited a second already
    inbox.put(_delivery(2))
    assert [d.mid for d in inbox.take(interval=0.5, wait=0)] == [1, 2]
    inbox.put(_delivery(3))
    started = time.monotonic()
    assert [d.mid for d in inbox.take(interval=0.3, wait=5)] == [3]
    assert 0.2 <= time.monotonic() - started < 2.0


def test_bytes_make_a_batch_due_too() -> None:
    inbox = Inbox(limit=100, max_bytes=10)
    inbox.put(_delivery(1, b"[" + b" " * 8 + b"]"))  # 10 bytes: full by size
    inbox.put(_delivery(2))
    assert [d.mid for d in inbox.take(interval=60, wait=0)] == [1]


def test_the_committer_is_woken_per_batch_not_per_message() -> None:
    """A producer putting 1,000 messages wakes a waiting taker about once per batch."""
    inbox = Inbox(limit=100)
    wakeups = 0
    original = inbox._ready.notify

    def counting_notify(n: int = 1) -> None:
        nonlocal wakeups
        wakeups += 1
        original(n)

    inbox._ready.notify = counting_notify  # type: ignore[method-assign]
    taken: list[int] = []

    def taker() -> None:
        while len(taken) < 1000:
            taken.extend(d.mid for d in inbox.take(interval=5, wait=1))

    thread = threading.Thread(target=taker)
    thread.start()
    for mid in range(1000):
        inbox.put(_delivery(mid))
    thread.join(10)
    assert taken == list(range(1000))
    assert wakeups <= 25, wakeups  # one when a batch starts, one when it is full
