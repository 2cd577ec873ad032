"""Annotations (`/api/v2/annotations`): notes on a device or a location for an instant or a
time range. Listing pages through the paged envelope; `to_frame` makes the DataFrame."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from sds_client._http import Transport

PATH = "/api/v2/annotations"
COLUMNS = ("id", "device", "location", "start_time", "end_time", "text", "tags", "author_id",
           "author", "created", "updated")
TIMES = ("start_time", "end_time", "created", "updated")
PAGE_SIZE = 1000


def list_params(*, device: str | None = None, location: str | None = None,
                start_time: Any = None, end_time: Any = None,
                tags: str | Iterable[str] | None = None) -> dict[str, Any]:
    """The query parameters of a listing (times already as the API reads them); `tags` (all
    must be carried) joined by commas."""
    params = {"device": device, "location": location, "start_time": start_time,
              "end_time": end_time,
              "tag": tags if tags is None or isinstance(tags, str) else ",".join(tags)}
    return {k: v for k, v in params.items() if v is not None}


def iter_annotations(transport: Transport, params: Mapping[str, Any], *,
                     page_size: int = PAGE_SIZE) -> Iterator[dict[str, Any]]:
    """Every annotation the filters select, by start_time, page after page."""
    page = 1
    while True:
        body = transport.request("GET", PATH, params={**params, "limit": page_size,
                                                      "page": page}).json()
        yield from body["items"]
        if page >= body["pages"]:
            return
        page += 1


def create_body(text: str, *, start_time: Any, end_time: Any = None, device: str | None = None,
                location: str | None = None, tags: Iterable[str] = ()) -> dict[str, Any]:
    """The JSON body of a new annotation (exactly one of device and location; times already
    as the API reads them)."""
    if (device is None) == (location is None):
        raise TypeError("give exactly one of device= and location=")
    body: dict[str, Any] = {"text": text, "start_time": start_time, "tags": list(tags)}
    if end_time is not None:
        body["end_time"] = end_time
    body["device" if device is not None else "location"] = device or str(location)
    return body


def to_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Annotations as a DataFrame: one row each, times as UTC datetimes (`end_time` NaT for
    an instant), `tags` as lists."""
    import pandas as pd

    frame = pd.DataFrame.from_records(list(records), columns=list(COLUMNS))
    for name in TIMES:
        frame[name] = pd.to_datetime(frame[name], utc=True, format="ISO8601")
    return frame
