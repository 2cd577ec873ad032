"""Fair share of the API's workers (issue 20 item 4): requests in flight are capped per user and
per organisation, and heavy pages take a slot from a small pool, so one user cannot hold every
worker and /health and small requests keep answering. (Requests per window: serve.ratelimit.)

A slot is an exclusive `flock` on a small file in one directory per host (SDS_API_SLOT_DIR), so
the caps hold across all gunicorn workers and API instances of a host, and a worker that dies
drops its locks with its file descriptors: nothing to clean up, no slot leaks. Nothing waits for
a slot: a sync worker that waited would be one more worker held.

- A user with SDS_API_USER_CONCURRENCY requests in flight (any keys or tokens), or an
  organisation with SDS_API_ORG_CONCURRENCY, gets 429 for the next one.
- A GET whose estimated cost is more than SDS_API_HEAVY_ROWS rows served is heavy: it needs
  one of SDS_API_HEAVY_SLOTS, else 503 with Retry-After. The cost is what the request will
  read, as its view parses it (a view marked with `metered` says how: /data's is
  serve.api.data.request_cost, rows for a page of rows, buckets and the readings they
  aggregate for an aggregated page), never how a number is spelled; a request the view will
  refuse costs nothing. Routes without an estimate (the model listings, whose pages hold an
  organisation's own records) are never heavy, so the dashboard's admin pages never wait
  for an export. Whether the pool is full is checked before authentication too, so refusing a
  flood of heavy pages costs no database round trip.

A streamed page gives its slots back after its last byte (or when the server closes it: the
client went away); any other answer as soon as it is built.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from flask import Flask, Response, current_app, g, request

from people.principal import Principal
from serve import metrics
from shared.config import Settings
from shared.errors import TooManyRequests

EXTENSION = "fairshare"
HEAVY = "heavy"
RETRY_HEAVY = 2  # seconds a refused heavy page is told to wait


class Busy(TooManyRequests):
    """The heavy-page pool is full: 503 (serve.errors.STATUS) with Retry-After."""


def slot_dir(settings: Settings) -> Path:
    """SDS_API_SLOT_DIR, or one directory per database under the temporary directory (two
    services on one host, e.g. test runs, do not share slots)."""
    if settings.api_slot_dir:
        return Path(settings.api_slot_dir)
    tag = hashlib.sha256(settings.database_url.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"sds-slots-{tag}"


@dataclass
class Held:
    """The slots one request holds (file descriptors with an exclusive lock)."""

    fds: list[int] = field(default_factory=list)

    def release(self) -> None:
        """Unlock and close every slot (closing drops the lock); safe to call twice."""
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)


class Slots:
    """`cap` slots per name, as lock files `<dir>/<name>.<i>`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, name: str, i: int) -> str:
        return str(self.directory / f"{name}.{i}")

    def try_take(self, name: str, cap: int) -> int | None:
        """A locked descriptor of a free slot of `name`, or None when all `cap` are held."""
        for i in range(cap):
            fd = os.open(self._path(name, i), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                continue
            return fd
        return None

    def any_free(self, name: str, cap: int) -> bool:
        """Whether a slot of `name` is free now (it may be gone by the time it is taken)."""
        fd = self.try_take(name, cap)
        if fd is None:
            return False
        os.close(fd)
        return True


COST = "_sds_cost"  # a view's attribute: its cost estimate (see `metered`)
V = TypeVar("V", bound=Callable[..., Any])


def metered(estimate: Callable[[], int]) -> Callable[[V], V]:
    """Mark a view whose requests may be heavy: `estimate()` gives the cost of the request
    being served in rows served (0 for one the view will refuse). Put it above `requires`."""

    def mark(view: V) -> V:
        setattr(view, COST, estimate)
        return view

    return mark


def cost() -> int:
    """The estimated cost of this request in rows served (0 when its view has no estimate);
    computed once per request (kept in its WSGI environ, not in `g`, which a dashboard page
    shares with the API requests it makes in-process: serve/web/apicall.py)."""
    environ = request.environ
    if "sds.cost" not in environ:
        view = current_app.view_functions.get(request.endpoint or "")
        estimate = getattr(view, COST, None)
        environ["sds.cost"] = estimate() if estimate is not None else 0
    return cast(int, environ["sds.cost"])


def is_heavy(settings: Settings) -> bool:
    """A GET (or HEAD) whose estimated cost is more than SDS_API_HEAVY_ROWS rows."""
    if settings.api_heavy_slots <= 0 or request.method not in ("GET", "HEAD"):
        return False
    return cost() > settings.api_heavy_rows


def _settings() -> Settings:
    found = current_app.extensions["settings"]
    assert isinstance(found, Settings)
    return found


def _slots() -> Slots:
    return current_app.extensions[EXTENSION]


def _refuse_heavy() -> Busy:
    settings = _settings()
    metrics.refused("heavy_pages")
    return Busy(f"the service is serving its {settings.api_heavy_slots} large page(s) "
                f"(costing more than {settings.api_heavy_rows} rows) at once; retry in "
                f"{RETRY_HEAVY} s or ask for fewer rows or a shorter window",
                retry_after=RETRY_HEAVY)


def precheck() -> None:
    """before_request, ahead of authentication: a heavy page while the pool is full is refused
    without touching the database."""
    settings = _settings()
    if is_heavy(settings) and not _slots().any_free(HEAVY, settings.api_heavy_slots):
        raise _refuse_heavy()


def admit() -> None:
    """before_request, after authentication: take the caller's user and organisation slots,
    and a heavy slot for a heavy page; 429 / 503 when none is free."""
    principal: Principal | None = g.get("principal")
    if principal is None:
        return
    settings, slots = _settings(), _slots()
    held = Held()
    g.fairshare = held
    wanted = [(f"user-{principal.user_id}", settings.api_user_concurrency, "this user"),
              (f"org-{principal.org_id}", settings.api_org_concurrency, "this organisation")]
    for name, cap, whose in wanted:
        if cap <= 0:
            continue
        fd = slots.try_take(name, cap)
        if fd is None:
            held.release()
            metrics.refused(f"in_flight_{name.split('-', 1)[0]}")
            raise TooManyRequests(f"too many requests in flight: at most {cap} at once for "
                                  f"{whose}; retry when one has finished", retry_after=1)
        held.fds.append(fd)
    if is_heavy(settings):
        fd = slots.try_take(HEAVY, settings.api_heavy_slots)
        if fd is None:
            held.release()
            raise _refuse_heavy()
        held.fds.append(fd)


class _Releasing:
    """A streamed body that gives `held` back after its last chunk, or when the server closes
    it: a client gone, or a HEAD, whose body is closed without being iterated (a generator
    never started would skip its `finally`)."""

    def __init__(self, body: Iterable[bytes], held: Held) -> None:
        self.body = body
        self.held = held

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.body
        finally:
            self.held.release()

    def close(self) -> None:
        """Release the slots and close the body (WSGI servers call this once done)."""
        self.held.release()
        close = getattr(self.body, "close", None)
        if close is not None:
            close()


def _release_after(response: Response) -> Response:
    """after_request: a streamed page keeps its slots until its last byte; any other answer
    is complete here and gives them back now."""
    held: Held | None = g.pop("fairshare", None)
    if held is not None:
        if response.is_streamed:
            response.response = _Releasing(cast(Iterable[bytes], response.response), held)
        else:
            held.release()
    return response


def _release_on_teardown(_exc: BaseException | None) -> None:
    """teardown_request: slots of a request that never got to after_request."""
    held: Held | None = g.pop("fairshare", None)
    if held is not None:
        held.release()


def init_app(app: Flask, settings: Settings) -> None:
    """Install the hooks; call right after serve.auth.init_app (admit needs the principal)."""
    app.extensions[EXTENSION] = Slots(slot_dir(settings))
    # precheck runs before authentication: put it first among the before_request hooks.
    app.before_request_funcs.setdefault(None, []).insert(0, precheck)
    app.before_request(admit)
    app.after_request(_release_after)
    app.teardown_request(_release_on_teardown)
