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
    """A steady stream (a message every 10 ms, never quiet for a tenth of the 0.4 s interval):
    the batch is due when its oldest message has waited the interval."""
    inbox = Inbox(limit=1000)
    inbox.put(_delivery(0, arrived=time.monotonic() - 1.0))  # waited a second already
    assert [d.mid for d in inbox.take(interval=0.4, wait=0)] == [0]
    stop = threading.Event()

    def stream() -> None:
        mid = 1
        while not stop.is_set():
            inbox.put(_delivery(mid))
            mid += 1
            time.sleep(0.01)

    thread = threading.Thread(target=stream)
    thread.start()
    try:
        started = time.monotonic()
        batch = inbox.take(interval=0.4, wait=5)
        took = time.monotonic() - started
    finally:
        stop.set()
        thread.join(5)
    assert batch and batch[0].mid == 1
    assert 0.3 <= took < 2.0, took
    assert len(batch) >= 15  # about 40 arrived meanwhile; far fewer on a busy machine


def test_a_paused_stream_flushes_after_a_tenth_of_the_interval() -> None:
    """Nothing arrives after a message: its batch is due once the stream has been quiet for
    a tenth of the interval, not the whole interval (the end of a backlog, sparse devices)."""
    inbox = Inbox(limit=1000)
    inbox.put(_delivery(1))
    inbox.put(_delivery(2))
    started = time.monotonic()
    assert [d.mid for d in inbox.take(interval=2.0, wait=5)] == [1, 2]
    assert 0.15 <= time.monotonic() - started < 1.5


def test_bytes_make_a_batch_due_too() -> None:
    inbox = Inbox(limit=100, max_bytes=10)
    inbox.put(_delivery(1, b"[" + b" " * 8 + b"]"))  # 10 bytes: full by size
    inbox.put(_delivery(2))
    assert [d.mid for d in inbox.take(interval=60, wait=0)] == [1]


def test_drain_takes_everything_past_the_byte_bound() -> None:
    """Stopping commits all that was received: drain is not cut at a batch's bytes."""
    inbox = Inbox(limit=100, max_bytes=10)
    for mid in range(5):
        inbox.put(_delivery(mid, b"[" + b" " * 8 + b"]"))  # 10 bytes each
    assert [d.mid for d in inbox.drain()] == [0, 1, 2, 3, 4]
    assert inbox.empty()


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
