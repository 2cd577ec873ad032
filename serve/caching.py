"""Conditional answers: `ETag` and `If-None-Match` -> 304 for answers that cannot change.

Two kinds of answer qualify: `/schemas` (the column registry, fixed for a release) and `/data`
pages whose whole window lies before the late-data horizon (`SDS_INGEST_HORIZON_DAYS`: ingest
refuses older readings, so nothing new can reach those rows or their rollups). The ETag is a
hash of the answer's bytes, so an operator's recomputation (`sds aggregate backfill`) or a
retention run that removes rows changes it: a client never keeps a stale page. Such a `/data`
page is therefore built whole before it is sent (at most one page, `limit` <= 10,000 rows),
instead of streamed. `Cache-Control: private, no-cache`: the answers depend on credentials, and
a client asks again each time (a 304 costs a few bytes, not the page).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flask import Response, request

# Local-day pages read one day beyond their window on each side (queries._LOCAL_DAY_MARGIN),
# and readings in flight when the horizon passes them are still being stored: one more day.
_MARGIN = timedelta(days=2)
CACHE_CONTROL = "private, no-cache"


def settled(end: datetime, horizon_days: int, *, now: datetime | None = None) -> bool:
    """True when rows up to `end` can no longer change: `end` is older than the late-data
    horizon (with a margin)."""
    now = now or datetime.now(UTC)
    return end + _MARGIN < now - timedelta(days=horizon_days)


def conditional(response: Response) -> Response:
    """Give a whole (not streamed) answer a strong ETag of its bytes and answer 304 when the
    request's If-None-Match names it (weak comparison, as RFC 9110 says for If-None-Match: the
    edge marks the ETag weak when it gzips)."""
    response.add_etag()
    response.headers["Cache-Control"] = CACHE_CONTROL
    response.make_conditional(request)  # in place (it returns werkzeug's base type)
    return response
