"""The paged envelope of model data (interface section 2.6): `limit` and `page` arguments,
the `{items, limit, page, pages, total}` answer, and the past-the-last-page rule.

Used by every listing endpoint (devices, locations, the location summary). The keyset
cursor of `/data` is a different thing: `serve.cursor`.
"""

from __future__ import annotations

import math
from typing import Any

from marshmallow import EXCLUDE, Schema, fields

from serve.counts import Count
from shared.errors import NotFound

LIMIT_DEFAULT = 24
LIMIT_MAX = 10000
PAGE_MAX = 1_000_000_000  # bounds OFFSET arithmetic; any real page lies far below


class PageArgsSchema(Schema):
    """`limit` (1..10000, default 24) and `page` (from 1, default 1), ASCII digits only
    (serve.counts); other keys ignored."""

    class Meta:
        unknown = EXCLUDE

    limit = Count(1, LIMIT_MAX, load_default=LIMIT_DEFAULT)
    page = Count(1, PAGE_MAX, load_default=1)


class PageSchema(Schema):
    """The paged envelope of model data (section 2.6)."""

    items = fields.List(fields.Dict())
    limit = fields.Integer()
    page = fields.Integer()
    pages = fields.Integer()
    total = fields.Integer()


def offset(limit: int, page: int) -> int:
    """Rows before `page` (pages count from 1)."""
    return (page - 1) * limit


def check_page(total: int, limit: int, page: int) -> int:
    """`pages` for `total` records; NotFound for a page past the last (page 1 always exists)."""
    pages = math.ceil(total / limit)
    if page > max(pages, 1):
        raise NotFound(f"page {page} is past the last page ({pages})")
    return pages


def envelope(items: list[dict[str, Any]], *, total: int, limit: int, page: int,
             pages: int) -> dict[str, Any]:
    """The paged envelope around one page of records."""
    return {"items": items, "limit": limit, "page": page, "pages": pages, "total": total}
