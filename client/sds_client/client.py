"""`Client`: tables, columns, rows of `/api/v2/data/{table}` page by page, DataFrames, CSV
export, and the `Sync` of a table's changed rows."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from sds_client._http import Credentials, Transport

if TYPE_CHECKING:  # pandas is an optional extra (pip install 'sds-client[pandas]')
    import pandas as pd

API_PREFIX = "/api/v2"
UNIT_PARAMS = ("temp", "pres", "size", "ratio", "speed")
# Unit code (as X-Units writes it, upper case) -> measurement class parameter. The codes of
# different classes never collide, so the header alone says which class each code is for.
UNIT_CLASS = {"C": "temp", "F": "temp", "MB": "pres", "KP": "pres", "PCT": "ratio",
              "DEC": "ratio", "MM": "size", "IN": "size", "MPS": "speed", "KPH": "speed",
              "MPH": "speed"}
EPOCH = "1970-01-01T00:00:00Z"


def _iso(value: Any) -> Any:
    """A parameter value as the API reads it: datetimes in UTC with Z, dates as dates."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: give a time zone (e.g. tzinfo=UTC)")
        text = value.astimezone(UTC).isoformat()
        return text.replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    return value


def data_params(*, device: str | Iterable[str] | None = None, location: str | None = None,
                select: str | Iterable[str] | None = None, start_time: Any = None,
                end_time: Any = None, order: str | None = None, local_time: str | None = None,
                updated_since: Any = None, page_size: int | None = None,
                interval: str | None = None, points: int | None = None,
                **units: str) -> dict[str, Any]:
    """The query parameters of a /data listing; lists become comma-separated values.
    `interval` or `points` ask `calibrated` for buckets instead of readings."""
    unknown = set(units) - set(UNIT_PARAMS)
    if unknown:
        raise TypeError(f"unknown parameter(s) {', '.join(sorted(unknown))}; units are "
                        f"{', '.join(UNIT_PARAMS)}")
    params: dict[str, Any] = {
        "device": device if device is None or isinstance(device, str) else ",".join(device),
        "location": location,
        "select": select if select is None or isinstance(select, str) else ",".join(select),
        "start_time": _iso(start_time), "end_time": _iso(end_time), "order": order,
        "local_time": local_time, "updated_since": _iso(updated_since), "limit": page_size,
        "interval": interval, "points": points, **units,
    }
    return {k: v for k, v in params.items() if v is not None}


class Listing:
    """The rows of one /data listing, fetched a page at a time as it is iterated.

    After the first page: `units` maps measurement classes to the unit codes in effect
    (from X-Units, e.g. {"temp": "F"}); `watermark` is the X-Updated-Since-Next of the first
    page when the listing asked for `updated_since`; `pages` counts pages read.
    """

    def __init__(self, client: Client, table: str, params: Mapping[str, Any], *,
                 progress: bool | None, max_rows: int | None = None) -> None:
        self.client = client
        self.table = table
        self.params = dict(params)
        self.progress = progress
        self.max_rows = max_rows
        self.units: dict[str, str] = {}
        self.watermark: str | None = None
        self.pages = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        show = self.progress if self.progress is not None else sys.stderr.isatty()
        bar = tqdm(desc=f"{self.table}", unit=" rows", disable=not show, leave=True,
                   total=self.max_rows)
        sent = 0
        cursor: str | None = None
        try:
            while True:
                params = dict(self.params)
                if cursor:
                    params["cursor"] = cursor
                response = self.client.transport.request(
                    "GET", f"{API_PREFIX}/data/{self.table}", params=params,
                    headers={"Accept": "application/json"})
                rows = response.json()
                if self.pages == 0:
                    self.units = parse_units(response.headers.get("X-Units", ""))
                    self.watermark = response.headers.get("X-Updated-Since-Next")
                self.pages += 1
                cursor = response.headers.get("X-Cursor-Next")
                for row in rows:
                    yield row
                    sent += 1
                    if self.max_rows is not None and sent >= self.max_rows:
                        return
                bar.update(len(rows))
                if not cursor:
                    return
        finally:
            bar.close()


def parse_units(header: str) -> dict[str, str]:
    """X-Units ("C,mb,pct") -> {"temp": "C", "pres": "mb", "ratio": "pct"}."""
    found = {}
    for code in filter(None, (c.strip() for c in header.split(","))):
        cls = UNIT_CLASS.get(code.upper())
        if cls is not None:
            found[cls] = code
    return found


class Client:
    """A client of one service. Authenticate with exactly one of `apikey=`, `token=` (bearer),
    or `email=` and `password=` (basic); `Client.login()` trades a password for a token.

    `base_url` is the service address, e.g. http://127.0.0.1:8080 (a trailing /api/v2 is
    accepted). Retries and rate-limit pacing: see `sds_client._http.Transport`; `retries`,
    `max_wait`, `timeout` and `sleep` are passed to it.
    """

    def __init__(self, base_url: str, *, apikey: str | None = None, token: str | None = None,
                 email: str | None = None, password: str | None = None,
                 **transport: Any) -> None:
        base = base_url.rstrip("/")
        if base.endswith(API_PREFIX):
            base = base[: -len(API_PREFIX)]
        self.base_url = base
        self.transport = Transport(base, Credentials(apikey, token, email, password),
                                   **transport)
        self._columns: dict[str, list[dict[str, str]]] = {}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **transport: Any) -> Client:
        """From SDS_URL and one of SDS_APIKEY, SDS_TOKEN, or SDS_EMAIL with SDS_PASSWORD."""
        env = os.environ if environ is None else environ
        url = env.get("SDS_URL", "http://127.0.0.1:8080")
        if env.get("SDS_APIKEY"):
            return cls(url, apikey=env["SDS_APIKEY"], **transport)
        if env.get("SDS_TOKEN"):
            return cls(url, token=env["SDS_TOKEN"], **transport)
        if env.get("SDS_EMAIL"):
            return cls(url, email=env["SDS_EMAIL"], password=env.get("SDS_PASSWORD", ""),
                       **transport)
        raise ValueError("set SDS_APIKEY, SDS_TOKEN, or SDS_EMAIL and SDS_PASSWORD")

    @classmethod
    def login(cls, base_url: str, *, email: str, password: str, org: str | None = None,
              **transport: Any) -> Client:
        """A bearer-token client: POST /auth/token with the password, which is not kept. The
        token acts in `org` (an organisation id of the user's), else their home one."""
        basic = cls(base_url, email=email, password=password, **transport)
        body = {"email": email, "password": password}
        if org is not None:
            body["org"] = org
        answer = basic.transport.request(
            "POST", f"{API_PREFIX}/auth/token", json=body, auth=False).json()
        basic.transport.session.close()
        return cls(base_url, token=answer["token"], **transport)

    def close(self) -> None:
        """Close the HTTP session."""
        self.transport.session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- metadata -------------------------------------------------------------------------
    def tables(self) -> list[str]:
        """Names of the data tables."""
        return list(self.transport.request("GET", f"{API_PREFIX}/schemas").json())

    def columns(self, table: str) -> list[dict[str, str]]:
        """Column metadata of `table` (column_name, data_type, description); cached."""
        if table not in self._columns:
            self._columns[table] = self.transport.request(
                "GET", f"{API_PREFIX}/schemas/{table}").json()
        return self._columns[table]

    # ---- annotations ----------------------------------------------------------------------
    def annotations(self, *, page_size: int | None = None, start_time: Any = None,
                    end_time: Any = None, **filters: Any) -> list[dict[str, Any]]:
        """Annotations (records as the API sends them), filtered by `device`, `location`,
        `start_time`/`end_time` (overlap) and `tags` (all must be carried)."""
        from sds_client import annotations

        return list(annotations.iter_annotations(
            self.transport, annotations.list_params(
                start_time=_iso(start_time), end_time=_iso(end_time), **filters),
            page_size=page_size or annotations.PAGE_SIZE))

    def annotations_pandas(self, **filters: Any) -> pd.DataFrame:
        """`annotations()` as a DataFrame: times as UTC datetimes (`end_time` NaT for an
        instant); needs the `pandas` extra."""
        from sds_client.annotations import to_frame

        return to_frame(self.annotations(**filters))

    def create_annotation(self, text: str, *, start_time: Any, end_time: Any = None,
                          device: str | None = None, location: str | None = None,
                          tags: Iterable[str] = ()) -> dict[str, Any]:
        """Create an annotation on `device` (name) or `location` (id), at `start_time` or over
        `start_time`..`end_time`; returns its record."""
        from sds_client import annotations

        body = annotations.create_body(text, start_time=_iso(start_time), end_time=_iso(end_time),
                                       device=device, location=location, tags=tags)
        return dict(self.transport.request("POST", annotations.PATH, json=body).json())

    def delete_annotation(self, annotation_id: str) -> None:
        """Delete an annotation."""
        from sds_client.annotations import PATH

        self.transport.request("DELETE", f"{PATH}/{annotation_id}")

    # ---- rows -----------------------------------------------------------------------------
    def rows(self, table: str, *, progress: bool | None = None, max_rows: int | None = None,
             **params: Any) -> Listing:
        """The rows of a listing as an iterable that follows `X-Cursor-Next` page by page.

        Parameters are those of /data (`device` may be a list), with `page_size` for `limit`;
        `max_rows` stops early. `progress` shows a tqdm bar (default: when stderr is a tty).
        """
        return Listing(self, table, data_params(**params), progress=progress,
                       max_rows=max_rows)

    def to_pandas(self, table: str, *, progress: bool | None = None,
                  max_rows: int | None = None, **params: Any) -> pd.DataFrame:
        """The rows of a listing as a DataFrame (needs the `pandas` extra).

        Indexed by `time` (a UTC DatetimeIndex); other timestamp columns are UTC datetimes;
        with `local_time=<zone>` a `local_time` column in that zone (DST-aware), with an
        offset a column at that fixed offset. `df.attrs["units"]` holds the unit codes in
        effect per measurement class, `df.attrs["descriptions"]` the columns' descriptions.
        """
        from sds_client.frame import to_frame

        listing = self.rows(table, progress=progress, max_rows=max_rows, **params)
        rows = list(listing)
        return to_frame(rows, self.columns(table), units=listing.units,
                        local_time=params.get("local_time"))

    def export_csv(self, table: str, out: Any, *, progress: bool | None = None,
                   **params: Any) -> int:
        """Write the listing as CSV (the server's own CSV, one header) to the binary file
        `out`; returns the number of data lines."""
        query = data_params(**params)
        cursor: str | None = None
        lines = 0
        first = True
        show = progress if progress is not None else sys.stderr.isatty()
        with tqdm(desc=table, unit=" rows", disable=not show, leave=True) as bar:
            while True:
                if cursor:
                    query["cursor"] = cursor
                response = self.transport.request(
                    "GET", f"{API_PREFIX}/data/{table}", params=query,
                    headers={"Accept": "text/csv"})
                body = response.content
                header, _, rest = body.partition(b"\n")
                if first:  # every page repeats the header line: keep the first one
                    out.write(header + b"\n")
                    first = False
                out.write(rest)
                count = rest.count(b"\n")
                lines += count
                bar.update(count)
                cursor = response.headers.get("X-Cursor-Next")
                if not cursor:
                    return lines

    def sync(self, table: str, *, state: str | os.PathLike[str] | None = None,
             **params: Any) -> Sync:
        """A `Sync` of `table` (rollup tables: hourly, local_hourly, daily) for the given
        listing parameters; `state` is a JSON file that keeps its watermark between runs."""
        return Sync(self, table, state=state, **params)


class Sync:
    """Incremental pulls of one listing: each `sync()` returns the rows whose `update_time`
    moved since the previous call (new rows, and rows recomputed because of late data), and
    keeps the server's watermark for the next call, in `state` (a JSON file) when given.

    Apply the rows as upserts on (device, time) to mirror the table; see docs/client.md.
    """

    def __init__(self, client: Client, table: str, *,
                 state: str | os.PathLike[str] | None = None, **params: Any) -> None:
        if "updated_since" in params:
            raise TypeError("Sync keeps updated_since itself; start from a state file instead")
        self.client = client
        self.table = table
        self.params = params
        self.state = Path(state) if state is not None else None
        self.watermark: str | None = None
        self.units: dict[str, str] = {}  # unit codes of the last sync(), as Listing.units
        if self.state is not None and self.state.exists():
            saved = json.loads(self.state.read_text())
            if saved.get("table") != table or saved.get("params") != _jsonable(params):
                raise ValueError(f"{self.state} belongs to another listing "
                                 f"({saved.get('table')} {saved.get('params')})")
            self.watermark = saved.get("watermark")

    def sync(self, *, progress: bool | None = None) -> list[dict[str, Any]]:
        """The rows changed since the last call (all rows the first time); moves the
        watermark only once the whole listing has been read."""
        listing = self.client.rows(self.table, progress=progress,
                                   updated_since=self.watermark or EPOCH, **self.params)
        rows = list(listing)
        if listing.watermark is None:
            raise RuntimeError("the server sent no X-Updated-Since-Next: it does not support "
                               "updated_since on this table")
        self.watermark = listing.watermark
        self.units = listing.units
        if self.state is not None:
            tmp = self.state.with_suffix(self.state.suffix + ".tmp")
            tmp.write_text(json.dumps({"table": self.table, "params": _jsonable(self.params),
                                       "watermark": self.watermark}, indent=2))
            tmp.replace(self.state)
        return rows

    def sync_pandas(self, *, progress: bool | None = None) -> pd.DataFrame:
        """`sync()` as a DataFrame (as `Client.to_pandas` builds it)."""
        from sds_client.frame import to_frame

        rows = self.sync(progress=progress)
        return to_frame(rows, self.client.columns(self.table), units=self.units,
                        local_time=self.params.get("local_time"))


def _jsonable(params: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data_params(**params), default=str))
