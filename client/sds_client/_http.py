"""HTTP transport of the client: one requests.Session, credentials, JSON errors, and retries that
honour the server's `Retry-After` and `RateLimit-*` headers."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests

# Answers worth retrying: rate limited, and the server or a proxy in front of it briefly unable.
RETRY_STATUSES = frozenset({429, 502, 503, 504})


class ApiError(Exception):
    """An error answer of the API: `status`, the body's `message` and `errors`, the response."""

    def __init__(self, status: int, message: str, errors: Mapping[str, Any] | None = None,
                 response: requests.Response | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.errors = dict(errors or {})
        self.response = response


@dataclass(frozen=True)
class Credentials:
    """How requests authenticate: exactly one of an API key, a bearer token, or email+password."""

    apikey: str | None = None
    token: str | None = None
    email: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        modes = [self.apikey is not None, self.token is not None,
                 self.email is not None or self.password is not None]
        if sum(modes) != 1:
            raise ValueError("give exactly one of apikey=, token=, or email= with password=")
        if (self.email is None) != (self.password is None):
            raise ValueError("basic authentication needs both email= and password=")

    def apply(self, session: requests.Session) -> None:
        """Set the session's Authorization (basic through requests' own auth)."""
        if self.apikey is not None:
            session.headers["Authorization"] = f"Apikey {self.apikey}"
        elif self.token is not None:
            session.headers["Authorization"] = f"Bearer {self.token}"
        else:
            session.auth = (self.email or "", self.password or "")

    def __repr__(self) -> str:  # never print a secret
        mode = "apikey" if self.apikey else "token" if self.token else f"basic {self.email}"
        return f"Credentials({mode})"


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After value (delta seconds or an HTTP date); None if absent
    or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class Transport:
    """Sends requests to one API base URL, retrying what can be retried.

    - 429, 502, 503, 504 and connection errors are retried up to `retries` times, waiting the
      answer's `Retry-After` when it has one, else an exponential backoff with jitter;
      a wait longer than `max_wait` is not sat out: the error is raised at once.
    - After an answer with `RateLimit-Remaining: 0`, the next request waits `RateLimit-Reset`
      seconds first, so a long pull paces itself instead of running into a 429.
    """

    def __init__(self, base_url: str, credentials: Credentials, *, timeout: float = 60.0,
                 retries: int = 5, max_wait: float = 120.0, backoff: float = 0.5,
                 sleep: Callable[[float], None] = time.sleep,
                 session: requests.Session | None = None) -> None:
        self.base_url = base_url
        self.timeout = timeout
        self.retries = retries
        self.max_wait = max_wait
        self.backoff = backoff
        self.sleep = sleep
        self.session = session or requests.Session()
        self.session.headers.setdefault("User-Agent", "sds-client/0.1")
        credentials.apply(self.session)
        self._not_before = 0.0  # monotonic time before which the rate limit says wait
        self.waited = 0.0  # seconds slept for rate limits and retries (for callers' reports)

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self.waited += seconds
            self.sleep(seconds)

    def _note_rate(self, headers: Mapping[str, str]) -> None:
        remaining, reset = headers.get("RateLimit-Remaining"), headers.get("RateLimit-Reset")
        try:
            if remaining is not None and int(remaining) <= 0 and reset is not None:
                self._not_before = time.monotonic() + float(reset)
        except ValueError:
            pass  # a proxy's header in another form: pacing is only an optimisation

    def request(self, method: str, path: str, *, params: Any = None, json: Any = None,
                headers: Mapping[str, str] | None = None, stream: bool = False,
                auth: bool = True) -> requests.Response:
        """The response of a successful (2xx) request; ApiError for an error answer."""
        url = self.base_url + path
        attempt = 0
        while True:
            self._wait(self._not_before - time.monotonic())
            try:
                kwargs: dict[str, Any] = {}
                if not auth:
                    kwargs["auth"] = None
                response = self.session.request(method, url, params=params, json=json,
                                                headers=dict(headers or {}),
                                                timeout=self.timeout, stream=stream, **kwargs)
            except (requests.ConnectionError, requests.Timeout):
                if attempt >= self.retries:
                    raise
                self._wait(self._backoff(attempt))
                attempt += 1
                continue
            self._note_rate(response.headers)
            if response.status_code in RETRY_STATUSES and attempt < self.retries:
                wait = retry_after_seconds(response.headers.get("Retry-After"))
                if wait is None:
                    wait = self._backoff(attempt)
                if wait <= self.max_wait:
                    response.close()
                    self._wait(wait)
                    attempt += 1
                    continue
            if response.status_code >= 400:
                raise _error(response)
            return response

    def _backoff(self, attempt: int) -> float:
        return min(self.max_wait, self.backoff * 2 ** attempt) * (0.5 + random.random() / 2)  # noqa: S311  jitter, not a secret


def _error(response: requests.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "message" in body:
        return ApiError(response.status_code, str(body["message"]), body.get("errors"), response)
    return ApiError(response.status_code, response.text[:500] or response.reason, None, response)
