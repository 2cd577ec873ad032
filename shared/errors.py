"""Domain exceptions shared by the three processes, independent of HTTP.

    ServiceError
    ├── NotFound            -> 404   (UnknownTable, UnknownDevice, UnknownLocation, UnknownObject)
    ├── BadRequest          -> 400   (UnknownColumn, BadParameter, BadTimeRange, BadCursor)
    ├── Conflict            -> 409   (DuplicateName, OverlappingDeployment)
    ├── Unauthorized        -> 401
    ├── Forbidden           -> 403
    ├── TooManyRequests     -> 429
    └── ColdTierUnavailable -> 503   (a cold-tier file missing or unreadable: serve.coldguard)
    InvalidReading          (ingest: a reading or message that goes to quarantine)

`serve.errors` maps these classes to status codes in one table.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """Base of every error a caller can be told about; `message` is safe to show to users."""

    def __init__(self, message: str, *, errors: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors


class NotFound(ServiceError):
    """The named object does not exist, or belongs to another organisation."""


class UnknownTable(NotFound):
    """No data table of that name."""


class UnknownDevice(NotFound):
    """No device of that name visible to the caller."""


class UnknownLocation(NotFound):
    """No location of that id visible to the caller."""


class UnknownObject(NotFound):
    """Any other missing object (organisation, user, API key)."""


class BadRequest(ServiceError):
    """A parameter or body field is invalid."""


class UnknownColumn(BadRequest):
    """`select` named a column the table does not have."""


class BadParameter(BadRequest):
    """A parameter has the wrong form or value."""


class BadTimeRange(BadRequest):
    """start_time after end_time, or a window beyond the allowed span."""


class BadCursor(BadRequest):
    """The cursor is garbled, tampered with, or from other parameters."""


class Conflict(ServiceError):
    """The change would break a uniqueness or overlap rule."""


class DuplicateName(Conflict):
    """An object with that unique name already exists."""


class OverlappingDeployment(Conflict):
    """A device would stand at two locations at once."""


class Unauthorized(ServiceError):
    """Missing, wrong, expired or revoked credentials."""

    def __init__(self, message: str, *, scheme: str = "Basic", error: str | None = None) -> None:
        super().__init__(message)
        self.scheme = scheme
        self.error = error


class Forbidden(ServiceError):
    """Valid credentials that lack the needed scope or method."""


class TooManyRequests(ServiceError):
    """Throttled; `retry_after` seconds until the next attempt may succeed."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ColdTierUnavailable(ServiceError):
    """Readings the request reaches are in a cold-tier file that cannot be read."""


class InvalidReading(Exception):
    """A reading or whole message that cannot be stored; `code` is the quarantine reason code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
