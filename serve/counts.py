"""The one parser of whole-number query parameters (`limit`, `page`, `points`, the dashboard's
`days` and `before`), strict: ASCII digits and nothing else (issue 30 item 5).

Python's `int()` takes `+10000`, ` 10000` (`%2010000`), `10_000` and full-width `１０`, and the
layers that classify a request by its size (serve.fairshare, the edge's map in
deploy/nginx/nginx.conf) did not: a number spelled that way was served in full but metered
as small. So every layer reads a number through here (the edge with a regular expression of
the same rule), and anything else is a 400 naming the parameter. Leading zeros are digits:
`0100` is 100, as the spec's plain "integer" allows.
"""

from __future__ import annotations

import re
from typing import Any

from marshmallow import ValidationError, fields

DIGITS = re.compile(r"[0-9]{1,18}")  # ASCII only (`\d` matches other scripts' digits too)


def plain(raw: object) -> int | None:
    """The value of `raw` when it is plain ASCII digits (at most 18 of them), else None."""
    if isinstance(raw, str) and DIGITS.fullmatch(raw):
        return int(raw)
    return None


def rule(low: int, high: int) -> str:
    """What a count parameter must be, as its 400 says it."""
    return f"must be an integer from {low} to {high} (ASCII digits only)"


def parse(name: str, raw: object, low: int, high: int) -> int:
    """`raw` as a count from `low` to `high`; ValidationError (the 400 names `name`) else."""
    value = plain(raw)
    if value is None or not low <= value <= high:
        raise ValidationError(rule(low, high), field_name=name)
    return value


class Count(fields.Integer):
    """A whole-number query parameter from `low` to `high`, parsed by `parse` (documented in
    the OpenAPI document as an integer with those bounds)."""

    def __init__(self, low: int, high: int, **kwargs: Any) -> None:
        metadata = {"minimum": low, "maximum": high, **kwargs.pop("metadata", {})}
        super().__init__(metadata=metadata, **kwargs)
        self.low, self.high = low, high

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        try:
            return parse(attr or self.name or "value", value, self.low, self.high)
        except ValidationError as exc:
            # The schema names the field itself: the message alone.
            raise ValidationError(rule(self.low, self.high)) from exc
